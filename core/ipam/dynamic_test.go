package ipam

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/internal/testenv"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/sdk/policy"
)

type dynRig struct {
	blockGateway bool
	t            testing.TB
	path         string
	st           *store.Store
	m            *Manager
	changes      atomic.Int64
	annot        map[string]string // pod name -> pool annotation
	wait         time.Duration
	ready        chan struct{}              // DynamicOptions.Ready; nil: none
	refresh      func(context.Context) bool // DynamicOptions.RefreshPools
	metrics      *Metrics
}

func newDynRig(t testing.TB, wait time.Duration) *dynRig {
	r := &dynRig{t: t, path: filepath.Join(t.TempDir(), "allot.db"), annot: map[string]string{}, wait: wait, metrics: NewMetrics(nil)}
	r.open()
	t.Cleanup(func() { r.st.Close() })
	return r
}

func (r *dynRig) open() {
	r.t.Helper()
	st, err := store.Open(context.Background(), r.path, store.Options{NoSync: true, Logger: quiet})
	if err != nil {
		r.t.Fatal(err)
	}
	r.st = st
	pol, err := ciliumannotations.New(ciliumannotations.Config{})
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := New(context.Background(), Options{
		Store: st, Logger: quiet, Metrics: r.metrics,
		Policy:  func(string) policy.PoolPolicy { return pol },
		Dynamic: &DynamicOptions{Node: "node-a", Wait: r.wait, BlockGateway: r.blockGateway, Ready: r.ready, RefreshPools: r.refresh},
		PodContext: func(_ context.Context, req *policy.PodRequest) error {
			if req.Pod.Name == "missing" {
				return api.Errorf(api.CodeUnavailable, "pod %s not found", req.Pod.Name)
			}
			if a, ok := r.annot[req.Pod.Name]; ok {
				req.Pod.Annotations = map[string]string{ciliumannotations.DefaultAnnotation: a}
			}
			return nil
		},
		OnChange: func() { r.changes.Add(1) },
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.m = m
}

func (r *dynRig) restart() {
	r.t.Helper()
	if err := r.st.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.open()
}

func podAdd(id, pod string) *api.AllocateRequest {
	return &api.AllocateRequest{Owner: api.Owner{ContainerID: id, IfName: "eth0"}, Network: "net",
		Pod: api.PodRef{Namespace: "ns", Name: pod, UID: "uid-" + pod}}
}

func mustNoErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func usageOf(m *Manager, name string, fam policy.Family) PoolUsage {
	for _, u := range m.Usage() {
		if u.Name == name && u.Family == fam {
			return u
		}
	}
	return PoolUsage{}
}

func TestDynamicDualStackSameName(t *testing.T) {
	r := newDynRig(t, time.Second)
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/30")))
	mustNoErr(t, r.m.AddCIDR("default", pfx("fd00:1::/126")))
	a, err := r.m.Allocate(context.Background(), podAdd("c1", "p1"))
	mustNoErr(t, err)
	if len(a.IPs) != 2 || a.IPs[0].Address != "10.1.0.1/30" || a.IPs[1].Address != "fd00:1::1/126" || a.IPs[0].Pool != "default" {
		t.Fatalf("allocation %+v", a.IPs)
	}
	u := r.m.Usage()
	if len(u) != 2 || u[0].Family != policy.IPv4 || u[0].Used != 1 || u[1].Used != 1 || u[0].Usable != 2 {
		t.Fatalf("usage %+v", u)
	}
	if r.changes.Load() == 0 {
		t.Fatal("OnChange never called")
	}
	// Restart: the addresses are held before their blocks are known, and taken as soon as
	// the blocks arrive.
	r.restart()
	if st, _ := r.m.Status(context.Background()); st.Message != "" && !strings.Contains(st.Message, "on demand") {
		t.Fatalf("status after restart: %+v", st)
	}
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/30")))
	if u := usageOf(r.m, "default", policy.IPv4); u.Used != 1 {
		t.Fatalf("held address not marked in the block that arrived: %+v", u)
	}
	if err := r.m.RemoveCIDR("default", pfx("10.1.0.0/30")); !errors.Is(err, ErrBlockInUse) {
		t.Fatalf("remove in-use block: %v", err)
	}
	mustNoErr(t, r.m.Release(context.Background(), &api.ReleaseRequest{Owner: a.Owner}))
	mustNoErr(t, r.m.RemoveCIDR("default", pfx("10.1.0.0/30")))
	if u := usageOf(r.m, "default", policy.IPv4); u.Usable != 0 || len(u.CIDRs) != 0 {
		t.Fatalf("after remove: %+v", u)
	}
}

// ENI mode presents an address of an IPv6 /80 as a host address with a link-local gateway,
// as the AWS VPC CNI does: the addressing may be longer than the block, never longer than
// the family.
func TestDynamicHostAddressingOfLargerBlock(t *testing.T) {
	r := newDynRig(t, time.Second)
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/30")))
	gw := netip.MustParseAddr("fe80::1")
	if err := r.m.AddCIDRWith("default", pfx("2600:1f18::/80"), Addressing{Bits: 129, Gateway: gw}); err == nil || !strings.Contains(err.Error(), "between 0 and 128") {
		t.Fatalf("addressing /129: %v", err)
	}
	mustNoErr(t, r.m.AddCIDRWith("default", pfx("2600:1f18::/80"), Addressing{Bits: 128, Gateway: gw}))
	a, err := r.m.Allocate(context.Background(), podAdd("c1", "p1"))
	mustNoErr(t, err)
	if len(a.IPs) != 2 || a.IPs[1].Address != "2600:1f18::1/128" || a.IPs[1].Gateway != "fe80::1" {
		t.Fatalf("allocation %+v", a.IPs)
	}
	// The pod's default route goes via the addressing's gateway (the interface plugin,
	// ptp or bridge with isDefaultGateway false, adds no default route of its own); the
	// IPv4 block has no gateway here, so no IPv4 default route.
	if len(a.Routes) != 1 || a.Routes[0] != (api.Route{Dst: "::/0", GW: "fe80::1"}) {
		t.Fatalf("routes %+v, want ::/0 via fe80::1", a.Routes)
	}
}

func TestDynamicOverlapRefused(t *testing.T) {
	r := newDynRig(t, time.Second)
	mustNoErr(t, r.m.AddCIDR("a", pfx("10.1.0.0/24")))
	mustNoErr(t, r.m.AddCIDR("a", pfx("10.1.0.0/24"))) // same block again: no-op
	err := r.m.AddCIDR("b", pfx("10.1.0.128/25"))
	if err == nil || !strings.Contains(err.Error(), `overlaps 10.1.0.0/24 of pool "a"`) {
		t.Fatalf("overlap: %v", err)
	}
	if err := r.m.AddCIDR("b", netip.PrefixFrom(netip.MustParseAddr("10.2.0.1"), 24)); err == nil {
		t.Fatal("unmasked block accepted")
	}
}

// Under testing/synctest: the ADD's wait runs on the bubble's clock, and synctest.Wait
// returns once it is parked waiting for a block.
func TestDynamicWaitsForBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newDynRig(t, 10*time.Second)
		mustNoErr(t, r.m.EnsurePool("blue", policy.IPv4))
		r.annot["p1"] = "blue"
		type result struct {
			a   *api.Allocation
			err error
		}
		done := make(chan result, 1)
		go func() {
			a, err := r.m.Allocate(context.Background(), podAdd("c1", "p1"))
			done <- result{a, err}
		}()
		// It waits, counted as pending on blue/ipv4.
		synctest.Wait()
		if n := usageOf(r.m, "blue", policy.IPv4).Pending; n != 1 {
			t.Fatalf("%d requests pending, want 1", n)
		}
		select {
		case res := <-done:
			t.Fatalf("returned before a block arrived: %+v %v", res.a, res.err)
		default:
		}
		// The wait shows in the metrics the "requests pending" alert reads.
		if n := testutil.ToFloat64(r.metrics.waiting.WithLabelValues("blue", "ipv4")); n != 1 {
			t.Fatalf("allot_ipam_requests_waiting{blue,ipv4} = %v while one ADD waits", n)
		}
		if ts := testutil.ToFloat64(r.metrics.oldestWait); ts <= 0 || ts > float64(time.Now().Unix()+1) {
			t.Fatalf("oldest wait timestamp %v", ts)
		}
		mustNoErr(t, r.m.AddCIDR("blue", pfx("10.9.0.0/30")))
		res := <-done
		mustNoErr(t, res.err)
		if n, ts := testutil.ToFloat64(r.metrics.waiting.WithLabelValues("blue", "ipv4")), testutil.ToFloat64(r.metrics.oldestWait); n != 0 || ts != 0 {
			t.Fatalf("after the wait: waiting %v, oldest %v; want 0 and 0", n, ts)
		}
		if res.a.IPs[0].Address != "10.9.0.1/30" || res.a.IPs[0].Pool != "blue" {
			t.Fatalf("got %+v", res.a.IPs)
		}
		if u := usageOf(r.m, "blue", policy.IPv4); u.Pending != 0 || u.Used != 1 {
			t.Fatalf("usage after: %+v", u)
		}
	})
}

