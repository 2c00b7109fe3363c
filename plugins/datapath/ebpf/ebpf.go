// Package ebpf is the datapath that masquerades pod traffic with tc eBPF
// programs (bpf/snat.c): SNAT on the egress interfaces' egress hook, the
// reverse translation on their ingress hook, connection tracking and port
// allocation in BPF maps, and a userspace garbage collector for idle flows.
//
// Programs are attached with tcx where the kernel has it (6.6+), else with
// a clsact qdisc and a direct-action bpf filter. A reload updates the maps
// in place (pod CIDRs, non-masquerade CIDRs, NAT addresses, port range)
// without detaching, so established flows keep their translation; a change
// of map sizes loads new maps, copies the flow table across and swaps the
// programs atomically (tcx link update / tc filter replace).
package ebpf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/allot-ipam/allot/bpf"
	"github.com/allot-ipam/allot/plugins/datapath/internal/netinfo"
	"github.com/allot-ipam/allot/sdk/datapath"
	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// Name is the datapath's name in configuration.
const Name = "ebpf"

// Filter names used for legacy tc attachment; Remove finds leftovers of an
// earlier process by these names.
const (
	filterEgress  = "allot_snat_egress"
	filterIngress = "allot_snat_ingress"
	filterPrio    = 1
	filterHandle  = 0xa110
)

// Option tunes the datapath.
type Option func(*options)

type options struct {
	legacyTC bool
}

// WithLegacyTC attaches through clsact + bpf filters even where tcx exists
// (for tests of the fallback path, and for old userspace that inspects tc).
func WithLegacyTC() Option { return func(o *options) { o.legacyTC = true } }

// Datapath is the eBPF masquerade datapath.
type Datapath struct {
	log  *slog.Logger
	opts options

	mu       sync.Mutex
	objs     *bpf.SnatObjects
	sizes    datapath.MapSizes // effective sizes of objs' maps
	attached map[int]*attachment
	cfg      datapath.Config
	egress   []netinfo.Egress
	gc       *collector
	lastErr  string
}

type attachment struct {
	name    string
	index   int
	tcx     bool
	egress  link.Link // tcx only
	ingress link.Link // tcx only
	pinDir  string    // tcx links pinned there (attach.go)
}

var _ datapath.Datapath = (*Datapath)(nil)

// New returns the eBPF datapath. A nil logger discards.
func New(logger *slog.Logger, opts ...Option) *Datapath {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Datapath{log: logger.With("datapath", Name), attached: map[int]*attachment{}}
	for _, o := range opts {
		o(&d.opts)
	}
	return d
}

func effectiveSizes(m datapath.MapSizes) datapath.MapSizes {
	return datapath.MapSizes{ConnTrack: m.EffectiveConnTrack(), CIDRs: m.EffectiveCIDRs()}
}

