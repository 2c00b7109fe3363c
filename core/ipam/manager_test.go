package ipam

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/plugins/policy/static"
	"github.com/allot-ipam/allot/sdk/policy"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type rig struct {
	t     testing.TB
	path  string
	pools []PoolSpec
	st    *store.Store
	m     *Manager
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func dualStack(v4, v6 string) []PoolSpec {
	return []PoolSpec{
		{Allocator: allocator.Config{Name: "v4", CIDRs: []netip.Prefix{pfx(v4)}, Gateway: pfx(v4).Addr().Next()}, Default: true,
			Routes: []api.Route{{Dst: "0.0.0.0/0"}}},
		{Allocator: allocator.Config{Name: "v6", CIDRs: []netip.Prefix{pfx(v6)}}, Default: true},
	}
}

func newRig(t testing.TB, pools []PoolSpec) *rig {
	r := &rig{t: t, path: filepath.Join(t.TempDir(), "allot.db"), pools: pools}
	r.open()
	t.Cleanup(func() { r.st.Close() })
	return r
}

func (r *rig) open() {
	r.t.Helper()
	st, err := store.Open(context.Background(), r.path, store.Options{NoSync: true, Logger: quiet})
	if err != nil {
		r.t.Fatal(err)
	}
	r.st = st
	pol := static.New()
	m, err := New(context.Background(), Options{Pools: r.pools, Store: st, Logger: quiet,
		Policy: func(string) policy.PoolPolicy { return pol }})
	if err != nil {
		r.t.Fatal(err)
	}
	r.m = m
}

// restart simulates a daemon restart on the same store file.
func (r *rig) restart() {
	r.t.Helper()
	if err := r.st.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.open()
}

func add(id string, opts ...func(*api.AllocateRequest)) *api.AllocateRequest {
	req := &api.AllocateRequest{Owner: api.Owner{ContainerID: id, IfName: "eth0"}, Network: "net"}
	for _, o := range opts {
		o(req)
	}
	return req
}

func withIPs(ips ...string) func(*api.AllocateRequest) {
	return func(r *api.AllocateRequest) { r.IPs = ips }
}

func withPools(p ...string) func(*api.AllocateRequest) {
	return func(r *api.AllocateRequest) { r.Pools = p }
}

func wantCode(t *testing.T, err error, code api.ErrorCode, contains string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s error, got nil", code)
	}
	if got := api.CodeOf(err); got != code {
		t.Fatalf("want code %s, got %s (%v)", code, got, err)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err, contains)
	}
}

func TestAllocateDualStackWithGatewayAndRoutes(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/24", "fd00:1::/120"))
	ctx := context.Background()
	a, err := r.m.Allocate(ctx, add("c1", func(q *api.AllocateRequest) { q.Pod = api.PodRef{Namespace: "ns", Name: "p", UID: "u"} }))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.IPs) != 2 {
		t.Fatalf("want 2 addresses, got %+v", a.IPs)
	}
	// .0 is the network address and .1 the gateway: the first address handed out is .2.
	if a.IPs[0].Address != "10.1.0.2/24" || a.IPs[0].Gateway != "10.1.0.1" || a.IPs[0].Pool != "v4" {
		t.Errorf("v4: got %+v", a.IPs[0])
	}
	if !strings.HasPrefix(a.IPs[1].Address, "fd00:1::") || !strings.HasSuffix(a.IPs[1].Address, "/120") {
		t.Errorf("v6: got %+v", a.IPs[1])
	}
	if len(a.Routes) != 1 || a.Routes[0].Dst != "0.0.0.0/0" {
		t.Errorf("routes: %+v", a.Routes)
	}
	if a.Pod.Name != "p" {
		t.Errorf("pod not recorded: %+v", a.Pod)
	}
}

