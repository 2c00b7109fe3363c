package datapath_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/datapath/ebpf"
	"github.com/allot-ipam/allot/test/datapath/topo"
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

	second := ebpf.New(testLogger(t))
	if err := inNode(tp, func() error { return second.Apply(ctx, cfg) }); err != nil {
		t.Fatalf("Apply after restart: %v", err)
	}
	after, err := roundTrip(conn, "after")
	if err != nil {
		t.Fatalf("established flow lost across restart: %v", err)
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
