package datapathctl

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/allot-ipam/allot/sdk/datapath"
)

// recorder is a unit-test stand-in for a datapath: it records what it was asked to apply.
// The real datapaths are tested in namespaces by test/datapath.
type recorder struct {
	mu      sync.Mutex
	applied []datapath.Config
	removed int
	fail    error
}

func (r *recorder) Apply(_ context.Context, c datapath.Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.applied = append(r.applied, c)
	return nil
}

func (r *recorder) Remove(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed++
	return nil
}

func (r *recorder) Status(context.Context) (datapath.Status, error) {
	return datapath.Status{Name: "recorder", Active: true}, nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestStartAppliesPodCIDRsAndStopRemoves(t *testing.T) {
	r := &recorder{}
	pods := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	c := New(Options{Datapath: r, PodCIDRs: pods, Base: datapath.Config{MasqLinkLocal: true}, Logger: quiet})
	ctx := context.Background()
	if err := c.Stop(ctx); err != nil || r.removed != 0 {
		t.Fatalf("Stop before Start removed something: %v %d", err, r.removed)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.applied) != 1 || r.applied[0].PodCIDRs[0] != pods[0] || !r.applied[0].MasqLinkLocal {
		t.Fatalf("applied %+v", r.applied)
	}
	if err := c.Stop(ctx); err != nil || r.removed != 1 {
		t.Fatalf("Stop: %v, removed %d", err, r.removed)
	}
	if err := c.Stop(ctx); err != nil || r.removed != 1 {
		t.Fatalf("second Stop: %v, removed %d", err, r.removed)
	}
}

func TestMasqAgentFileReappliedOnlyWhenChanged(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ip-masq-agent")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 2s\n")
	r := &recorder{}
	c := New(Options{Datapath: r, MasqAgentConfig: file, Base: datapath.Config{NonMasqueradeCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}}, Logger: quiet})
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.applied[0].NonMasqueradeCIDRs; len(got) != 1 || got[0].String() != "10.0.0.0/8" {
		t.Fatalf("the file must override the config's list: %v", got)
	}
	if err := c.Resync(ctx); err != nil || len(r.applied) != 1 {
		t.Fatalf("unchanged file re-applied: %v, %d applies", err, len(r.applied))
	}
	write("nonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\nmasqLinkLocal: true\n")
	if err := c.Resync(ctx); err != nil || len(r.applied) != 2 || len(r.applied[1].NonMasqueradeCIDRs) != 2 || !r.applied[1].MasqLinkLocal {
		t.Fatalf("changed file: %v, %+v", err, r.applied)
	}
	// A broken file keeps the last good configuration in force and says which field is bad.
	write("nonMasqueradeCIDRs: [10.0.0.0/33]\n")
	err := c.Resync(ctx)
	if err == nil || !strings.Contains(err.Error(), "nonMasqueradeCIDRs[0]") || len(r.applied) != 2 {
		t.Fatalf("bad file: %v, %d applies", err, len(r.applied))
	}
	// A datapath that refuses is reported, and the change is tried again at the next resync.
	write("nonMasqueradeCIDRs: [10.0.0.0/8]\n")
	r.fail = errors.New("boom")
	if err := c.Resync(ctx); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("refused apply: %v", err)
	}
	r.fail = nil
	if err := c.Resync(ctx); err != nil || len(r.applied) != 3 {
		t.Fatalf("retry: %v, %d applies", err, len(r.applied))
	}
}

