package datapath_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/allot-ipam/allot/bpf"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/datapath/ebpf"
	"github.com/allot-ipam/allot/test/datapath/topo"
	cebpf "github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestEBPFRestartKeepsFlows: with PinPath, a daemon restart (Close without
// Remove, then a new datapath's Apply) keeps established flows, and Remove
// leaves nothing pinned.
func TestEBPFRestartKeepsFlows(t *testing.T) {
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
	cfg := baseConfig()
	cfg.PinPath = pin

	first := ebpf.New(testLogger(t))
	if err := inNode(tp, func() error { return first.Apply(ctx, cfg) }); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	dst := netip.AddrPortFrom(topo.Ext4, echoPort)
	// A port another pod already holds would be rewritten: make sure the
	// flow has a non-identity port, the case a lost table would break.
	if _, err := tcpWhoami(tp, 1, dst, 47000); err != nil {
		t.Fatal(err)
	}
	conn, err := dialFrom(tp, 0, dst, 47000)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before, err := roundTrip(conn, "before")
	if err != nil {
		t.Fatal(err)
	}
	if before.Port() == 47000 {
		t.Fatalf("expected a rewritten port, got %s", before)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pin, "ct")); err != nil {
		t.Fatalf("flow table not pinned: %v", err)
	}
	// Programs that read the TCP flags from the wrong byte left FIN and RST
	// marks on live flows at random; the next process clears them.
	if n := setClosingMarks(t, filepath.Join(pin, "ct"), 0x3); n == 0 {
		t.Fatal("no TCP flow in the pinned table")
	}

	second := ebpf.New(testLogger(t))
	if err := inNode(tp, func() error { return second.Apply(ctx, cfg) }); err != nil {
		t.Fatalf("Apply after restart: %v", err)
	}
	after, err := roundTrip(conn, "after")
	if err != nil {
		t.Fatalf("established flow lost across restart: %v", err)
	}
	if n := setClosingMarks(t, filepath.Join(pin, "ct"), 0); n != 0 {
		t.Fatalf("%d TCP flows still marked closing after the adopting Apply", n)
	}
	if after != before {
		t.Fatalf("flow seen as %s after restart, %s before", after, before)
	}
	if err := inNode(tp, func() error { return second.Remove(ctx) }); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin path left behind after Remove: %v", err)
	}
	if left := ebpfLeftovers(t, tp, pin); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// pinPath mounts a bpffs for the test and returns a pin path in it.
func pinPath(t *testing.T) string {
	t.Helper()
	bpffs := t.TempDir()
	if err := unix.Mount("bpf", bpffs, "bpf", 0, ""); err != nil {
		testenv.Missing(t, "cannot mount a bpffs for pinning (kernel without CONFIG_BPF_SYSCALL?): "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(bpffs, unix.MNT_DETACH) })
	return filepath.Join(bpffs, "allot")
}

// setClosingMarks sets the FIN and RST marks (struct ct_val flags 0x1, 0x2)
// given in marks on every TCP entry of the pinned flow table, or with
// marks 0 only counts the entries that carry one; it returns how many
// entries it changed or counted.
func setClosingMarks(t *testing.T, path string, marks uint16) int {
	t.Helper()
	m, err := cebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var k bpf.SnatCtKey
	var v bpf.SnatCtVal
	var keys []bpf.SnatCtKey
	it := m.Iterate()
	for it.Next(&k, &v) {
		if k.Proto == 6 && (marks != 0 || v.Flags&0x3 != 0) {
			keys = append(keys, k)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if marks == 0 {
		return len(keys)
	}
	for _, k := range keys {
		if err := m.Lookup(&k, &v); err != nil {
			t.Fatal(err)
		}
		v.Flags |= marks
		if err := m.Update(&k, &v, cebpf.UpdateExist); err != nil {
			t.Fatal(err)
		}
	}
	return len(keys)
}
