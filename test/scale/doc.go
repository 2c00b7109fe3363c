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
// The operator's heap is what stays live once the agents stopped and their connections
// closed, less what the Go runtime keeps of every goroutine the process ran at once (a
// descriptor each, never freed; measured at the start); an agent's is the heap its stop
// freed, its connection included.
//
// One process of N agents is not N processes: its collector runs once the shared heap grew
// by its live heap and stacks (GOGC=100), about 0.8 MiB per agent, where an agent's own
// process collects only past Go's minimum heap goal of 4 MiB, every ~3.2 MiB it allocates.
// BenchmarkScale sets GOGC=400 (and a memory limit of 7 GiB) to collect as often per byte
// as the agents' own processes would; the figures print the setting, the collections and
// the peak resident memory. GOGC or GOMEMLIMIT in the environment override it.
//
// Knobs: ALLOT_SCALE_NODES (nodes), ALLOT_SCALE_WINDOW (steady-state window),
// ALLOT_SCALE_OPERATOR_WORKERS and ALLOT_SCALE_OPERATOR_QPS (the operator's reconciles at
// once and its client's rate, burst twice that, in place of its defaults, to compare them),
// ALLOT_SCALE_PPROF (serve net/http/pprof there during the run), ALLOT_SCALE_HEAPPROFILE
// (write the heap profile there once the agents stopped, the operator's heap, and to its
// .fleet before they stop); the benchmark's -cpuprofile covers the whole run. Compare runs
// by the test process's CPU per node (and the kube-apiserver's), not by time, on a shared
// machine.
//
// TestScale (200 nodes) keeps the path working under make test; BenchmarkScale (5,000
// nodes, `make bench-scale`) is the figure, with the goal of 60 s.
package scale
