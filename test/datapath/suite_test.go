package datapath_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/datapath/ebpf"
	"github.com/allot-ipam/allot/plugins/datapath/iptables"
	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/allot-ipam/allot/test/datapath/topo"
	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

const (
	echoPort = 7000
	flowsPer = 200 // concurrent flows per pod in the collision test
)

type impl struct {
	name string
	new  func(t *testing.T, pin string) datapath.Datapath
	// leftovers lists what the datapath left in the node namespace.
	leftovers func(t *testing.T, tp *topo.Topology, pin string) []string
	needs     string // binary that must be on PATH
}

func impls() []impl {
	return []impl{
		{name: "iptables", needs: "iptables",
			new:       func(t *testing.T, _ string) datapath.Datapath { return iptables.New(testLogger(t)) },
			leftovers: iptablesLeftovers},
		{name: "ebpf",
			new:       func(t *testing.T, _ string) datapath.Datapath { return ebpf.New(testLogger(t)) },
			leftovers: ebpfLeftovers},
		{name: "ebpf-tc-legacy",
			new:       func(t *testing.T, _ string) datapath.Datapath { return ebpf.New(testLogger(t), ebpf.WithLegacyTC()) },
			leftovers: ebpfLeftovers},
	}
}

// TestMasquerade is the one suite every masquerading datapath runs.
func TestMasquerade(t *testing.T) {
	topo.Require(t)
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			if im.needs != "" {
				testenv.RequireBinary(t, im.needs, "Debian package "+im.needs)
			}
			runSuite(t, im)
		})
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func baseConfig() datapath.Config {
	return datapath.Config{
		PodCIDRs: []netip.Prefix{topo.PodCIDR4, topo.PodCIDR6},
		// The peer (10.99.0.0/24, fd00:a110:99::/64) is inside the cluster.
		NonMasqueradeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
		GCInterval:         time.Second,
	}
}

func inNode(tp *topo.Topology, fn func() error) error { return topo.In(tp.Node, fn) }