// Apply installs or reloads cfg. Must be called from the network namespace
// (OS thread) that holds the egress interfaces.
func (d *Datapath) Apply(ctx context.Context, cfg datapath.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("ebpf: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.apply(ctx, cfg)
	if err != nil {
		d.lastErr = err.Error()
	} else {
		d.lastErr = ""
	}
	return err
}

func (d *Datapath) apply(ctx context.Context, cfg datapath.Config) error {
	egress, err := netinfo.Resolve(cfg)
	if err != nil {
		return fmt.Errorf("ebpf: %w", err)
	}
	if len(egress) == 0 {
		d.log.WarnContext(ctx, "ebpf: no egress interface found; nothing attached")
	}

	sizes := effectiveSizes(cfg.Maps)
	objs := d.objs
	replaced := false
	if objs == nil || sizes != d.sizes || cfg.PinPath != d.cfg.PinPath {
		adopted := cfg.PinPath != "" && pathExists(filepath.Join(cfg.PinPath, bpf.SnatMapCt))
		objs, err = load(sizes, cfg.PinPath)
		if err != nil {
			return err
		}
		if adopted {
			n, err := clearClosingMarks(objs.Ct)
			d.log.InfoContext(ctx, "ebpf: pinned flow table adopted, TCP closing marks cleared", "flows", n, "err", err)
		}
		replaced = d.objs != nil
		if replaced {
			n, err := copyFlows(d.objs.Ct, objs.Ct)
			d.log.InfoContext(ctx, "ebpf: maps replaced (sizes or pin path changed), flows copied", "flows", n, "err", err)
		}
	}
	fail := func(err error) error {
		if objs != d.objs {
			objs.Close()
		}
		return err
	}

	if err := fillMaps(objs, cfg, egress); err != nil {
		return fail(fmt.Errorf("ebpf: %w", err))
	}

	// Attach to new interfaces, swap programs where maps were replaced.
	want := map[int]bool{}
	for _, e := range egress {
		want[e.Index] = true
		a, ok := d.attached[e.Index]
		if ok && !replaced {
			continue
		}
		if ok {
			if err := a.update(objs); err != nil {
				return fail(fmt.Errorf("ebpf: %s: %w", e.Name, err))
			}
			continue
		}
		a, err := d.attach(e, objs, cfg.PinPath)
		if err != nil {
			return fail(fmt.Errorf("ebpf: %s: %w", e.Name, err))
		}
		d.attached[e.Index] = a
	}
	// Pin (or move, or unpin) the tcx links as the pin path says, then drop pins
	// no attachment holds (an earlier process's, of interfaces no longer egress).
	held := map[string]bool{}
	for _, idx := range slices.Sorted(mapsKeys(d.attached)) {
		a := d.attached[idx]
		if !want[idx] {
			continue
		}
		if err := a.pin(cfg.PinPath); err != nil {
			return fail(fmt.Errorf("ebpf: %s: %w", a.name, err))
		}
		if a.pinDir != "" {
			held[filepath.Base(linkPin(a.pinDir, a.index, "egress"))] = true
			held[filepath.Base(linkPin(a.pinDir, a.index, "ingress"))] = true
		}
	}
	if cfg.PinPath != "" {
		if err := unpinStale(cfg.PinPath, held); err != nil {
			d.log.WarnContext(ctx, "ebpf: stale pinned links", "err", err)
		}
	}
	// Detach from interfaces no longer egress (sorted for determinism).
	for _, idx := range slices.Sorted(mapsKeys(d.attached)) {
		if want[idx] {
			continue
		}
		if err := d.attached[idx].detach(); err != nil {
			d.log.WarnContext(ctx, "ebpf: detach", "interface", d.attached[idx].name, "err", err)
		}
		delete(d.attached, idx)
	}

	if replaced {
		d.gc.stop()
		d.gc = nil
		if d.cfg.PinPath != "" && d.cfg.PinPath != cfg.PinPath {
			if err := d.objs.Ct.Unpin(); err != nil {
				d.log.WarnContext(ctx, "ebpf: unpin old flow table", "err", err)
			}
		}
		d.objs.Close()
	}
	d.objs, d.sizes, d.cfg, d.egress = objs, sizes, cfg, egress
	if d.gc == nil {
		d.gc = startCollector(d.log, objs.Ct)
	}
	d.gc.configure(cfg.EffectiveGCInterval(), cfg.Timeouts.Effective())
	names := make([]string, 0, len(egress))
	for _, e := range egress {
		names = append(names, fmt.Sprintf("%s(v4=%s v6=%s)", e.Name, e.V4, e.V6))
	}
	d.log.InfoContext(ctx, "ebpf: masquerade in place", "egress", names, "conntrack_entries", sizes.ConnTrack)
	return nil
}

func mapsKeys(m map[int]*attachment) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// load loads the programs and maps with the given sizes.
func load(sizes datapath.MapSizes, pinPath string) (*bpf.SnatObjects, error) {
	spec, err := bpf.LoadSnat()
	if err != nil {
		return nil, fmt.Errorf("ebpf: load spec: %w", err)
	}
	spec.Maps[bpf.SnatMapCt].MaxEntries = sizes.ConnTrack
	spec.Maps[bpf.SnatMapNonmasq].MaxEntries = sizes.CIDRs
	spec.Maps[bpf.SnatMapPodcidrs].MaxEntries = sizes.CIDRs
	var opts cebpf.CollectionOptions
	if withoutKernelBTF() {
		// The programs' CO-RE read of sk_buff's ip_summed is guarded by the
		// weak bpf_cast_to_kern_ctx kfunc, which a kernel without BTF does
		// not resolve either: relocated against the object's own types
		// (no sk_buff there), it is poisoned in code the verifier never
		// reaches, and bpf_l4_csum_replace updates every checksum.
		opts.Programs.KernelTypes = spec.Types
	}
	if pinPath != "" {
		if err := os.MkdirAll(pinPath, 0o700); err != nil {
			return nil, fmt.Errorf("ebpf: PinPath: %w", err)
		}
		// Only the flow table is pinned: it is the state worth keeping
		// across a daemon restart; the rest is rebuilt from config.
		spec.Maps[bpf.SnatMapCt].Pinning = cebpf.PinByName
		opts.Maps.PinPath = pinPath
	}
	objs := new(bpf.SnatObjects)
	if err := spec.LoadAndAssign(objs, &opts); err != nil {
		var verr *cebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("ebpf: load programs: %+v", verr)
		}
		if errors.Is(err, cebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("ebpf: pinned flow table in %s has other sizes (remove it or keep Maps): %w", pinPath, err)
		}
		return nil, fmt.Errorf("ebpf: load programs: %w", err)
	}
	return objs, nil
}

func pathExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// withoutKernelBTF reports whether the kernel has no BTF
// (CONFIG_DEBUG_INFO_BTF=n) for CO-RE relocations.
func withoutKernelBTF() bool {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err == nil {
		return false
	}
	_, err := btf.LoadKernelSpec()
	return errors.Is(err, btf.ErrNotSupported)
}

// copyFlows copies every flow from src to dst (best effort: flows created
// during the copy are recreated by their next packet).
func copyFlows(src, dst *cebpf.Map) (int, error) {
	var k bpf.SnatCtKey
	var v bpf.SnatCtVal
	n := 0
	it := src.Iterate()
	for it.Next(&k, &v) {
		if err := dst.Update(&k, &v, cebpf.UpdateAny); err != nil {
			return n, err
		}
		n++
	}
	return n, it.Err()
}

// Remove detaches the programs, deletes leftover tc filters of earlier
// processes, stops the collector, closes the maps and deletes what was
// pinned. Idempotent.
func (d *Datapath) Remove(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, idx := range slices.Sorted(mapsKeys(d.attached)) {
		if err := d.attached[idx].detach(); err != nil {
			errs = append(errs, fmt.Errorf("ebpf: detach %s: %w", d.attached[idx].name, err))
		}
		delete(d.attached, idx)
	}
	if err := removeLeftoverFilters(); err != nil {
		errs = append(errs, fmt.Errorf("ebpf: %w", err))
	}
	if d.gc != nil {
		d.gc.stop()
		d.gc = nil
	}
	if d.objs != nil {
		if d.cfg.PinPath != "" {
			if err := d.objs.Ct.Unpin(); err != nil {
				errs = append(errs, fmt.Errorf("ebpf: unpin: %w", err))
			}
		}
		d.objs.Close()
		d.objs = nil
	}
	if d.cfg.PinPath != "" {
		// Leftovers of an earlier process: its pinned links, then its flow table.
		if err := unpinStale(d.cfg.PinPath, nil); err != nil {
			errs = append(errs, fmt.Errorf("ebpf: %w", err))
		}
		p := filepath.Join(d.cfg.PinPath, bpf.SnatMapCt)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("ebpf: unpin %s: %w", p, err))
		}
		_ = os.Remove(d.cfg.PinPath) // only if empty
	}
	d.egress = nil
	err := errors.Join(errs...)
	if err != nil {
		d.lastErr = err.Error()
	} else {
		d.lastErr = ""
	}
	return err
}