// TestMissingFileMeansDefaults: as ip-masq-agent, no file is its defaults (the ConfigMap is
// optional); the file is applied once it appears. An unreadable one is still an error.
func TestMissingFileMeansDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	r := &recorder{}
	c := New(Options{Datapath: r, MasqAgentConfig: path, Logger: quiet})
	ctx := context.Background()
	if err := c.Start(ctx); err != nil || len(r.applied) != 1 {
		t.Fatalf("missing file: %v, %d applies", err, len(r.applied))
	}
	if got := r.applied[0]; got.NonMasqueradeExplicit || len(got.NonMasqueradeCIDRs) != 0 {
		t.Fatalf("defaults expected: %+v", got)
	}
	if err := os.WriteFile(path, []byte("nonMasqueradeCIDRs: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Resync(ctx); err != nil || len(r.applied) != 2 || !r.applied[1].NonMasqueradeExplicit {
		t.Fatalf("explicit empty list: %v, %+v", err, r.applied)
	}
	dir := filepath.Join(t.TempDir(), "dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c = New(Options{Datapath: &recorder{}, MasqAgentConfig: dir, Logger: quiet})
	if err := c.Start(ctx); err == nil || !strings.Contains(err.Error(), "datapath.masqAgentConfig") {
		t.Fatalf("unreadable file: %v", err)
	}
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// TestSetPodCIDRs: recorded before Start, re-applied afterwards only when the normalized set
// changed, the old set kept on a refused apply.
func TestSetPodCIDRs(t *testing.T) {
	r := &recorder{}
	c := New(Options{Datapath: r, Logger: quiet})
	ctx := context.Background()
	if applied, err := c.SetPodCIDRs(ctx, prefixes("10.1.0.16/28", "10.1.0.0/28")); err != nil || applied || len(r.applied) != 0 {
		t.Fatalf("before Start: %v %v %d", applied, err, len(r.applied))
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.applied[0].PodCIDRs; !slices.Equal(got, prefixes("10.1.0.0/28", "10.1.0.16/28")) {
		t.Fatalf("Start applied %v", got)
	}
	// Same set, in another order, with a duplicate and a covered prefix: no apply.
	if applied, err := c.SetPodCIDRs(ctx, prefixes("10.1.0.16/28", "10.1.0.0/28", "10.1.0.0/28", "10.1.0.20/32")); err != nil || applied || len(r.applied) != 1 {
		t.Fatalf("same set: %v %v %d", applied, err, len(r.applied))
	}
	if applied, err := c.SetPodCIDRs(ctx, prefixes("10.1.0.16/28", "fd00::/124")); err != nil || !applied || len(r.applied) != 2 {
		t.Fatalf("changed set: %v %v %d", applied, err, len(r.applied))
	}
	if got := r.applied[1].PodCIDRs; !slices.Equal(got, prefixes("10.1.0.16/28", "fd00::/124")) {
		t.Fatalf("applied %v", got)
	}
	r.fail = errors.New("boom")
	if _, err := c.SetPodCIDRs(ctx, prefixes("10.1.0.32/28")); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("refused: %v", err)
	}
	if got := c.PodCIDRs(); !slices.Equal(got, prefixes("10.1.0.16/28", "fd00::/124")) {
		t.Fatalf("after a refused apply the set in force is %v", got)
	}
	r.fail = nil
	if applied, err := c.SetPodCIDRs(ctx, prefixes("10.1.0.32/28")); err != nil || !applied {
		t.Fatalf("retry: %v %v", applied, err)
	}
	if applied, err := c.SetPodCIDRs(ctx, nil); err != nil || !applied || len(r.applied[len(r.applied)-1].PodCIDRs) != 0 {
		t.Fatalf("no block left: %v %v", applied, err)
	}
}

// closer is a recorder with the eBPF datapath's Close and RemoveWithConfig.
type closer struct {
	recorder
	closed     int
	removedCfg []datapath.Config
}

func (c *closer) Close() error { c.closed++; return nil }

func (c *closer) RemoveWithConfig(_ context.Context, cfg datapath.Config) error {
	c.removedCfg = append(c.removedCfg, cfg)
	return nil
}

// TestCloseKeepsRemoveRemoves: Close leaves the rules (and releases the datapath's process
// resources); Remove removes even what this process never applied, with the configuration
// where the datapath needs it to find an earlier process's leftovers.
func TestCloseKeepsRemoveRemoves(t *testing.T) {
	ctx := context.Background()
	r := &closer{}
	c := New(Options{Datapath: r, Base: datapath.Config{PinPath: "/sys/fs/bpf/allot"}, Logger: quiet})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil || r.removed != 0 || r.closed != 1 || c.Started() {
		t.Fatalf("Close: %v, removed %d, closed %d", err, r.removed, r.closed)
	}
	// Resync after Close applies nothing.
	if err := c.Resync(ctx); err != nil || len(r.applied) != 1 {
		t.Fatalf("resync after Close: %v, %d applies", err, len(r.applied))
	}

	r = &closer{}
	c = New(Options{Datapath: r, Base: datapath.Config{PinPath: "/sys/fs/bpf/allot"}, Logger: quiet})
	if err := c.Remove(ctx); err != nil || len(r.removedCfg) != 1 || r.removedCfg[0].PinPath != "/sys/fs/bpf/allot" {
		t.Fatalf("Remove before Start: %v, %+v", err, r.removedCfg)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx); err != nil || r.removed != 1 || c.Started() {
		t.Fatalf("Remove after Start: %v, removed %d", err, r.removed)
	}

	plain := &recorder{}
	c = New(Options{Datapath: plain, Logger: quiet})
	if err := c.Remove(ctx); err != nil || plain.removed != 1 {
		t.Fatalf("Remove of a datapath without RemoveWithConfig: %v, removed %d", err, plain.removed)
	}
}
