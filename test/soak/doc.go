// Package soak is allot's chaos soak: the real allotd and allot-cni binaries under load
// while processes are killed, with invariants checked all along and figures printed at the
// end (make soak).
//
//   - TestSoakStandalone: 8 workers exec allot-cni ADD and DEL, as a runtime does (CNI
//     environment, network configuration on stdin), against one allotd that is SIGKILLed at
//     random 1-5 s intervals and restarted.
//   - TestSoakCluster: a real etcd and kube-apiserver (test/k8senv), 3 agents and 2
//     operators (allotd processes), pods created as API objects on the simulated nodes and
//     given addresses through each agent's socket by allot-cni; agents and the operator
//     leader are SIGKILLed at random, kube-apiserver and etcd are restarted.
//
// Checked continuously: no address held by two live containers, no block on two nodes,
// every acknowledged ADD still allocated until its DEL; at the end, after a CNI GC listing
// the live containers, nothing else is allocated (no leaks).
//
// ALLOT_SOAK sets how long each scenario runs its chaos (default 15s; make soak: 10m, SOAK=
// to change). The two scenarios run in parallel. Under -short the soak skips; a missing
// prerequisite (kube-apiserver/etcd from `make kube-binaries`) ends it by internal/testenv's
// rule: a failure under CI and make test, a skip with the reason elsewhere.
package soak