// Close releases the datapath's resources as a process exit would, without
// removing what is meant to outlive it: unpinned tcx links go (the kernel
// detaches them), pinned tcx links, legacy tc filters and the pinned flow
// table stay. A new Datapath's Apply with the same PinPath adopts the links
// and picks the flow table up again.
func (d *Datapath) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for idx, a := range d.attached {
		switch {
		case a.tcx && a.pinDir != "":
			errs = append(errs, a.egress.Close(), a.ingress.Close())
		case a.tcx:
			errs = append(errs, a.detach())
		}
		delete(d.attached, idx)
	}
	if d.gc != nil {
		d.gc.stop()
		d.gc = nil
	}
	if d.objs != nil {
		errs = append(errs, d.objs.Close())
		d.objs = nil
	}
	return errors.Join(errs...)
}

// RemoveWithConfig is Remove for a datapath that has not applied cfg in this
// process (core/datapathctl: an agent uninstalled before its first Apply): the
// pin path says where an earlier process's links and flow table are.
func (d *Datapath) RemoveWithConfig(ctx context.Context, cfg datapath.Config) error {
	d.mu.Lock()
	if d.objs == nil {
		d.cfg.PinPath = cfg.PinPath
	}
	d.mu.Unlock()
	return d.Remove(ctx)
}

// Status reports attachments, program IDs and counters.
func (d *Datapath) Status(ctx context.Context) (datapath.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := datapath.Status{Name: Name, LastError: d.lastErr, Detail: map[string]string{}}
	if d.objs == nil {
		return st, nil
	}
	st.Active = true
	for _, e := range d.egress {
		if _, ok := d.attached[e.Index]; ok {
			st.Interfaces = append(st.Interfaces, e.Name)
		}
	}
	mode := "tcx"
	for _, a := range d.attached {
		if !a.tcx {
			mode = "tc"
		}
	}
	st.Detail["attach"] = mode
	for name, p := range map[string]*cebpf.Program{"egress": d.objs.AllotSnatEgress, "ingress": d.objs.AllotSnatIngress} {
		if info, err := p.Info(); err == nil {
			if id, ok := info.ID(); ok {
				st.Detail[name+"_prog_id"] = strconv.FormatUint(uint64(id), 10)
			}
		}
	}
	st.Detail["conntrack_max_entries"] = strconv.FormatUint(uint64(d.sizes.ConnTrack), 10)
	counters, err := readStats(d.objs.Stats)
	if err != nil {
		return st, fmt.Errorf("ebpf: read stats: %w", err)
	}
	for i, name := range statNames {
		st.Detail[name] = strconv.FormatUint(counters[i], 10)
	}
	if d.gc != nil {
		g := d.gc.snapshot()
		st.Detail["gc_passes"] = strconv.FormatUint(g.passes, 10)
		st.Detail["gc_deleted_total"] = strconv.FormatUint(g.deleted, 10)
		st.Detail["gc_last_entries"] = strconv.Itoa(g.lastEntries)
		st.Detail["gc_last_duration"] = g.lastDuration.String()
		if g.lastErr != "" {
			st.LastError = "gc: " + g.lastErr
		}
	}
	return st, nil
}

// statNames follows enum stat_idx in bpf/snat.c.
var statNames = []string{"snat_packets", "rnat_packets", "new_flows", "port_rewrites", "alloc_failures", "host_flows"}

func readStats(m *cebpf.Map) ([]uint64, error) {
	out := make([]uint64, len(statNames))
	for i := range statNames {
		var per []uint64
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, err
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out, nil
}

// Programs returns the loaded programs (for benchmarks reading run-time
// statistics); nil when nothing is applied. The caller must not close them.
func (d *Datapath) Programs() (egress, ingress *cebpf.Program) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.objs == nil {
		return nil, nil
	}
	return d.objs.AllotSnatEgress, d.objs.AllotSnatIngress
}

// FlowCount counts the entries of the flow table (both directions).
func (d *Datapath) FlowCount() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.objs == nil {
		return 0, nil
	}
	var k bpf.SnatCtKey
	var v bpf.SnatCtVal
	n := 0
	it := d.objs.Ct.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}