func TestAllocateIsIdempotentPerOwner(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/24", "fd00:1::/120"))
	ctx := context.Background()
	a1, err := r.m.Allocate(ctx, add("c1"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := r.m.Allocate(ctx, add("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a1.IPs) != fmt.Sprint(a2.IPs) {
		t.Fatalf("second ADD gave %v, first %v", a2.IPs, a1.IPs)
	}
	// Another interface of the same container is another owner.
	a3, err := r.m.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "c1", IfName: "net1"}, Network: "net"})
	if err != nil {
		t.Fatal(err)
	}
	if a3.IPs[0].Address == a1.IPs[0].Address {
		t.Fatal("two owners share an address")
	}
}

func TestReleaseFreesAndIsIdempotent(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/30", "fd00:1::/126"))
	ctx := context.Background()
	// /30: .0 network, .1 gateway, .3 broadcast: exactly one usable address.
	if _, err := r.m.Allocate(ctx, add("c1")); err != nil {
		t.Fatal(err)
	}
	_, err := r.m.Allocate(ctx, add("c2"))
	wantCode(t, err, api.CodeExhausted, `"v4" exhausted`)
	for range 2 {
		if err := r.m.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := r.m.Allocate(ctx, add("c2"))
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	if a.IPs[0].Address != "10.1.0.2/30" {
		t.Fatalf("got %v", a.IPs)
	}
	_, err = r.m.Check(ctx, &api.CheckRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}})
	wantCode(t, err, api.CodeNotFound, "holds no address")
}

func TestRequestedAddresses(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/24", "fd00:1::/120"))
	ctx := context.Background()
	a, err := r.m.Allocate(ctx, add("c1", withIPs("10.1.0.50/24")))
	if err != nil {
		t.Fatal(err)
	}
	if a.IPs[0].Address != "10.1.0.50/24" || len(a.IPs) != 2 {
		t.Fatalf("requested v4 not honoured or v6 missing: %v", a.IPs)
	}
	cases := []struct {
		name, ip string
		code     api.ErrorCode
		contains string
	}{
		{"held by another", "10.1.0.50", api.CodeConflict, "already held by c1/eth0"},
		{"gateway", "10.1.0.1", api.CodeInvalid, "ips[0]"},
		{"network address", "10.1.0.0", api.CodeInvalid, "ips[0]"},
		{"outside every pool", "192.168.9.9", api.CodeInvalid, "not in any configured pool"},
		{"garbage", "10.1.0.999", api.CodeInvalid, "ips[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.m.Allocate(ctx, add("c-"+c.name, withIPs(c.ip)))
			wantCode(t, err, c.code, c.contains)
		})
	}
	_, err = r.m.Allocate(ctx, add("c3", withIPs("10.1.0.60", "10.1.0.61")))
	wantCode(t, err, api.CodeInvalid, "ips[1]")
	_, err = r.m.Allocate(ctx, add("c4", withIPs("10.1.0.60", "10.1.0.60")))
	wantCode(t, err, api.CodeInvalid, "requested twice")
	// A refused request leaves nothing behind.
	for _, ip := range []string{"10.1.0.60", "10.1.0.61"} {
		if _, err := r.m.Allocate(ctx, add("probe-"+ip, withIPs(ip))); err != nil {
			t.Errorf("%s leaked by a refused request: %v", ip, err)
		}
	}
}

func TestNamedPoolsAndNoPool(t *testing.T) {
	pools := append(dualStack("10.1.0.0/24", "fd00:1::/120"),
		PoolSpec{Allocator: allocator.Config{Name: "blue", CIDRs: []netip.Prefix{pfx("10.2.0.0/24")}}})
	r := newRig(t, pools)
	ctx := context.Background()
	a, err := r.m.Allocate(ctx, add("c1", withPools("blue")))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.IPs) != 1 || a.IPs[0].Pool != "blue" {
		t.Fatalf("got %+v", a.IPs)
	}
	_, err = r.m.Allocate(ctx, add("c2", withPools("nope")))
	wantCode(t, err, api.CodeNoPool, "nope")
	_, err = r.m.Allocate(ctx, add("c3", withPools("blue"), withIPs("10.1.0.9")))
	wantCode(t, err, api.CodeInvalid, `in pool "v4"`)
}

