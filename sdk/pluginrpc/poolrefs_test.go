package pluginrpc

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
)

// recordingPolicy answers with a digest of the pools it was given and keeps the last request.
type recordingPolicy struct {
	mu   sync.Mutex
	last *policy.PodRequest
}

func (r *recordingPolicy) SelectPodPools(_ context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	r.mu.Lock()
	r.last = req
	r.mu.Unlock()
	return policy.PodDecision{Code: policy.Decided, Reason: poolsDigest(req.Pools), IPv4: []policy.Candidate{{Pool: "x"}}}, nil
}

func (r *recordingPolicy) SelectNodeCIDRConfig(context.Context, *policy.NodeRequest) (policy.NodeDecision, error) {
	return policy.NodeDecision{}, nil
}

func poolsDigest(pools []policy.PoolView) string {
	s := ""
	for _, p := range pools {
		s += fmt.Sprintf("%s/%d/%v;", p.Name, p.Free, p.Disabled)
	}
	return s
}

// fastServer serves impl as ServePoolPolicy does and returns the server value, whose pool
// table the tests inspect.
func fastServer(t testing.TB, impl policy.PoolPolicy) (*poolPolicyServer, *grpc.ClientConn) {
	srv := &poolPolicyServer{impl: impl}
	cc := connectOpts(t, []grpc.ServerOption{serverCodec()}, func(s *grpc.Server) { s.RegisterService(&fastPoolPolicyDesc, srv) })
	return srv, cc
}

func (p *pluginPools) len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.views)
}

