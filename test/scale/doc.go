// Package scale runs allot's multi-pool IPAM at cluster scale on a real kube-apiserver and
// etcd (test/k8senv): the operator (core/operator) in-process and N simulated nodes, each
// the real node agent (core/agent with its own ipam.Manager and node store) as goroutines.
// Every agent has its own informers as on a node (its AllotNode, Node and pods by field
// selector, IPPools, Namespaces) and its own HTTP/2 connection (shared by a few nodes only
// when the open-file limit is too low for one each), so the API server serves N agents'
// watches as in a cluster of N nodes; no Node objects or pods exist, only what the agents and the operator
// create. The agents authenticate as the chart's ServiceAccount with its ClusterRole (API
// Priority and Fairness queues them as a cluster's agents), the operator as an admin.
//
// It measures the time until every node has its blocks (an IPv4 and an IPv6 block of the
// pool "default", as the agent's default pre-allocation asks), the API requests per node
// per minute in steady state (counted on the clients, by verb and resource: watches only,
// nothing polls), and the memory of the operator and of one agent (live heap).
//
// TestScale (200 nodes) keeps the path working under make test; BenchmarkScale (5,000
// nodes, `make bench-scale`) is the figure, with the goal of 60 s.
package scale