func TestInvalidRequests(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/24", "fd00:1::/120"))
	ctx := context.Background()
	cases := []struct {
		req   *api.AllocateRequest
		field string
	}{
		{&api.AllocateRequest{Owner: api.Owner{IfName: "eth0"}, Network: "n"}, "owner.containerID"},
		{&api.AllocateRequest{Owner: api.Owner{ContainerID: "c"}, Network: "n"}, "owner.ifName"},
		{&api.AllocateRequest{Owner: api.Owner{ContainerID: "c", IfName: "this-name-is-too-long"}, Network: "n"}, "owner.ifName"},
		{&api.AllocateRequest{Owner: api.Owner{ContainerID: "a/b", IfName: "eth0"}, Network: "n"}, "owner.containerID"},
		{&api.AllocateRequest{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}}, "network"},
	}
	for _, c := range cases {
		_, err := r.m.Allocate(ctx, c.req)
		wantCode(t, err, api.CodeInvalid, c.field)
	}
	_, err := r.m.GC(ctx, &api.GCRequest{Network: "net", Valid: []api.Owner{{ContainerID: "x"}}})
	wantCode(t, err, api.CodeInvalid, "valid[0]")
}

func TestGCIsScopedToNetwork(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/24", "fd00:1::/120"))
	ctx := context.Background()
	for _, id := range []string{"keep", "stale1", "stale2"} {
		if _, err := r.m.Allocate(ctx, add(id)); err != nil {
			t.Fatal(err)
		}
	}
	other := add("other")
	other.Network = "net2"
	if _, err := r.m.Allocate(ctx, other); err != nil {
		t.Fatal(err)
	}
	resp, err := r.m.GC(ctx, &api.GCRequest{Network: "net", Valid: []api.Owner{{ContainerID: "keep", IfName: "eth0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(resp.Released) != "[stale1/eth0 stale2/eth0]" {
		t.Fatalf("released %v", resp.Released)
	}
	all, _ := r.m.Allocations(ctx)
	var owners []string
	for _, a := range all {
		owners = append(owners, a.Owner.ContainerID)
	}
	if fmt.Sprint(owners) != "[keep other]" {
		t.Fatalf("left %v", owners)
	}
}

func TestRestartRestoresAllocations(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/24", "fd00:1::/120"))
	ctx := context.Background()
	before := map[string]string{}
	for i := range 20 {
		a, err := r.m.Allocate(ctx, add(fmt.Sprintf("c%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		before[a.Owner.ContainerID] = fmt.Sprint(a.IPs)
	}
	for i := 0; i < 20; i += 2 {
		if err := r.m.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}}); err != nil {
			t.Fatal(err)
		}
		delete(before, fmt.Sprintf("c%d", i))
	}
	r.restart()
	all, err := r.m.Allocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(before) {
		t.Fatalf("after restart %d owners, want %d", len(all), len(before))
	}
	for _, a := range all {
		if before[a.Owner.ContainerID] != fmt.Sprint(a.IPs) {
			t.Errorf("%s: %v, want %s", a.Owner, a.IPs, before[a.Owner.ContainerID])
		}
	}
	// New allocations after the restart do not collide with restored ones.
	seen := map[string]bool{}
	for _, a := range all {
		for _, ip := range a.IPs {
			seen[ip.Address] = true
		}
	}
	for i := range 50 {
		a, err := r.m.Allocate(ctx, add(fmt.Sprintf("n%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range a.IPs {
			if seen[ip.Address] {
				t.Fatalf("%s handed out twice", ip.Address)
			}
			seen[ip.Address] = true
		}
	}
}

func TestRestartKeepsRecordsOfRemovedPools(t *testing.T) {
	r := newRig(t, append(dualStack("10.1.0.0/24", "fd00:1::/120"),
		PoolSpec{Allocator: allocator.Config{Name: "gone", CIDRs: []netip.Prefix{pfx("10.9.0.0/24")}}}))
	ctx := context.Background()
	if _, err := r.m.Allocate(ctx, add("c1", withPools("gone"))); err != nil {
		t.Fatal(err)
	}
	r.pools = dualStack("10.1.0.0/24", "fd00:1::/120")
	r.restart()
	st, _ := r.m.Status(ctx)
	if !strings.Contains(st.Message, "no longer configured") {
		t.Fatalf("status does not report the orphaned allocation: %q", st.Message)
	}
	if _, err := r.m.Check(ctx, &api.CheckRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}}); err != nil {
		t.Fatalf("record of a removed pool was dropped: %v", err)
	}
}

func TestConcurrentRequestsNeverShareAnAddress(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/22", "fd00:1::/64"))
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := map[string]string{}
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				// Owners overlap between goroutines so that concurrent ADDs of one owner race.
				id := fmt.Sprintf("c%d", (g*60+i)%900)
				a, err := r.m.Allocate(ctx, add(id))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, ip := range a.IPs {
					if prev, ok := held[ip.Address]; ok && prev != id {
						t.Errorf("%s held by %s and %s", ip.Address, prev, id)
					}
					held[ip.Address] = id
				}
				mu.Unlock()
				if i%3 == 0 {
					mu.Lock()
					for _, ip := range a.IPs {
						delete(held, ip.Address)
					}
					mu.Unlock()
					if err := r.m.Release(ctx, &api.ReleaseRequest{Owner: a.Owner}); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
}

func TestStoreFailureReturnsAddresses(t *testing.T) {
	r := newRig(t, dualStack("10.1.0.0/30", "fd00:1::/126"))
	ctx := context.Background()
	r.st.Close()
	_, err := r.m.Allocate(ctx, add("c1"))
	wantCode(t, err, api.CodeUnavailable, "store")
	st, _ := r.m.Pools(ctx)
	for _, p := range st {
		if p.Used != 0 {
			t.Fatalf("pool %s keeps %d addresses of a failed allocation", p.Name, p.Used)
		}
	}
}

// Concurrent ADDs of one owner wait for each other (the first one's slot is released only
// once its record is held) and get the same address; concurrent ADDs of different owners
// for a pool's last free addresses get one each, the rest "exhausted", none an address twice.
func TestConcurrentAddsOfOneOwnerAndOfTheLastAddresses(t *testing.T) {
	r := newRig(t, []PoolSpec{{Allocator: allocator.Config{Name: "v4", CIDRs: []netip.Prefix{pfx("10.1.0.0/29")}}, Default: true}})
	ctx := context.Background()
	race := func(n int, id func(int) string) (ips []string, errs []error) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range n {
			wg.Go(func() {
				a, err := r.m.Allocate(ctx, add(id(i)))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				ips = append(ips, a.IPs[0].Address)
			})
		}
		wg.Wait()
		return ips, errs
	}
	ips, errs := race(16, func(int) string { return "same" })
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, ip := range ips[1:] {
		if ip != ips[0] {
			t.Fatalf("one owner got %s and %s", ips[0], ip)
		}
	}
	mine := ips[0]
	pools, _ := r.m.Pools(ctx)
	free := int(pools[0].Usable - pools[0].Used)
	ips, errs = race(16, func(i int) string { return fmt.Sprintf("c%d", i) })
	if len(ips) != free || len(errs) != 16-free {
		t.Fatalf("%d free addresses: %d ADDs got one (%v), %d failed", free, len(ips), ips, len(errs))
	}
	for _, err := range errs {
		wantCode(t, err, api.CodeExhausted, "exhausted")
	}
	seen := map[string]bool{mine: true}
	for _, ip := range ips {
		if seen[ip] {
			t.Fatalf("%s handed out twice (owner same holds %s): %v", ip, mine, ips)
		}
		seen[ip] = true
	}
	if got := mustCheck(t, r.m, "same"); got != mine {
		t.Fatalf("owner same holds %s, was answered %s", got, mine)
	}
}

func mustCheck(t *testing.T, m *Manager, id string) string {
	t.Helper()
	a, err := m.Check(context.Background(), &api.CheckRequest{Owner: api.Owner{ContainerID: id, IfName: "eth0"}})
	if err != nil {
		t.Fatal(err)
	}
	return a.IPs[0].Address
}