// TestDynamicWaitsUntilReady: after a restart, before the agent has read its node's blocks
// the manager knows no pool. A new ADD then waits for Ready (and is served once the pools
// are there) instead of failing with "no pool"; if Ready does not come in time, it fails
// with "try again later"; an owner restored from the store is answered at once.
func TestDynamicWaitsUntilReady(t *testing.T) {
	r := newDynRig(t, 10*time.Second)
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/24")))
	held, err := r.m.Allocate(context.Background(), podAdd("c0", "p0"))
	mustNoErr(t, err)
	r.ready = make(chan struct{})
	r.restart()

	again, err := r.m.Allocate(context.Background(), podAdd("c0", "p0"))
	if err != nil || again.IPs[0].Address != held.IPs[0].Address {
		t.Fatalf("restored owner before ready: %+v %v", again, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.m.Allocate(context.Background(), podAdd("c1", "p1"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a new ADD returned before the pools were known: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/24")))
	close(r.ready)
	mustNoErr(t, <-done)

	r2 := newDynRig(t, 50*time.Millisecond)
	r2.ready = make(chan struct{})
	r2.restart()
	_, err = r2.m.Allocate(context.Background(), podAdd("c1", "p1"))
	if api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "node node-a: its pools are not known yet") {
		t.Fatalf("not ready in time: %v %v", api.CodeOf(err), err)
	}
}

// TestDynamicRefreshPools: a decision that finds no pool the request names asks RefreshPools
// once; if it registered pools, the decision is asked again and the ADD goes on (waiting for
// a block of the new pool); if not, the policy's error stands. A decided request never asks.
func TestDynamicRefreshPools(t *testing.T) {
	r := newDynRig(t, 10*time.Second)
	var calls atomic.Int32
	register := false
	r.refresh = func(context.Context) bool {
		calls.Add(1)
		if register {
			mustNoErr(t, r.m.EnsurePool("late", policy.IPv4))
		}
		return register
	}
	r.restart()
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/24")))
	r.annot["p-missing"] = "late"
	_, err := r.m.Allocate(context.Background(), podAdd("c1", "p-missing"))
	if api.CodeOf(err) != api.CodeNoPool || !strings.Contains(err.Error(), `names pool "late", which does not exist`) || calls.Load() != 1 {
		t.Fatalf("nothing registered: %v after %d refreshes, want the policy's error after one", err, calls.Load())
	}
	_, err = r.m.Allocate(context.Background(), podAdd("c2", "p-default"))
	mustNoErr(t, err)
	if calls.Load() != 1 {
		t.Fatalf("a decided ADD refreshed the pools (%d calls)", calls.Load())
	}
	register = true
	done := make(chan error, 1)
	go func() {
		a, err := r.m.Allocate(context.Background(), podAdd("c3", "p-missing"))
		if err == nil && a.IPs[0].Pool != "late" {
			err = fmt.Errorf("got %+v, want pool late", a.IPs)
		}
		done <- err
	}()
	testenv.Eventually(t, 10*time.Second, "the ADD waits for a block of the pool registered late", func() (bool, string) {
		return usageOf(r.m, "late", policy.IPv4).Pending == 1, fmt.Sprintf("%+v", usageOf(r.m, "late", policy.IPv4))
	})
	mustNoErr(t, r.m.AddCIDR("late", pfx("10.2.0.0/24")))
	mustNoErr(t, <-done)
	if calls.Load() != 2 {
		t.Fatalf("%d refreshes, want 2", calls.Load())
	}
}

func TestDynamicWaitsForRelease(t *testing.T) {
	r := newDynRig(t, 10*time.Second)
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/31"))) // 2 usable addresses
	for i := range 2 {
		_, err := r.m.Allocate(context.Background(), podAdd(fmt.Sprint("c", i), fmt.Sprint("p", i)))
		mustNoErr(t, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.m.Allocate(context.Background(), podAdd("c9", "p9"))
		done <- err
	}()
	testenv.Eventually(t, 5*time.Second, "the ADD to wait", pending(r.m, "default", 1))
	mustNoErr(t, r.m.Release(context.Background(), &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c0", IfName: "eth0"}}))
	mustNoErr(t, <-done)
}

func TestDynamicWaitTimesOut(t *testing.T) {
	r := newDynRig(t, 50*time.Millisecond)
	mustNoErr(t, r.m.EnsurePool("default", policy.IPv4))
	_, err := r.m.Allocate(context.Background(), podAdd("c1", "p1"))
	if api.CodeOf(err) != api.CodeExhausted {
		t.Fatalf("code %v: %v", api.CodeOf(err), err)
	}
	want := `pool "default": no free IPv4 address on node node-a; requested a new block from the operator, none arrived within 50ms`
	if err.Error() != want {
		t.Fatalf("error\n got %q\nwant %q", err, want)
	}
	if u := usageOf(r.m, "default", policy.IPv4); u.Pending != 0 {
		t.Fatalf("pending not cleared: %+v", u)
	}
	if n := testutil.ToFloat64(r.metrics.timeouts); n != 1 {
		t.Fatalf("allot_ipam_wait_timeouts_total = %v; want 1", n)
	}
	// The request's context ends first.
	r2 := newDynRig(t, time.Minute)
	mustNoErr(t, r2.m.EnsurePool("default", policy.IPv4))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = r2.m.Allocate(ctx, podAdd("c1", "p1"))
	if api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "no free IPv4 address on node node-a") {
		t.Fatalf("ctx end: %v %v", api.CodeOf(err), err)
	}
}

func TestDynamicPodContextError(t *testing.T) {
	r := newDynRig(t, time.Second)
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/24")))
	_, err := r.m.Allocate(context.Background(), podAdd("c1", "missing"))
	if api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("got %v", err)
	}
}

func TestDynamicRemoveRacesAllocate(t *testing.T) {
	// Allocations and block removals race; a block is removed only when nothing of it is
	// held, and no address is ever handed out from a removed block or twice.
	r := newDynRig(t, 2*time.Second)
	blocks := []netip.Prefix{pfx("10.1.0.0/29"), pfx("10.1.0.8/29"), pfx("10.1.0.16/29")}
	for _, b := range blocks {
		mustNoErr(t, r.m.AddCIDR("default", b))
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held = map[string]string{}
		stop = make(chan struct{})
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				a, err := r.m.Allocate(context.Background(), podAdd(id, id))
				if err != nil {
					continue
				}
				addr := a.IPs[0].Address
				mu.Lock()
				if o, dup := held[addr]; dup {
					mu.Unlock()
					t.Errorf("%s handed to %s and %s", addr, o, id)
					return
				}
				held[addr] = id
				mu.Unlock()
				time.Sleep(time.Millisecond) // sleep: holds the address while blocks are removed
				mu.Lock()
				delete(held, addr)
				mu.Unlock()
				if err := r.m.Release(context.Background(), &api.ReleaseRequest{Owner: a.Owner}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 300 {
		b := blocks[i%len(blocks)]
		if err := r.m.RemoveCIDR("default", b); err == nil {
			mu.Lock()
			for addr := range held {
				if b.Contains(netip.MustParsePrefix(addr).Addr()) {
					t.Errorf("block %s removed while %s is held", b, addr)
				}
			}
			mu.Unlock()
			time.Sleep(100 * time.Microsecond) // sleep: lets the workers allocate between removals
			mustNoErr(t, r.m.AddCIDR("default", b))
		} else if !errors.Is(err, ErrBlockInUse) {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

func TestStaticManagerRefusesDynamicOps(t *testing.T) {
	r := newRig(t, dualStack("10.0.0.0/24", "fd00::/120"))
	if err := r.m.AddCIDR("v4", pfx("10.9.0.0/24")); !errors.Is(err, ErrNotDynamic) {
		t.Fatalf("AddCIDR on static manager: %v", err)
	}
}

// ADDs waiting for a block that arrives with its addressing (ENI mode: a single address of a
// /24 subnet with its router) all see the addressing: none is woken before it is in place.
func TestDynamicWaitersSeeAddressing(t *testing.T) {
	r := newDynRig(t, 10*time.Second)
	mustNoErr(t, r.m.EnsurePool("blue", policy.IPv4))
	const n = 8
	done := make(chan *api.Allocation, n)
	errs := make(chan error, n)
	for i := range n {
		r.annot[fmt.Sprint("p", i)] = "blue"
	}
	for i := range n {
		pod := fmt.Sprint("p", i)
		go func() {
			a, err := r.m.Allocate(context.Background(), podAdd("c"+pod, pod))
			if err != nil {
				errs <- err
				return
			}
			done <- a
		}()
	}
	testenv.Eventually(t, 5*time.Second, "the ADDs to wait", pending(r.m, "blue", n))
	gw := netip.MustParseAddr("10.9.0.1")
	for i := range n {
		ad := netip.AddrFrom4([4]byte{10, 9, 0, byte(10 + i)})
		mustNoErr(t, r.m.AddCIDRWith("blue", netip.PrefixFrom(ad, 32), Addressing{Bits: 24, Gateway: gw}))
	}
	for range n {
		select {
		case a := <-done:
			if p := netip.MustParsePrefix(a.IPs[0].Address); p.Bits() != 24 || a.IPs[0].Gateway != "10.9.0.1" {
				t.Fatalf("allocation %+v: want the subnet's /24 and router", a.IPs[0])
			}
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("an ADD never finished")
		}
	}
}

// TestDynamicBlockGateway: with BlockGateway each block's first usable address is its pods'
// gateway: returned with every address, never handed out, not counted; blocks too small for
// one (point-to-point, host) give every address to pods.
func TestDynamicBlockGateway(t *testing.T) {
	r := &dynRig{t: t, path: filepath.Join(t.TempDir(), "allot.db"), annot: map[string]string{}, wait: time.Second, blockGateway: true}
	r.open()
	t.Cleanup(func() { r.st.Close() })
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/29")))
	mustNoErr(t, r.m.AddCIDR("default", pfx("fd00:1::/125")))
	if u := usageOf(r.m, "default", policy.IPv4); u.Usable != 5 {
		t.Fatalf("ipv4 usable %d, want 5 (8 minus network, broadcast, gateway)", u.Usable)
	}
	if u := usageOf(r.m, "default", policy.IPv6); u.Usable != 6 {
		t.Fatalf("ipv6 usable %d, want 6 (8 minus anycast, gateway)", u.Usable)
	}
	seen := map[string]bool{}
	for i := range 5 {
		a, err := r.m.Allocate(context.Background(), podAdd(fmt.Sprint("c", i), fmt.Sprint("p", i)))
		mustNoErr(t, err)
		for _, ip := range a.IPs {
			want := "10.1.0.1"
			if strings.Contains(ip.Address, ":") {
				want = "fd00:1::1"
			}
			if ip.Gateway != want || strings.HasPrefix(ip.Address, want+"/") || seen[ip.Address] {
				t.Fatalf("address %s gateway %s (want gateway %s, never handed out, no duplicate)", ip.Address, ip.Gateway, want)
			}
			seen[ip.Address] = true
		}
		if len(a.Routes) != 2 || a.Routes[0] != (api.Route{Dst: "0.0.0.0/0", GW: "10.1.0.1"}) || a.Routes[1] != (api.Route{Dst: "::/0", GW: "fd00:1::1"}) {
			t.Fatalf("routes %+v, want the default routes via the block gateways", a.Routes)
		}
	}
	if _, err := r.m.Allocate(context.Background(), podAdd("c5", "p5")); err == nil {
		t.Fatal("a sixth IPv4 address from a /29 whose gateway is reserved")
	}
	if got := BlockGateway(pfx("10.1.0.4/31")); got.IsValid() {
		t.Fatalf("gateway of a /31: %s", got)
	}
	mustNoErr(t, r.m.AddCIDR("other", pfx("10.2.0.0/31")))
	if u := usageOf(r.m, "other", policy.IPv4); u.Usable != 2 {
		t.Fatalf("/31 usable %d, want 2", u.Usable)
	}
}

// IPPool spec.disable in multi-pool mode: the pool hands out nothing new, whatever the policy
// (cilium-annotations does not filter disabled pools), fails at once instead of waiting for a
// block, and the addresses it holds stay.
func TestDynamicDisabledPool(t *testing.T) {
	r := newDynRig(t, 5*time.Second)
	mustNoErr(t, r.m.AddCIDR("default", pfx("10.1.0.0/29")))
	held, err := r.m.Allocate(context.Background(), podAdd("c1", "p1"))
	mustNoErr(t, err)
	mustNoErr(t, r.m.SetPoolDisabled("default", policy.IPv4, true))
	start := time.Now()
	_, err = r.m.Allocate(context.Background(), podAdd("c2", "p2"))
	if api.CodeOf(err) != api.CodeNoPool || !strings.Contains(err.Error(), `"default" disabled (IPPool spec.disable)`) {
		t.Fatalf("allocate from a disabled pool: %v", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("a request to a disabled pool waited %v for a block", time.Since(start))
	}
	req := podAdd("c3", "p3")
	req.IPs = []string{"10.1.0.5"}
	if _, err := r.m.Allocate(context.Background(), req); api.CodeOf(err) != api.CodeNoPool {
		t.Fatalf("requested address of a disabled pool: %v", err)
	}
	if u := usageOf(r.m, "default", policy.IPv4); u.Used != 1 {
		t.Fatalf("held address lost: %+v", u)
	}
	mustNoErr(t, r.m.Release(context.Background(), &api.ReleaseRequest{Owner: held.Owner}))
	mustNoErr(t, r.m.SetPoolDisabled("default", policy.IPv4, false))
	if _, err := r.m.Allocate(context.Background(), podAdd("c4", "p4")); err != nil {
		t.Fatalf("enabled again: %v", err)
	}
	if err := r.m.SetPoolDisabled("nope", policy.IPv4, true); !errors.Is(err, ErrNoSuchPool) {
		t.Fatalf("unknown pool: %v", err)
	}
}

// TestDynamicDropInUse: a block taken away while in use hands out nothing more; its holders
// keep their addresses until DEL, which then frees nothing twice; if the block comes back its
// held addresses are taken again.
func TestDynamicDropInUse(t *testing.T) {
	ctx := context.Background()
	r := newDynRig(t, 200*time.Millisecond)
	lost, kept := pfx("10.1.0.0/29"), pfx("10.2.0.0/29")
	mustNoErr(t, r.m.AddCIDR("default", lost))
	a1, err := r.m.Allocate(ctx, podAdd("c1", "p1"))
	mustNoErr(t, err)
	held, err := r.m.DropCIDR("default", lost)
	mustNoErr(t, err)
	if len(held) != 1 || held[0].String() != "10.1.0.1" {
		t.Fatalf("held in the dropped block: %v", held)
	}
	if o := r.m.Orphans(); len(o) != 1 || o[0].Owner != a1.Owner {
		t.Fatalf("orphans: %+v", o)
	}
	// Nothing is handed out from the dropped block: with no other block the ADD waits and fails.
	if _, err := r.m.Allocate(ctx, podAdd("c2", "p2")); api.CodeOf(err) != api.CodeExhausted && api.CodeOf(err) != api.CodeUnavailable {
		t.Fatalf("ADD with only a dropped block: %v", err)
	}
	mustNoErr(t, r.m.AddCIDR("default", kept))
	a2, err := r.m.Allocate(ctx, podAdd("c2", "p2"))
	mustNoErr(t, err)
	if !kept.Contains(netip.MustParsePrefix(a2.IPs[0].Address).Addr()) {
		t.Fatalf("ADD after the drop got %v, outside %s", a2.IPs, kept)
	}
	// The holder's repeated ADD still answers its address (idempotent).
	again, err := r.m.Allocate(ctx, podAdd("c1", "p1"))
	mustNoErr(t, err)
	if again.IPs[0].Address != a1.IPs[0].Address {
		t.Fatalf("repeated ADD: %v, want %v", again.IPs, a1.IPs)
	}
	// The block comes back: the held address is taken, not handed out again.
	mustNoErr(t, r.m.AddCIDR("default", lost))
	if u := usageOf(r.m, "default", policy.IPv4); u.Used != 2 {
		t.Fatalf("after the block came back: %+v", u)
	}
	if len(r.m.Orphans()) != 0 {
		t.Fatalf("orphans after the block came back: %+v", r.m.Orphans())
	}
	// Drop again, then DEL: the record goes, the address was never handed out twice.
	_, err = r.m.DropCIDR("default", lost)
	mustNoErr(t, err)
	mustNoErr(t, r.m.Release(ctx, &api.ReleaseRequest{Owner: a1.Owner}))
	if len(r.m.Orphans()) != 0 {
		t.Fatalf("orphans after DEL: %+v", r.m.Orphans())
	}
	recs, err := r.st.List(ctx)
	mustNoErr(t, err)
	if len(recs) != 1 || recs[0].Owner.ContainerID != "c2" {
		t.Fatalf("records after DEL: %+v", recs)
	}
}

// pending is a condition for testenv.Eventually: n ADDs wait on pool's IPv4 family.
func pending(m *Manager, pool string, n int) func() (bool, string) {
	return func() (bool, string) {
		got := usageOf(m, pool, policy.IPv4).Pending
		return got == n, fmt.Sprintf("%d pending, want %d", got, n)
	}
}