func runSuite(t *testing.T, im impl) {
	ctx := context.Background()
	tp, err := topo.New()
	if err != nil {
		t.Fatalf("topology: %v", err)
	}
	t.Cleanup(func() { tp.Close() })

	for _, ns := range []struct {
		name string
		h    func() error
	}{
		{"ext", func() error { return startServers(t, tp.Ext) }},
		{"peer", func() error { return startServers(t, tp.Peer) }},
	} {
		if err := ns.h(); err != nil {
			t.Fatalf("servers in %s: %v", ns.name, err)
		}
	}

	dp := im.new(t, "")
	cfg := baseConfig()
	if err := inNode(tp, func() error { return dp.Apply(ctx, cfg) }); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	t.Cleanup(func() { _ = inNode(tp, func() error { return dp.Remove(ctx) }) })
	// Idempotent.
	if err := inNode(tp, func() error { return dp.Apply(ctx, cfg) }); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	st, err := status(tp, dp)
	if err != nil || !st.Active {
		t.Fatalf("Status after Apply = %+v, %v", st, err)
	}
	t.Logf("status: %+v", st)

	families := []struct {
		name            string
		ext, peer, node netip.Addr
		pods            [2]netip.Addr
	}{
		{"ipv4", topo.Ext4, topo.Peer4, topo.Node4, topo.Pod4},
		{"ipv6", topo.Ext6, topo.Peer6, topo.Node6, topo.Pod6},
	}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			extEcho := netip.AddrPortFrom(f.ext, echoPort)
			t.Run("tcp masqueraded", func(t *testing.T) {
				seen, err := tcpWhoami(tp, 0, extEcho, 0)
				if err != nil {
					t.Fatal(err)
				}
				if seen.Addr() != f.node {
					t.Fatalf("external side saw %s, want node address %s", seen, f.node)
				}
			})
			t.Run("udp masqueraded", func(t *testing.T) {
				seen, err := udpWhoami(tp, 0, extEcho, 0)
				if err != nil {
					t.Fatal(err)
				}
				if seen.Addr() != f.node {
					t.Fatalf("external side saw %s, want node address %s", seen, f.node)
				}
			})
			t.Run("icmp echo, same identifier from both pods", func(t *testing.T) {
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i := range 2 {
					wg.Go(func() { errs[i] = ping(tp, i, f.ext, 0x4242) })
				}
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Errorf("pod%d: %v", i+1, err)
					}
				}
			})
			t.Run("non-masquerade destination keeps pod address", func(t *testing.T) {
				peerEcho := netip.AddrPortFrom(f.peer, echoPort)
				seen, err := tcpWhoami(tp, 0, peerEcho, 0)
				if err != nil {
					t.Fatal(err)
				}
				if seen.Addr() != f.pods[0] {
					t.Fatalf("peer saw %s, want pod address %s", seen, f.pods[0])
				}
				seen, err = udpWhoami(tp, 1, peerEcho, 0)
				if err != nil {
					t.Fatal(err)
				}
				if seen.Addr() != f.pods[1] {
					t.Fatalf("peer saw %s over udp, want pod address %s", seen, f.pods[1])
				}
			})
			t.Run("concurrent flows from two pods with the same ports", func(t *testing.T) {
				concurrentFlows(t, tp, extEcho, f.node, 40000+2000*btoi(f.ext.Is6()))
			})
			t.Run("udp from two pods with the same port", func(t *testing.T) {
				var wg sync.WaitGroup
				seen := make([]netip.AddrPort, 2)
				errs := make([]error, 2)
				for i := range 2 {
					wg.Go(func() { seen[i], errs[i] = udpWhoami(tp, i, extEcho, 5353+btoi(f.ext.Is6())) })
				}
				wg.Wait()
				for i := range 2 {
					if errs[i] != nil {
						t.Fatalf("pod%d: %v", i+1, errs[i])
					}
					if seen[i].Addr() != f.node {
						t.Fatalf("pod%d seen as %s", i+1, seen[i])
					}
				}
				if seen[0] == seen[1] {
					t.Fatalf("both pods seen as %s", seen[0])
				}
			})
		})
	}

	// Partial checksums first (the pods and ext offload, the node completes
	// after translating), then complete ones from every sender.
	t.Run("partial checksums completed after translation", func(t *testing.T) {
		if err := tp.CompleteChecksumsAtNode(); err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			checksumFlows(t, tp, f.name, f.ext, f.node, 7000, 47000)
		}
	})
	t.Run("checksums verified by receivers", func(t *testing.T) {
		if err := tp.DisableChecksumOffload(); err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			checksumFlows(t, tp, f.name, f.ext, f.node, 6000, 46000)
		}
	})

	t.Run("reload keeps established flow", func(t *testing.T) {
		for _, f := range families {
			conn, err := dialFrom(tp, 0, netip.AddrPortFrom(f.ext, echoPort), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := roundTrip(conn, "before"); err != nil {
				t.Fatal(err)
			}
			next := baseConfig()
			next.NonMasqueradeCIDRs = append(next.NonMasqueradeCIDRs, netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:ffff::/48"))
			next.GCInterval = 2 * time.Second
			if err := inNode(tp, func() error { return dp.Apply(ctx, next) }); err != nil {
				t.Fatalf("reload Apply: %v", err)
			}
			seen, err := roundTrip(conn, "after")
			if err != nil {
				t.Fatalf("%s: established connection broken by reload: %v", f.name, err)
			}
			if seen.Addr() != f.node {
				t.Fatalf("%s: after reload seen as %s", f.name, seen)
			}
			if s2, err := tcpWhoami(tp, 1, netip.AddrPortFrom(f.ext, echoPort), 0); err != nil || s2.Addr() != f.node {
				t.Fatalf("%s: new flow after reload: %v, %v", f.name, s2, err)
			}
			// And back, which for iptables swaps the chain again.
			if err := inNode(tp, func() error { return dp.Apply(ctx, baseConfig()) }); err != nil {
				t.Fatalf("reload back: %v", err)
			}
			if _, err := roundTrip(conn, "again"); err != nil {
				t.Fatalf("%s: established connection broken by second reload: %v", f.name, err)
			}
			// Resized maps (ebpf: new maps, flows copied, programs swapped).
			resized := baseConfig()
			resized.Maps = datapath.MapSizes{ConnTrack: uint32(8192 + 1024*btoi(f.ext.Is6())), CIDRs: 64}
			if err := inNode(tp, func() error { return dp.Apply(ctx, resized) }); err != nil {
				t.Fatalf("resize Apply: %v", err)
			}
			if _, err := roundTrip(conn, "resized"); err != nil {
				t.Fatalf("%s: established connection broken by map resize: %v", f.name, err)
			}
		}
	})

	t.Run("only configured egress interfaces", func(t *testing.T) {
		cfg := baseConfig()
		cfg.EgressInterfaces = []string{topo.PeerLink}
		if err := inNode(tp, func() error { return dp.Apply(ctx, cfg) }); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if a := sendAndSniff(t, tp, 7101); a.Addr() != topo.Pod4[0] {
			t.Fatalf("with egress %v, traffic out of %s seen as %s, want the pod's %s", cfg.EgressInterfaces, topo.EgressLink, a, topo.Pod4[0])
		}
		cfg.EgressInterfaces = []string{"ext+"}
		if err := inNode(tp, func() error { return dp.Apply(ctx, cfg) }); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if a := sendAndSniff(t, tp, 7102); a.Addr() != topo.Node4 {
			t.Fatalf("with egress %v, traffic seen as %s, want the node's %s", cfg.EgressInterfaces, a, topo.Node4)
		}
	})

	t.Run("masquerade to route source", func(t *testing.T) {
		routeSrc := netip.MustParseAddr("198.18.0.9")
		if err := tp.AddRouteSource(routeSrc); err != nil {
			t.Fatal(err)
		}
		cfg := baseConfig()
		cfg.MasqueradeToRouteSource = true
		if err := inNode(tp, func() error { return dp.Apply(ctx, cfg) }); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		seen, err := tcpWhoami(tp, 1, netip.AddrPortFrom(topo.Ext4, echoPort), 0)
		if err != nil {
			t.Fatal(err)
		}
		if seen.Addr() != routeSrc {
			t.Fatalf("seen as %s, want the route's source %s", seen, routeSrc)
		}
	})

	t.Run("remove leaves nothing behind", func(t *testing.T) {
		for range 2 { // idempotent
			if err := inNode(tp, func() error { return dp.Remove(ctx) }); err != nil {
				t.Fatalf("Remove: %v", err)
			}
		}
		if left := im.leftovers(t, tp, ""); len(left) > 0 {
			t.Fatalf("left behind after Remove: %v", left)
		}
		st, err := status(tp, dp)
		if err != nil || st.Active {
			t.Fatalf("Status after Remove = %+v, %v", st, err)
		}
		// Unmasqueraded now: the external side sees the pod's own address
		// (and cannot answer: it has no route to the pod CIDR).
		if a := sendAndSniff(t, tp, 7100); a.Addr() != topo.Pod4[0] {
			t.Fatalf("after Remove the external side saw %s, want the pod's %s", a, topo.Pod4[0])
		}
	})
}

// sendAndSniff sends one datagram from pod1 to the external side and
// returns the source the external side saw.
func sendAndSniff(t *testing.T, tp *topo.Topology, port int) netip.AddrPort {
	t.Helper()
	got := make(chan netip.AddrPort, 1)
	if err := topo.In(tp.Ext, func() error { return sniffUDP(got, port) }); err != nil {
		t.Fatal(err)
	}
	if err := topo.In(tp.Pods[0], func() error {
		c, err := net.Dial("udp", netip.AddrPortFrom(topo.Ext4, uint16(port)).String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		return a
	case <-time.After(3 * time.Second):
		t.Fatal("datagram did not arrive")
	}
	return netip.AddrPort{}
}

// sniffUDP receives one datagram on port and reports its source.
func sniffUDP(got chan<- netip.AddrPort, port int) error {
	pc, err := net.ListenPacket("udp", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	go func() {
		defer pc.Close()
		_ = pc.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		_, from, err := pc.ReadFrom(buf)
		if err == nil {
			got <- unmapAP(from.(*net.UDPAddr).AddrPort())
		}
	}()
	return nil
}

// startServers starts "whoami" echo servers (TCP and UDP, dual stack) in
// ns: each answer is the client's address as seen by the server followed
// by the request.
func startServers(t *testing.T, h netns.NsHandle) error {
	var ln net.Listener
	var pc net.PacketConn
	err := topo.In(h, func() error {
		var err error
		if ln, err = net.Listen("tcp", fmt.Sprintf(":%d", echoPort)); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", echoPort))
		return err
	})
	if err != nil {
		return err
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
					if _, err := fmt.Fprintf(c, "%s %s", unmapAP(ap), line); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			ap := unmapAP(from.(*net.UDPAddr).AddrPort())
			_, _ = pc.WriteTo([]byte(ap.String()+" "+string(buf[:n])), from)
		}
	}()
	return nil
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// dialFrom connects from pod i (0 or 1) to dst, from localPort if non-zero.
func dialFrom(tp *topo.Topology, i int, dst netip.AddrPort, localPort int) (net.Conn, error) {
	var c net.Conn
	var err error
	// EHOSTUNREACH comes back when a neighbour resolution on the path failed (IPv6 NDP gives up
	// after three probes, which a loaded CI machine can miss); a few tries tell a transient miss
	// from a broken path, which still fails every time.
	for try := 0; try < 4; try++ {
		err = topo.In(tp.Pods[i], func() error {
			d := net.Dialer{Timeout: 5 * time.Second}
			if localPort != 0 {
				d.LocalAddr = &net.TCPAddr{Port: localPort}
			}
			var err error
			c, err = d.Dial("tcp", dst.String())
			return err
		})
		if !errors.Is(err, syscall.EHOSTUNREACH) {
			break
		}
		time.Sleep(500 * time.Millisecond) // sleep: real time for the neighbour cache to settle before the next try
	}
	return c, err
}

func roundTrip(c net.Conn, msg string) (netip.AddrPort, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		return netip.AddrPort{}, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return netip.AddrPort{}, err
	}
	seen, rest, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok || rest != msg {
		return netip.AddrPort{}, fmt.Errorf("bad answer %q", line)
	}
	return netip.ParseAddrPort(seen)
}

func tcpWhoami(tp *topo.Topology, i int, dst netip.AddrPort, localPort int) (netip.AddrPort, error) {
	c, err := dialFrom(tp, i, dst, localPort)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer c.Close()
	return roundTrip(c, "hello")
}

func udpWhoami(tp *topo.Topology, i int, dst netip.AddrPort, localPort int) (netip.AddrPort, error) {
	var c net.Conn
	err := topo.In(tp.Pods[i], func() error {
		d := net.Dialer{}
		if localPort != 0 {
			d.LocalAddr = &net.UDPAddr{Port: localPort}
		}
		var err error
		c, err = d.Dial("udp", dst.String())
		return err
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer c.Close()
	buf := make([]byte, 256)
	for try := range 3 { // UDP: retry a lost datagram (first packet may wait for neighbour resolution)
		_ = c.SetDeadline(time.Now().Add(time.Second))
		msg := fmt.Sprintf("udp%d", try)
		if _, err := c.Write([]byte(msg)); err != nil {
			return netip.AddrPort{}, err
		}
		n, err := c.Read(buf)
		if err != nil {
			continue
		}
		seen, rest, ok := strings.Cut(string(buf[:n]), " ")
		if !ok || rest != msg {
			return netip.AddrPort{}, fmt.Errorf("bad answer %q", buf[:n])
		}
		return netip.ParseAddrPort(seen)
	}
	return netip.AddrPort{}, fmt.Errorf("udp to %s: no answer", dst)
}

// ping sends echo requests with identifier id from pod i to dst over a raw
// socket and waits for a matching reply.
func ping(tp *topo.Topology, i int, dst netip.Addr, id int) error {
	var pc *icmp.PacketConn
	network, laddr := "ip4:icmp", "0.0.0.0"
	var typ, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	proto := 1
	if dst.Is6() {
		network, laddr = "ip6:ipv6-icmp", "::"
		typ, reply, proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, 58
	}
	if err := topo.In(tp.Pods[i], func() error {
		var err error
		pc, err = icmp.ListenPacket(network, laddr)
		return err
	}); err != nil {
		return err
	}
	defer pc.Close()
	buf := make([]byte, 1500)
	for seq := 1; seq <= 3; seq++ {
		m := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq + 100*i, Data: []byte("allot")}}
		b, err := m.Marshal(nil)
		if err != nil {
			return err
		}
		if _, err := pc.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		deadline := time.Now().Add(time.Second)
		for {
			_ = pc.SetReadDeadline(deadline)
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				break // timeout: next seq
			}
			rm, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || rm.Type != reply {
				continue
			}
			if e, ok := rm.Body.(*icmp.Echo); ok && e.ID == id && e.Seq == seq+100*i {
				return nil
			}
		}
	}
	return fmt.Errorf("no echo reply from %s for id %#x", dst, id)
}

// concurrentFlows opens flowsPer connections from each pod, all from the
// same local ports in both pods, to the same destination; all must be up
// at once and each must be seen with a distinct node address:port.
func concurrentFlows(t *testing.T, tp *topo.Topology, dst netip.AddrPort, node netip.Addr, portBase int) {
	type result struct {
		seen netip.AddrPort
		err  error
	}
	results := make([]result, 2*flowsPer)
	conns := make([]net.Conn, 2*flowsPer)
	var wg sync.WaitGroup
	for i := range 2 {
		for j := range flowsPer {
			wg.Go(func() {
				c, err := dialFrom(tp, i, dst, portBase+j)
				conns[i*flowsPer+j], results[i*flowsPer+j].err = c, err
			})
		}
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for k := range results {
		if results[k].err != nil {
			continue
		}
		wg.Go(func() { results[k].seen, results[k].err = roundTrip(conns[k], "flow") })
	}
	wg.Wait()
	seen := map[netip.AddrPort]int{}
	failed := 0
	for k, r := range results {
		if r.err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("pod%d flow %d: %v", k/flowsPer+1, k%flowsPer, r.err)
			}
			continue
		}
		if r.seen.Addr() != node {
			t.Errorf("flow %d seen as %s, want node %s", k, r.seen, node)
		}
		if prev, dup := seen[r.seen]; dup {
			t.Errorf("flows %d and %d both seen as %s (collision)", prev, k, r.seen)
		}
		seen[r.seen] = k
	}
	if failed > 0 {
		t.Fatalf("%d of %d connections failed", failed, len(results))
	}
}

func iptablesLeftovers(t *testing.T, tp *topo.Topology, _ string) []string {
	var left []string
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		var out []byte
		err := inNode(tp, func() error {
			var err error
			out, err = exec.Command(bin, "-t", "nat").CombinedOutput()
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v: %s", bin, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(strings.ToUpper(l), "ALLOT") {
				left = append(left, bin+": "+l)
			}
		}
	}
	return left
}

