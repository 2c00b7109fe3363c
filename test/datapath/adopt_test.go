package datapath_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/datapath/ebpf"
	"github.com/allot-ipam/allot/plugins/datapath/iptables"
	"github.com/allot-ipam/allot/test/datapath/topo"
	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// An agent stopped without uninstalling (a rolling update, a node reboot) leaves its
// datapath in force; the next process must take it over: keep masquerading throughout, and
// end with exactly its own rules or programs, never a second set beside the old one.

// natState is allot's part of the nat table in the node namespace: chains and jumps per
// family.
type natState struct {
	chains map[string][]string // family -> ALLOT-MASQ-* chains
	jumps  map[string]int      // family -> jumps from POSTROUTING to one
	rules  map[string][]string // chain -> its rules
}

func readNAT(t *testing.T, tp *topo.Topology) natState {
	t.Helper()
	st := natState{chains: map[string][]string{}, jumps: map[string]int{}, rules: map[string][]string{}}
	for fam, bin := range map[string]string{"ipv4": "iptables-save", "ipv6": "ip6tables-save"} {
		var out []byte
		err := inNode(tp, func() error {
			var err error
			out, err = exec.Command(bin, "-t", "nat").CombinedOutput()
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v\n%s", bin, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) > 0 && strings.HasPrefix(f[0], ":ALLOT-MASQ-"):
				st.chains[fam] = append(st.chains[fam], strings.TrimPrefix(f[0], ":"))
			case len(f) > 2 && f[0] == "-A" && f[1] == "POSTROUTING" && strings.Contains(line, "-j ALLOT-MASQ-"):
				st.jumps[fam]++
			case len(f) > 2 && f[0] == "-A" && strings.HasPrefix(f[1], "ALLOT-MASQ-"):
				st.rules[f[1]] = append(st.rules[f[1]], strings.Join(f[2:], " "))
			}
		}
	}
	return st
}

func needIPTables(t *testing.T) {
	t.Helper()
	topo.Require(t)
	for _, b := range []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save"} {
		testenv.RequireBinary(t, b, "Debian package iptables")
	}
}

