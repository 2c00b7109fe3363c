# allotd as a DaemonSet (install-cni, the agent's network configuration, keep or uninstall
# at stop, the datapath following the node's blocks); included by the root Makefile.
#
#   make test-daemonset   core/cniinstall and the real allotd in a network namespace against a
#                         real API server (test/daemonset: root, iptables, `make kube-binaries`)

.PHONY: test-daemonset

test-daemonset: kube-binaries
	$(GO) test -count=1 ./core/cniinstall/ ./core/datapathctl/ ./cmd/allotd/ ./test/daemonset/
