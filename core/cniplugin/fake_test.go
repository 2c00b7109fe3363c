package cniplugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/server"
)

// fakeService is a tiny in-memory allotd for unit tests: pool "v4" is 192.0.2.0/29 with
// gateway .1 (five free addresses), pool "v6" is 2001:db8::/64; both are defaults. Pool
// name "none" makes the policy find nothing.
type fakeService struct {
	mu          sync.Mutex
	allocs      map[api.Owner]*api.Allocation
	held        map[netip.Addr]api.Owner
	v6next      int
	lastAlloc   *api.AllocateRequest
	lastGC      *api.GCRequest
	unavailable bool
	notReady    bool
	delay       time.Duration
}

var (
	fakeV4 = netip.MustParsePrefix("192.0.2.0/29")
	fakeV6 = netip.MustParsePrefix("2001:db8::/64")
)

func newFakeService() *fakeService {
	return &fakeService{allocs: map[api.Owner]*api.Allocation{}, held: map[netip.Addr]api.Owner{}}
}

func (f *fakeService) wait(ctx context.Context) error {
	if f.delay == 0 {
		return nil
	}
	select {
	case <-time.After(f.delay):
		return nil
	case <-ctx.Done():
		return api.Errorf(api.CodeUnavailable, "request cancelled")
	}
}

func (f *fakeService) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := *req
	f.lastAlloc = &r
	if f.unavailable {
		return nil, api.Errorf(api.CodeUnavailable, "store is closing")
	}
	if a, ok := f.allocs[req.Owner]; ok {
		return a, nil
	}
	pools := req.Pools
	if len(pools) == 0 {
		pools = []string{"v4", "v6"}
	}
	for i, p := range pools {
		switch p {
		case "v4", "v6":
		case "none":
			return nil, api.Errorf(api.CodeNoPool, "pool policy found no pool for pod %s/%s", req.Pod.Namespace, req.Pod.Name)
		default:
			return nil, &api.Error{Code: api.CodeNotFound, Field: fmt.Sprintf("pools[%d]", i), Message: fmt.Sprintf("pool %q does not exist", p)}
		}
	}
	var got []netip.Addr
	requested := map[string]netip.Addr{}
	for i, s := range req.IPs {
		a, ok := parseIPOrCIDR(s)
		if !ok || (!fakeV4.Contains(a) && !fakeV6.Contains(a)) {
			return nil, api.InvalidField(fmt.Sprintf("ips[%d]", i), "%q is in no pool", s)
		}
		if o, taken := f.held[a]; taken {
			return nil, &api.Error{Code: api.CodeConflict, Field: fmt.Sprintf("ips[%d]", i), Message: fmt.Sprintf("%s is held by %s", a, o)}
		}
		fam := "v4"
		if a.Is6() {
			fam = "v6"
		}
		requested[fam] = a
	}
	for _, p := range pools {
		if a, ok := requested[p]; ok {
			got = append(got, a)
			continue
		}
		if p == "v4" {
			a, ok := f.freeV4()
			if !ok {
				return nil, api.Errorf(api.CodeExhausted, "pool %q has no free address", "v4")
			}
			got = append(got, a)
		} else {
			f.v6next++
			b := fakeV6.Addr().As16()
			b[15] = byte(f.v6next + 1)
			got = append(got, netip.AddrFrom16(b))
		}
	}
	a := &api.Allocation{Owner: req.Owner, Network: req.Network, Pod: req.Pod, Created: time.Unix(0, 0).UTC()}
	for _, addr := range got {
		f.held[addr] = req.Owner
		if addr.Is4() {
			a.IPs = append(a.IPs, api.IPConfig{Address: netip.PrefixFrom(addr, 29).String(), Gateway: "192.0.2.1", Pool: "v4"})
			a.Routes = append(a.Routes, api.Route{Dst: "0.0.0.0/0"})
		} else {
			a.IPs = append(a.IPs, api.IPConfig{Address: netip.PrefixFrom(addr, 64).String(), Gateway: "2001:db8::1", Pool: "v6"})
			a.Routes = append(a.Routes, api.Route{Dst: "::/0"}, api.Route{Dst: "2001:db8:1::/48", GW: "2001:db8::fe"})
		}
	}
	f.allocs[req.Owner] = a
	return a, nil
}

func (f *fakeService) freeV4() (netip.Addr, bool) {
	for a := netip.MustParseAddr("192.0.2.2"); fakeV4.Contains(a) && a != netip.MustParseAddr("192.0.2.7"); a = a.Next() {
		if _, taken := f.held[a]; !taken {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func (f *fakeService) release(o api.Owner) {
	a, ok := f.allocs[o]
	if !ok {
		return
	}
	for _, ip := range a.IPs {
		delete(f.held, netip.MustParsePrefix(ip.Address).Addr())
	}
	delete(f.allocs, o)
}

func (f *fakeService) Release(ctx context.Context, req *api.ReleaseRequest) error {
	if err := f.wait(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.release(req.Owner)
	return nil
}

func (f *fakeService) Check(ctx context.Context, req *api.CheckRequest) (*api.Allocation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.allocs[req.Owner]
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "%s holds no addresses", req.Owner)
	}
	return a, nil
}

func (f *fakeService) GC(ctx context.Context, req *api.GCRequest) (*api.GCResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := *req
	f.lastGC = &r
	resp := &api.GCResponse{Released: []api.Owner{}}
	for o, a := range f.allocs {
		if a.Network == req.Network && !slices.Contains(req.Valid, o) {
			f.release(o)
			resp.Released = append(resp.Released, o)
		}
	}
	return resp, nil
}

func (f *fakeService) Status(ctx context.Context) (*api.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	used := uint64(0)
	for a := range f.held {
		if a.Is4() {
			used++
		}
	}
	st := &api.Status{Ready: !f.notReady, Version: "test", Mode: "standalone", Allocations: len(f.allocs),
		Pools: []api.PoolStatus{
			{Name: "v4", Family: "ipv4", CIDRs: []string{fakeV4.String()}, Usable: 5, Used: used, Free: 5 - used, Default: true},
			{Name: "v6", Family: "ipv6", CIDRs: []string{fakeV6.String()}, Usable: 1 << 40, Free: 1 << 40, Default: true},
		}}
	if f.notReady {
		st.Message = "store is not open"
	}
	return st, nil
}

func (f *fakeService) Pools(ctx context.Context) ([]api.PoolStatus, error) {
	st, err := f.Status(ctx)
	return st.Pools, err
}

func (f *fakeService) Allocations(ctx context.Context) ([]api.Allocation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Allocation
	for _, a := range f.allocs {
		out = append(out, *a)
	}
	return out, nil
}

func (f *fakeService) Plugins(ctx context.Context) ([]api.PluginStatus, error) { return nil, nil }

// serveFake serves svc with the real API server on a unix socket in a temp dir and returns
// the socket path.
func serveFake(t *testing.T, svc api.Service) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "a.sock")
	l, err := server.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(svc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return sock
}