// TestIPTablesAdoptsPredecessor: a new process's Apply with the same configuration keeps
// the chain in place (same name, one jump per family); with new pod CIDRs it swaps in one
// new chain and drops the old; a family that lost its last pod CIDR loses the old process's
// chain too.
func TestIPTablesAdoptsPredecessor(t *testing.T) {
	needIPTables(t)
	ctx := context.Background()
	tp, err := topo.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	if err := startServers(t, tp.Ext); err != nil {
		t.Fatal(err)
	}
	ext := netip.AddrPortFrom(topo.Ext4, echoPort)
	masqueraded := func(when string) {
		t.Helper()
		seen, err := tcpWhoami(tp, 0, ext, 0)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if seen.Addr() != topo.Node4 {
			t.Fatalf("%s: the external side saw %s, want the node's %s", when, seen, topo.Node4)
		}
	}
	cfg := baseConfig()

	first := iptables.New(testLogger(t))
	if err := inNode(tp, func() error { return first.Apply(ctx, cfg) }); err != nil {
		t.Fatal(err)
	}
	before := readNAT(t, tp)
	if len(before.chains["ipv4"]) != 1 || len(before.chains["ipv6"]) != 1 {
		t.Fatalf("first process: chains %v", before.chains)
	}
	// The first process goes away without Remove (Close of the controller does nothing
	// for iptables): the rules stay in force.
	masqueraded("after the first process stopped")

	second := iptables.New(testLogger(t))
	if err := inNode(tp, func() error { return second.Apply(ctx, cfg) }); err != nil {
		t.Fatal(err)
	}
	after := readNAT(t, tp)
	for _, fam := range []string{"ipv4", "ipv6"} {
		if !slices.Equal(after.chains[fam], before.chains[fam]) || after.jumps[fam] != 1 {
			t.Fatalf("%s: same configuration, new process: chains %v (before %v), %d jumps", fam, after.chains[fam], before.chains[fam], after.jumps[fam])
		}
	}
	masqueraded("after the second process applied")

	// A third process starts after the node got a second IPv4 block.
	block := netip.MustParsePrefix("10.244.1.0/24")
	cfg3 := baseConfig()
	cfg3.PodCIDRs = append(cfg3.PodCIDRs, block)
	third := iptables.New(testLogger(t))
	if err := inNode(tp, func() error { return third.Apply(ctx, cfg3) }); err != nil {
		t.Fatal(err)
	}
	st := readNAT(t, tp)
	if len(st.chains["ipv4"]) != 1 || st.chains["ipv4"][0] == before.chains["ipv4"][0] || st.jumps["ipv4"] != 1 {
		t.Fatalf("new pod CIDRs: ipv4 chains %v (old %v), %d jumps", st.chains["ipv4"], before.chains["ipv4"], st.jumps["ipv4"])
	}
	if !slices.ContainsFunc(st.rules[st.chains["ipv4"][0]], func(r string) bool { return strings.HasPrefix(r, "-s "+block.String()) }) {
		t.Fatalf("new block not masqueraded: %v", st.rules[st.chains["ipv4"][0]])
	}
	masqueraded("after the third process applied")

	// A fourth process starts after the node lost its IPv6 block: the third's ip6tables
	// chain must not stay behind.
	cfg4 := baseConfig()
	cfg4.PodCIDRs = []netip.Prefix{topo.PodCIDR4}
	fourth := iptables.New(testLogger(t))
	if err := inNode(tp, func() error { return fourth.Apply(ctx, cfg4) }); err != nil {
		t.Fatal(err)
	}
	st = readNAT(t, tp)
	if len(st.chains["ipv6"]) != 0 || st.jumps["ipv6"] != 0 {
		t.Fatalf("a family without pod CIDRs kept the earlier process's chain: %v, %d jumps", st.chains["ipv6"], st.jumps["ipv6"])
	}
	if len(st.chains["ipv4"]) != 1 || st.jumps["ipv4"] != 1 {
		t.Fatalf("ipv4: %v, %d jumps", st.chains["ipv4"], st.jumps["ipv4"])
	}
	masqueraded("after the fourth process applied")

	// Uninstall by a process that never applied (Remove finds the chains by name).
	fifth := iptables.New(testLogger(t))
	if err := inNode(tp, func() error { return fifth.Remove(ctx) }); err != nil {
		t.Fatal(err)
	}
	if left := iptablesLeftovers(t, tp, ""); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// requireTCX stops a test about tcx links when dp fell back to clsact
// filters: the kernel has no tcx (Linux 6.6+). A failure under CI, with the
// kernel release in the reason (internal/testenv).
func requireTCX(t *testing.T, dp *ebpf.Datapath) {
	t.Helper()
	st, err := dp.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Detail["attach"] != "tcx" {
		var u unix.Utsname
		_ = unix.Uname(&u)
		testenv.Missing(t, fmt.Sprintf("kernel %s has no tcx (Linux 6.6+): the programs were attached as %q",
			unix.ByteSliceToString(u.Release[:]), st.Detail["attach"]))
	}
}

// tcxPrograms counts the tcx programs attached to link name, per direction.
func tcxPrograms(t *testing.T, tp *topo.Topology, name string) (egress, ingress []uint32) {
	t.Helper()
	err := inNode(tp, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		for _, at := range []cebpf.AttachType{cebpf.AttachTCXEgress, cebpf.AttachTCXIngress} {
			res, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: at})
			if err != nil {
				return fmt.Errorf("query %s: %w", name, err)
			}
			for _, p := range res.Programs {
				if at == cebpf.AttachTCXEgress {
					egress = append(egress, uint32(p.ID))
				} else {
					ingress = append(ingress, uint32(p.ID))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return egress, ingress
}

func tcFilters(t *testing.T, tp *topo.Topology, name string) int {
	t.Helper()
	n := 0
	err := inNode(tp, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
			fs, _ := netlink.FilterList(l, parent)
			n += len(fs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEBPFPinnedLinksAreAdopted: with a pin path, the tcx links outlive the process (a new
// connection is masqueraded while no agent runs), the next process swaps its programs into
// them (one program per direction, a new one), links of an interface that is no longer
// egress are detached, and a process that never applied removes everything at uninstall.
func TestEBPFPinnedLinksAreAdopted(t *testing.T) {
	topo.Require(t)
	pin := pinPath(t)
	ctx := context.Background()
	tp, err := topo.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	if err := startServers(t, tp.Ext); err != nil {
		t.Fatal(err)
	}
	ext := netip.AddrPortFrom(topo.Ext4, echoPort)
	masqueraded := func(when string) {
		t.Helper()
		seen, err := tcpWhoami(tp, 0, ext, 0)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if seen.Addr() != topo.Node4 {
			t.Fatalf("%s: the external side saw %s, want the node's %s", when, seen, topo.Node4)
		}
	}
	cfg := baseConfig()
	cfg.PinPath = pin

	first := ebpf.New(testLogger(t))
	if err := inNode(tp, func() error { return first.Apply(ctx, cfg) }); err != nil {
		t.Fatal(err)
	}
	requireTCX(t, first)
	eg1, in1 := tcxPrograms(t, tp, topo.EgressLink)
	if len(eg1) != 1 || len(in1) != 1 {
		t.Fatalf("first process: egress %v ingress %v", eg1, in1)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	eg, in := tcxPrograms(t, tp, topo.EgressLink)
	if !slices.Equal(eg, eg1) || !slices.Equal(in, in1) {
		t.Fatalf("programs after the process closed: egress %v ingress %v, want %v %v", eg, in, eg1, in1)
	}
	masqueraded("while no process runs")

	second := ebpf.New(testLogger(t))
	if err := inNode(tp, func() error { return second.Apply(ctx, cfg) }); err != nil {
		t.Fatal(err)
	}
	eg2, in2 := tcxPrograms(t, tp, topo.EgressLink)
	if len(eg2) != 1 || len(in2) != 1 || eg2[0] == eg1[0] || in2[0] == in1[0] {
		t.Fatalf("second process: egress %v ingress %v (first's %v %v): want one new program each", eg2, in2, eg1, in1)
	}
	masqueraded("after the second process adopted the links")

	// The peer link stops being egress: the pins the second process holds for it go.
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	cfg3 := cfg
	cfg3.EgressInterfaces = []string{topo.EgressLink}
	third := ebpf.New(testLogger(t))
	if err := inNode(tp, func() error { return third.Apply(ctx, cfg3) }); err != nil {
		t.Fatal(err)
	}
	if eg, in := tcxPrograms(t, tp, topo.PeerLink); len(eg)+len(in) != 0 {
		t.Fatalf("%s is no longer egress but keeps programs: %v %v", topo.PeerLink, eg, in)
	}
	if eg, in := tcxPrograms(t, tp, topo.EgressLink); len(eg) != 1 || len(in) != 1 {
		t.Fatalf("%s: %v %v", topo.EgressLink, eg, in)
	}
	masqueraded("after the third process")
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}

	// Uninstall by a process that never applied: links, flow table and pin path go.
	fourth := ebpf.New(testLogger(t))
	if err := inNode(tp, func() error { return fourth.RemoveWithConfig(ctx, cfg) }); err != nil {
		t.Fatal(err)
	}
	if left := ebpfLeftovers(t, tp, pin); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin path: %v", err)
	}
}

// TestEBPFReplacesLegacyFilters: a process on the clsact path (an older kernel) left its
// filters; a process that attaches with tcx removes them, so no second program runs.
func TestEBPFReplacesLegacyFilters(t *testing.T) {
	topo.Require(t)
	ctx := context.Background()
	tp, err := topo.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	cfg := baseConfig()
	legacy := ebpf.New(testLogger(t), ebpf.WithLegacyTC())
	if err := inNode(tp, func() error { return legacy.Apply(ctx, cfg) }); err != nil {
		t.Fatal(err)
	}
	if err := legacy.Close(); err != nil {
		t.Fatal(err)
	}
	if n := tcFilters(t, tp, topo.EgressLink); n != 2 {
		t.Fatalf("legacy process left %d filters, want 2 (they outlive it)", n)
	}
	tcx := ebpf.New(testLogger(t))
	if err := inNode(tp, func() error { return tcx.Apply(ctx, cfg) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inNode(tp, func() error { return tcx.Remove(ctx) }) })
	requireTCX(t, tcx)
	if n := tcFilters(t, tp, topo.EgressLink); n != 0 {
		t.Fatalf("%d legacy filters left beside the tcx programs", n)
	}
	if eg, in := tcxPrograms(t, tp, topo.EgressLink); len(eg) != 1 || len(in) != 1 {
		t.Fatalf("tcx programs: %v %v", eg, in)
	}
}