// TestPoolRefsRoundTrip: after the first call the host sends references for the pools the
// plugin holds, and the policy sees exactly the request the host was given: moved free
// counts, a changed pool, a new one, one gone, another order.
func TestPoolRefsRoundTrip(t *testing.T) {
	pol := &recordingPolicy{}
	srv, cc := fastServer(t, pol)
	c := NewPoolPolicyClient(cc)
	ctx := context.Background()
	full, err := wire.AppendPodRequest(nil, benchRequest(20))
	if err != nil {
		t.Fatal(err)
	}
	steps := []func(*policy.PodRequest){
		func(*policy.PodRequest) {},
		func(r *policy.PodRequest) { r.Pools[3].Free = 7 },
		func(r *policy.PodRequest) { r.Pools[4].Free = 0 },
		func(r *policy.PodRequest) { r.Pools[5].Disabled = true },
		func(r *policy.PodRequest) {
			r.Pools = append(r.Pools, policy.PoolView{Name: "new", Family: policy.IPv6, Free: 1})
		},
		func(r *policy.PodRequest) { r.Pools = r.Pools[2:] },
		func(r *policy.PodRequest) { r.Pools[0], r.Pools[9] = r.Pools[9], r.Pools[0] },
		func(r *policy.PodRequest) { r.Pools = nil },
	}
	for i, step := range steps {
		req := benchRequest(20)
		step(req)
		d, err := c.SelectPodPools(ctx, req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if want := poolsDigest(req.Pools); d.Reason != want {
			t.Errorf("step %d: policy saw pools %s, want %s", i, d.Reason, want)
		}
		if !reflect.DeepEqual(pol.last, req) {
			t.Errorf("step %d: policy saw a different request:\n%+v\nwant\n%+v", i, pol.last, req)
		}
		if i == 1 && c.lastReqSize.Load() >= int64(len(full))/4 {
			t.Errorf("second request is %d bytes (the whole request is %d): no references sent", c.lastReqSize.Load(), len(full))
		}
	}
	if n := srv.pools.len(); n < 20 {
		t.Errorf("plugin holds %d pools, want every one it was sent", n)
	}
}

// TestPoolRefsOlderPlugin: a plugin that never confirms (served by the generated code, as
// an earlier SDK serves) gets every request in full, and the ids only until its first answer.
func TestPoolRefsOlderPlugin(t *testing.T) {
	pol := &recordingPolicy{}
	c := NewPoolPolicyClient(poolPolicyServers[0].conn(t, pol))
	var req *policy.PodRequest
	for i := range 3 {
		req = benchRequest(20)
		req.Pools[0].Free = uint64(i)
		if _, err := c.SelectPodPools(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(pol.last, req) {
			t.Fatalf("call %d: policy saw a different request", i)
		}
	}
	if c.pools.state != refsOff {
		t.Fatalf("state %d after calls to a plugin that never confirms, want off", c.pools.state)
	}
	full, _ := wire.AppendPodRequest(nil, req)
	if got := c.lastReqSize.Load(); got != int64(len(full)) {
		t.Errorf("request of %d bytes, want the plain %d", got, len(full))
	}
}

// TestPoolRefsPluginForgot: a reference the plugin does not hold (here: its table emptied
// behind the host's back) costs one resend in full, not an error.
func TestPoolRefsPluginForgot(t *testing.T) {
	pol := &recordingPolicy{}
	srv, cc := fastServer(t, pol)
	c := NewPoolPolicyClient(cc)
	for i := range 3 {
		if i == 2 {
			srv.pools.mu.Lock()
			clear(srv.pools.views)
			srv.pools.mu.Unlock()
		}
		req := benchRequest(20)
		if _, err := c.SelectPodPools(context.Background(), req); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !reflect.DeepEqual(pol.last, req) {
			t.Fatalf("call %d: policy saw a different request", i)
		}
	}
	if n := srv.pools.len(); n != 20 {
		t.Errorf("plugin holds %d pools after the resend, want 20", n)
	}
}

// TestPoolRefsConcurrent: concurrent calls with pools coming and going (enough for the
// host to make the plugin forget some) each see their own request. Run with -race.
func TestPoolRefsConcurrent(t *testing.T) {
	srv, cc := fastServer(t, &recordingPolicy{})
	c := NewPoolPolicyClient(cc)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				req := benchRequest(10)
				req.Pools[0].Name = fmt.Sprintf("g%d-%d", g, i%40) // 320 distinct records in all
				req.Pools[1].Free = uint64(i)
				d, err := c.SelectPodPools(context.Background(), req)
				if err == nil && d.Reason != poolsDigest(req.Pools) {
					err = fmt.Errorf("policy saw %s, want %s", d.Reason, poolsDigest(req.Pools))
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d call %d: %w", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := srv.pools.len(); n > hostPoolsKeep+hostPoolsAge+10 {
		t.Errorf("plugin holds %d pools: the host never told it to forget", n)
	}
}

// TestScanRefsRejectsTruncated: a malformed reference run is an invalid request.
func TestScanRefsRejectsTruncated(t *testing.T) {
	b := flushRun(nil, []byte{0x81}) // an id varint cut short
	if _, err := scanRefs(b, nil); err == nil {
		t.Fatal("truncated reference accepted")
	}
	b = flushRun(nil, []byte{1}) // an id without its free count
	if _, err := scanRefs(b, nil); err == nil {
		t.Fatal("reference without free count accepted")
	}
}

// TestPoolRefsCallerMutates: a caller that changes its pool views in place between calls
// (the host keeps copies, not the caller's maps and slices) is seen changing.
func TestPoolRefsCallerMutates(t *testing.T) {
	pol := &recordingPolicy{}
	_, cc := fastServer(t, pol)
	c := NewPoolPolicyClient(cc)
	req := benchRequest(4)
	for i, change := range []func(){
		func() {},
		func() { req.Pools[2].NodeAffinity.MatchLabels["topology.kubernetes.io/zone"] = "z2" },
		func() { req.Pools[1].CIDRs[0] = netip.MustParsePrefix("10.99.0.0/16") },
		func() { req.Pools[0].Free++ },
	} {
		change()
		if _, err := c.SelectPodPools(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(pol.last, req) {
			t.Fatalf("change %d: policy saw\n%+v\nwant\n%+v", i, pol.last.Pools, req.Pools)
		}
	}
}
