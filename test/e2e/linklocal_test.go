package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/allot-ipam/allot/core/api/server"
	"github.com/allot-ipam/allot/core/enihost"
	"github.com/allot-ipam/allot/core/enihost/enihosttest"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/internal/testenv"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/sdk/policy"
)

// linkLocalGW is how ENI mode presents an address of the node's IPv6 /80 (as the AWS VPC
// CNI does): a /128 whose next hop is the link-local fe80::1.
var linkLocalGW = netip.MustParseAddr("fe80::1")

// eniPodV4 is an IPv4 address of a secondary ENI's subnet, served as ENI mode serves it: a
// single-address block presented with the subnet's prefix and its router as gateway.
var (
	eniSubnet4 = netip.MustParsePrefix("10.1.1.0/24")
	eniRouter4 = netip.MustParseAddr("10.1.1.1")
	eniPodV4   = netip.MustParseAddr("10.1.1.5")
)

// startLinkLocalService serves the local API on a socket from an agent-mode manager whose
// pool holds an IPv6 /80 presented as ENI mode presents it (and with v4, eniPodV4 too), and
// returns the socket.
func startLinkLocalService(t *testing.T, prefix netip.Prefix, v4 bool) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, filepath.Join(dir, "allot.db"), store.Options{NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	pol, _ := ciliumannotations.New(ciliumannotations.Config{})
	m, err := ipam.New(ctx, ipam.Options{Store: st, Logger: log, Policy: func(string) policy.PoolPolicy { return pol },
		Dynamic: &ipam.DynamicOptions{Node: "node", Wait: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.EnsurePool("default", policy.IPv6); err != nil {
		t.Fatal(err)
	}
	if err := m.AddCIDRWith("default", prefix, ipam.Addressing{Bits: 128, Gateway: linkLocalGW}); err != nil {
		t.Fatal(err)
	}
	if v4 {
		if err := m.EnsurePool("default", policy.IPv4); err != nil {
			t.Fatal(err)
		}
		if err := m.AddCIDRWith("default", netip.PrefixFrom(eniPodV4, 32), ipam.Addressing{Bits: eniSubnet4.Bits(), Gateway: eniRouter4}); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "allotd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(m, log)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	})
	return sock
}

// TestIPv6LinkLocalGateway: an IPv6 pod set up through the real CNI chain, allot-cni with
// the ptp plugin as the interface plugin, gets its /128 with a default route via fe80::1
// (allot's answer holds the route: ptp adds none of its own) and reaches the node through it
// (a TCP connection to an address of the node's, and back). With ptp, the chart's plumbing
// in ENI mode, the pod is dual stack: its IPv4 address of an ENI subnet comes with the
// subnet's prefix and router, which ptp holds as a /32 on the pod's host-side veth only (the
// node gets no route to the subnet through the pod), and it reaches the node over IPv4 too.
func TestIPv6LinkLocalGateway(t *testing.T) {
	needNetwork(t)
	for _, tc := range []struct{ name, plugin string }{
		{"ptp-dual-stack", `{"type":"ptp","ipMasq":false,"ipam":{"type":"allot-cni","socket":%q,"timeout":"20s"}}`},
		// The bridge plugin refuses fe80::1/128 beside the bridge's own link-local /64 unless
		// forceAddress lets it replace that one; the node reaches the pod through the bridge
		// by the route ENI host routing adds (the bridge holds no prefix of the pod's).
		{"bridge", `{"type":"bridge","bridge":"allotbr0","isGateway":true,"forceAddress":true,"ipMasq":false,"ipam":{"type":"allot-cni","socket":%q,"timeout":"20s"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := netip.MustParsePrefix("2600:1f18:0:1:a::/80")
			dual := tc.name == "ptp-dual-stack"
			sock := startLinkLocalService(t, prefix, dual)
			n := newNode(t)
			n.writeConf(n.confDir, network, fmt.Sprintf(tc.plugin, sock))
			nodeAddr := netip.MustParseAddr("fd00:a110:1::1")
			runCmd(t, "ip", "-n", n.ns, "addr", "add", nodeAddr.String()+"/128", "dev", "lo")
			pod := newNetns(t)
			out := n.cnitool("", []string{"CNI_ARGS=" + k8sArgs}, "add", network, nsPath(pod))
			if out.err != nil {
				t.Fatalf("cnitool add: %v\n%s%s", out.err, out.stdout, out.stderr)
			}
			r, err := current.NewResult([]byte(out.stdout))
			if err != nil {
				t.Fatalf("cnitool printed %q: %v", out.stdout, err)
			}
			res := r.(*current.Result)
			var podAddr netip.Addr
			for _, ip := range res.IPs {
				if a := netip.MustParseAddr(ip.Address.IP.String()); a.Is6() && prefix.Contains(a) && ip.Gateway.Equal(linkLocalGW.AsSlice()) {
					podAddr = a
				}
			}
			if want := map[bool]int{false: 1, true: 2}[dual]; len(res.IPs) != want || !podAddr.IsValid() {
				t.Fatalf("result %s, want a /128 of %s via %s (and with ptp %s/%d via %s)", out.stdout, prefix, linkLocalGW, eniPodV4, eniSubnet4.Bits(), eniRouter4)
			}
			st := readNetns(t, pod, "eth0")
			if gw := st.defaultGateway(6); gw == nil || !gw.Equal(linkLocalGW.AsSlice()) {
				t.Fatalf("IPv6 default route via %v, want %s (routes %v)", gw, linkLocalGW, st.routes)
			}
			if tc.name == "bridge" {
				routePodThroughHost(t, n.ns, pod, podAddr)
			}
			eventuallyConnect(t, pod, n.ns, nodeAddr, podAddr)
			if dual {
				checkENIv4ThroughPtp(t, n.ns, pod, res, st)
			}
			if out := n.cnitool("", []string{"CNI_ARGS=" + k8sArgs}, "del", network, nsPath(pod)); out.err != nil {
				t.Fatalf("cnitool del: %v\n%s%s", out.err, out.stdout, out.stderr)
			}
		})
	}
}

// checkENIv4ThroughPtp: the pod's IPv4 address of the ENI subnet has the subnet's prefix and
// a default route via its router; on the node, ptp put the router on the pod's veth as a
// /32 only (no route to the subnet through the pod, which would shadow the node's own), and
// the pod reaches an IPv4 address of the node's.
func checkENIv4ThroughPtp(t *testing.T, nodeNS, pod string, res *current.Result, st nsState) {
	t.Helper()
	var ok bool
	for _, ip := range res.IPs {
		ones, _ := ip.Address.Mask.Size()
		ok = ok || (ip.Address.IP.Equal(eniPodV4.AsSlice()) && ones == eniSubnet4.Bits() && ip.Gateway.Equal(eniRouter4.AsSlice()))
	}
	if !ok {
		t.Fatalf("result %v, want %s/%d via %s", res.IPs, eniPodV4, eniSubnet4.Bits(), eniRouter4)
	}
	if gw := st.defaultGateway(4); gw == nil || !gw.Equal(eniRouter4.AsSlice()) {
		t.Fatalf("IPv4 default route via %v, want %s (routes %v)", gw, eniRouter4, st.routes)
	}
	h := handleIn(t, nodeNS)
	rs, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		if ones, _ := r.Dst.Mask.Size(); ones < 32 && eniSubnet4.Contains(netip.MustParseAddr(r.Dst.IP.String())) {
			t.Fatalf("the node routes %s through a pod's link: %v", r.Dst, r)
		}
	}
	nodeAddr := netip.MustParseAddr("10.99.0.1")
	runCmd(t, "ip", "-n", nodeNS, "addr", "add", nodeAddr.String()+"/32", "dev", "lo")
	eventuallyConnect(t, pod, nodeNS, nodeAddr, eniPodV4)
}

// routePodThroughHost runs one pass of ENI host routing (core/enihost) in the node namespace
// for the pod's address, as the agent does after an ADD: it finds the pod's host-side link
// and routes the address to it.
func routePodThroughHost(t *testing.T, nodeNS, pod string, addr netip.Addr) {
	t.Helper()
	h := handleIn(t, nodeNS)
	host := &enihost.Host{Handle: h}
	ctl := &enihost.Controller{Host: host,
		State: func(context.Context) ([]enihost.ENI, []enihost.Pod, error) {
			return nil, []enihost.Pod{{Addr: addr}}, nil
		},
		NetnsFiles: func() ([]string, error) { return []string{nsPath(pod)}, nil }}
	out, err := ctl.SyncOnce(context.Background())
	if err != nil || out.Pending() || out.PodRoutesSet != 1 {
		t.Fatalf("ENI host routing: %+v %v", out, err)
	}
	br, err := h.LinkByName("allotbr0")
	if err != nil {
		t.Fatal(err)
	}
	if routes, _ := host.PodRoutes(); routes[addr] != br.Attrs().Index {
		t.Fatalf("pod routes %v, want %s through the bridge (ifindex %d)", routes, addr, br.Attrs().Index)
	}
	t.Cleanup(func() { _ = host.RemoveAll() })
}

// eventuallyConnect opens TCP connections from namespace from to to:port, where namespace at
// listens, until one succeeds and the listener saw src as its source (neighbour discovery
// may take a moment); it fails the test after a generous wait.
func eventuallyConnect(t *testing.T, from, at string, to, src netip.Addr) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%s to reach %s in %s from %s", from, to, at, src), func() (bool, string) {
		got, err := connectOnce(from, at, to)
		return err == nil && got == src, fmt.Sprintf("source %s, %v", got, err)
	})
}

func connectOnce(from, at string, to netip.Addr) (netip.Addr, error) {
	fromNS, err := netns.GetFromName(from)
	if err != nil {
		return netip.Addr{}, err
	}
	defer fromNS.Close()
	atNS, err := netns.GetFromName(at)
	if err != nil {
		return netip.Addr{}, err
	}
	defer atNS.Close()
	return enihosttest.Connect(fromNS, atNS, to)
}

// handleIn is a netlink handle in the named namespace, closed when the test ends.
func handleIn(t *testing.T, name string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close() // the handle's sockets were opened in the namespace and stay there
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}