func ebpfLeftovers(t *testing.T, tp *topo.Topology, pin string) []string {
	var left []string
	err := inNode(tp, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			name := l.Attrs().Name
			for _, at := range []cebpf.AttachType{cebpf.AttachTCXEgress, cebpf.AttachTCXIngress} {
				res, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: at})
				if err != nil {
					continue
				}
				for _, p := range res.Programs {
					left = append(left, fmt.Sprintf("%s: tcx program %d", name, p.ID))
				}
			}
			qs, _ := netlink.QdiscList(l)
			for _, q := range qs {
				if q.Type() == "clsact" {
					left = append(left, name+": clsact qdisc")
				}
			}
			for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
				fs, _ := netlink.FilterList(l, parent)
				for _, f := range fs {
					left = append(left, fmt.Sprintf("%s: tc filter %+v", name, f.Attrs()))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pin != "" {
		if _, err := os.Stat(pin); err == nil {
			left = append(left, "pin path "+pin)
		}
	}
	return left
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func status(tp *topo.Topology, dp datapath.Datapath) (st datapath.Status, err error) {
	err = inNode(tp, func() error {
		var err error
		st, err = dp.Status(context.Background())
		return err
	})
	return st, err
}

// checksumFlows runs TCP, UDP from both pods with the same local port (one
// of them gets its port rewritten too) and ICMP echo to ext, each of which
// fails when a receiver drops a packet with a wrong checksum.
func checksumFlows(t *testing.T, tp *topo.Topology, family string, ext, node netip.Addr, udpPort, tcpPort int) {
	t.Helper()
	v6 := btoi(ext.Is6())
	dst := netip.AddrPortFrom(ext, echoPort)
	if seen, err := tcpWhoami(tp, 0, dst, 0); err != nil || seen.Addr() != node {
		t.Errorf("%s tcp: %v %v", family, seen, err)
	}
	for i := range 2 {
		if seen, err := udpWhoami(tp, i, dst, udpPort+v6); err != nil || seen.Addr() != node {
			t.Errorf("%s udp pod%d: %v %v", family, i+1, seen, err)
		}
		if seen, err := tcpWhoami(tp, i, dst, tcpPort+v6); err != nil || seen.Addr() != node {
			t.Errorf("%s tcp same port pod%d: %v %v", family, i+1, seen, err)
		}
	}
	if err := ping(tp, 1, ext, 0x777); err != nil {
		t.Errorf("%s icmp: %v", family, err)
	}
}
