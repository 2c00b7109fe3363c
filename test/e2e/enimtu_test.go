package e2e

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/allot-ipam/allot/core/config"
)

// TestENIPodMTU: a pod plumbed as ENI mode plumbs it (ptp with allot-cni, the chart's default
// conflist in ENI mode) gets the ENI's MTU on its eth0 and on the host side of its veth when
// the conflist carries it (the chart's eni.mtu, 9001 by default, as the AWS VPC CNI's
// AWS_VPC_ENI_MTU), and ptp's 1500 without it. The pod still reaches the node over both
// families.
func TestENIPodMTU(t *testing.T) {
	needNetwork(t)
	for _, tc := range []struct {
		name string
		mtu  string // ptp's "mtu" field, "" for none
		want int
	}{
		{"eni.mtu default", fmt.Sprint(config.MaxENIMTU), config.MaxENIMTU},
		{"eni.mtu lowered", "8500", 8500},
		{"without mtu", "", 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := netip.MustParsePrefix("2600:1f18:0:1:b::/80")
			sock := startLinkLocalService(t, prefix, true)
			mtu := ""
			if tc.mtu != "" {
				mtu = `"mtu":` + tc.mtu + `,`
			}
			n := newNode(t)
			n.writeConf(n.confDir, network, fmt.Sprintf(`{"type":"ptp","ipMasq":false,%s"ipam":{"type":"allot-cni","socket":%q,"timeout":"20s"}}`, mtu, sock))
			pod := newNetns(t)
			out := n.cnitool("", []string{"CNI_ARGS=" + k8sArgs}, "add", network, nsPath(pod))
			if out.err != nil {
				t.Fatalf("cnitool add: %v\n%s%s", out.err, out.stdout, out.stderr)
			}
			if got := linkMTU(t, pod, "eth0"); got != tc.want {
				t.Errorf("pod eth0 MTU %d, want %d", got, tc.want)
			}
			veths := hostVeths(t, n.ns)
			if len(veths) != 1 || veths[0].Attrs().MTU != tc.want {
				t.Errorf("host-side veths %v, want one of MTU %d", vethMTUs(veths), tc.want)
			}
			nodeAddr := netip.MustParseAddr("10.99.0.1")
			runCmd(t, "ip", "-n", n.ns, "addr", "add", nodeAddr.String()+"/32", "dev", "lo")
			eventuallyConnect(t, pod, n.ns, nodeAddr, eniPodV4)
			if out := n.cnitool("", []string{"CNI_ARGS=" + k8sArgs}, "del", network, nsPath(pod)); out.err != nil {
				t.Fatalf("cnitool del: %v\n%s%s", out.err, out.stdout, out.stderr)
			}
		})
	}
}

func linkMTU(t *testing.T, ns, name string) int {
	t.Helper()
	l, err := handleIn(t, ns).LinkByName(name)
	if err != nil {
		t.Fatalf("%s in %s: %v", name, ns, err)
	}
	return l.Attrs().MTU
}

// hostVeths are the veths of the node namespace (ptp's host sides).
func hostVeths(t *testing.T, ns string) []netlink.Link {
	t.Helper()
	ls, err := handleIn(t, ns).LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []netlink.Link
	for _, l := range ls {
		if l.Type() == "veth" {
			out = append(out, l)
		}
	}
	return out
}

func vethMTUs(ls []netlink.Link) map[string]int {
	out := map[string]int{}
	for _, l := range ls {
		out[l.Attrs().Name] = l.Attrs().MTU
	}
	return out
}
