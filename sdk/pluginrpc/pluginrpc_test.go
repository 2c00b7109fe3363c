package pluginrpc

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/allot-ipam/allot/sdk/policy"
	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	rpc "github.com/allot-ipam/allot/sdk/proto/pluginv1/pluginv1grpc"
)

// connect serves register's services in-process (same server options as Serve) and
// returns a client connection to them.
func connect(t testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	return connectOpts(t, nil, register)
}

// connectOpts is connect with more server options.
func connectOpts(t testing.TB, opts []grpc.ServerOption, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(recoverUnary)}, opts...)...)
	register(s)
	go func() { _ = s.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); s.Stop() })
	return cc
}

type fakePolicy struct {
	pod  func(context.Context, *policy.PodRequest) (policy.PodDecision, error)
	node func(context.Context, *policy.NodeRequest) (policy.NodeDecision, error)
}

func (f fakePolicy) SelectPodPools(ctx context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
	return f.pod(ctx, r)
}

func (f fakePolicy) SelectNodeCIDRConfig(ctx context.Context, r *policy.NodeRequest) (policy.NodeDecision, error) {
	return f.node(ctx, r)
}

// poolPolicyServers are the two ways a plugin serves a pool policy: RegisterPoolPolicy
// (generated code, any server; what older SDKs serve) and the hand-written codec path that
// ServePoolPolicy uses.
var poolPolicyServers = []struct {
	name string
	conn func(testing.TB, policy.PoolPolicy) *grpc.ClientConn
}{
	{"generated", func(t testing.TB, impl policy.PoolPolicy) *grpc.ClientConn {
		return connect(t, func(s *grpc.Server) { RegisterPoolPolicy(s, impl, Info{Name: "fake", Version: "0.1.0"}) })
	}},
	{"fast", func(t testing.TB, impl policy.PoolPolicy) *grpc.ClientConn {
		return connectOpts(t, []grpc.ServerOption{serverCodec()}, func(s *grpc.Server) {
			registerFastPoolPolicy(s, impl, Info{Name: "fake", Version: "0.1.0"})
		})
	}},
}

func TestPoolPolicyRoundTrip(t *testing.T) {
	for _, srv := range poolPolicyServers {
		t.Run(srv.name, func(t *testing.T) { testPoolPolicyRoundTrip(t, srv.conn) })
	}
}

func testPoolPolicyRoundTrip(t *testing.T, conn func(testing.TB, policy.PoolPolicy) *grpc.ClientConn) {
	impl := fakePolicy{
		pod: func(_ context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
			switch r.Pod.Name {
			case "panic":
				panic("boom")
			case "slow":
				time.Sleep(time.Second) // sleep: a plugin slower than the caller's deadline
			case "fail":
				return policy.PodDecision{}, errors.New("no luck")
			}
			return policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: r.Pod.Labels["pool"]}}, Source: "label"}, nil
		},
		node: func(_ context.Context, r *policy.NodeRequest) (policy.NodeDecision, error) {
			return policy.NodeDecision{Code: policy.Decided, Configs: []string{r.Configs[0].Name}}, nil
		},
	}
	cc := conn(t, impl)
	c := NewPoolPolicyClient(cc)
	ctx := context.Background()

	d, err := c.SelectPodPools(ctx, &policy.PodRequest{Pod: policy.Pod{Name: "a", Labels: map[string]string{"pool": "blue"}}})
	if err != nil || d.Code != policy.Decided || d.IPv4[0].Pool != "blue" || d.Source != "label" {
		t.Fatalf("SelectPodPools = %+v, %v", d, err)
	}
	nd, err := c.SelectNodeCIDRConfig(ctx, &policy.NodeRequest{Configs: []policy.CIDRConfigView{{Name: "c1"}}})
	if err != nil || !reflect.DeepEqual(nd.Configs, []string{"c1"}) {
		t.Fatalf("SelectNodeCIDRConfig = %+v, %v", nd, err)
	}
	info, err := c.PluginInfo(ctx)
	want := RemoteInfo{Name: "fake", Version: "0.1.0", Kind: KindPoolPolicy, ContractVersion: policy.ContractVersion}
	if err != nil || info != want {
		t.Fatalf("PluginInfo = %+v, %v, want %+v", info, err, want)
	}

	_, err = c.SelectPodPools(ctx, &policy.PodRequest{Pod: policy.Pod{Name: "panic"}})
	if !errors.Is(err, ErrPluginPanic) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panic: err = %v, want ErrPluginPanic naming the panic", err)
	}
	// The server survived the panic.
	if _, err := c.SelectPodPools(ctx, &policy.PodRequest{Pod: policy.Pod{Name: "a", Labels: map[string]string{"pool": "x"}}}); err != nil {
		t.Fatalf("after panic: %v", err)
	}

	_, err = c.SelectPodPools(ctx, &policy.PodRequest{Pod: policy.Pod{Name: "fail"}})
	if !errors.Is(err, ErrPlugin) || !strings.Contains(err.Error(), "no luck") {
		t.Fatalf("plugin error: %v", err)
	}

	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.SelectPodPools(tctx, &policy.PodRequest{Pod: policy.Pod{Name: "slow"}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("deadline: err = %v after %v", err, time.Since(start))
	}

	// A plugin returning an unusable answer: empty candidate.
	bad := fakePolicy{pod: func(context.Context, *policy.PodRequest) (policy.PodDecision, error) {
		return policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: ""}}}, nil
	}}
	cc2 := connect(t, func(s *grpc.Server) { RegisterPoolPolicy(s, bad, Info{Name: "bad"}) })
	_, err = NewPoolPolicyClient(cc2).SelectPodPools(ctx, &policy.PodRequest{})
	if err == nil || !strings.Contains(err.Error(), "ipv4[0].pool") {
		t.Fatalf("bad output: err = %v, want it to name ipv4[0].pool", err)
	}
}

// rawPolicy answers raw protobuf, to check the host validates enum values.
type rawPolicy struct {
	rpc.UnimplementedPoolPolicyServer
}

func (rawPolicy) SelectPodPools(context.Context, *pb.PodRequest) (*pb.PodDecision, error) {
	return &pb.PodDecision{Code: 99}, nil
}

func TestUnknownEnumRejected(t *testing.T) {
	cc := connect(t, func(s *grpc.Server) { rpc.RegisterPoolPolicyServer(s, rawPolicy{}) })
	_, err := NewPoolPolicyClient(cc).SelectPodPools(context.Background(), &policy.PodRequest{})
	if err == nil || !strings.Contains(err.Error(), "code: unknown decision code value 99") {
		t.Fatalf("err = %v", err)
	}
}

type fakeCloud struct{}

func (fakeCloud) Inventory(_ context.Context, n cloud.NodeRef) (cloud.NodeInventory, error) {
	if n.Name == "gone" {
		return cloud.NodeInventory{}, cloud.ErrNodeNotFound
	}
	return cloud.NodeInventory{
		Interfaces: []cloud.Interface{{ID: "eni-1", Index: 1, Subnet: "s1", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.5")}}},
		Subnets:    []cloud.Subnet{{ID: "s1", CIDR: netip.MustParsePrefix("10.0.0.0/24"), Free: 100}},
		Limits:     cloud.Limits{MaxInterfaces: 3, AddressesPerInterface: 10},
	}, nil
}

func (fakeCloud) Allocate(_ context.Context, r cloud.AllocateRequest) (cloud.AllocateResult, error) {
	if r.Count > 2 {
		// Misbehaving backend: more than asked is caught by the host.
		return cloud.AllocateResult{Interface: r.Interface, Addresses: []netip.Addr{
			netip.MustParseAddr("10.0.0.6"), netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("10.0.0.8"), netip.MustParseAddr("10.0.0.9")}}, nil
	}
	return cloud.AllocateResult{Interface: r.Interface, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.6")}}, nil
}

func (fakeCloud) CreateInterface(context.Context, cloud.CreateInterfaceRequest) (cloud.Interface, error) {
	return cloud.Interface{}, errors.Join(errors.New("static list"), cloud.ErrUnsupported)
}

func (fakeCloud) Release(context.Context, cloud.ReleaseRequest) error {
	return cloud.ErrThrottled
}

func TestCloudBackendRoundTrip(t *testing.T) {
	cc := connect(t, func(s *grpc.Server) { RegisterCloudBackend(s, fakeCloud{}, Info{Name: "fake"}) })
	c := NewCloudBackendClient(cc)
	ctx := context.Background()
	inv, err := c.Inventory(ctx, cloud.NodeRef{Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fakeCloud{}.Inventory(ctx, cloud.NodeRef{Name: "n1"})
	if !reflect.DeepEqual(inv, want) {
		t.Fatalf("Inventory = %+v, want %+v", inv, want)
	}
	if _, err := c.Inventory(ctx, cloud.NodeRef{Name: "gone"}); !errors.Is(err, cloud.ErrNodeNotFound) || !errors.Is(err, ErrPlugin) {
		t.Fatalf("Inventory(gone) = %v, want ErrNodeNotFound", err)
	}
	if _, err := c.Inventory(ctx, cloud.NodeRef{}); err == nil || !strings.Contains(err.Error(), "name: empty node name") {
		t.Fatalf("Inventory(no name) = %v", err)
	}
	res, err := c.Allocate(ctx, cloud.AllocateRequest{Node: cloud.NodeRef{Name: "n1"}, Interface: "eni-1", Family: cloud.IPv4, Count: 1})
	if err != nil || res.Addresses[0] != netip.MustParseAddr("10.0.0.6") {
		t.Fatalf("Allocate = %+v, %v", res, err)
	}
	_, err = c.Allocate(ctx, cloud.AllocateRequest{Node: cloud.NodeRef{Name: "n1"}, Interface: "eni-1", Family: cloud.IPv4, Count: 3})
	if err == nil || !strings.Contains(err.Error(), "4 addresses, request asked for at most 3") {
		t.Fatalf("Allocate(too many) = %v", err)
	}
	_, err = c.Allocate(ctx, cloud.AllocateRequest{Node: cloud.NodeRef{Name: "n1"}, Interface: "eni-1", Family: cloud.IPv6, Count: 1})
	if err == nil || !strings.Contains(err.Error(), "is not ipv6") {
		t.Fatalf("Allocate(wrong family) = %v", err)
	}
	if _, err := c.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: cloud.NodeRef{Name: "n1"}}); !errors.Is(err, cloud.ErrUnsupported) {
		t.Fatalf("CreateInterface = %v, want ErrUnsupported", err)
	}
	if err := c.Release(ctx, cloud.ReleaseRequest{Node: cloud.NodeRef{Name: "n1"}}); !errors.Is(err, cloud.ErrThrottled) {
		t.Fatalf("Release = %v, want ErrThrottled", err)
	}
}

type fakeDatapath struct{ got *datapath.Config }

func (f fakeDatapath) Apply(_ context.Context, c datapath.Config) error { *f.got = c; return nil }
func (fakeDatapath) Remove(context.Context) error                       { return nil }
func (fakeDatapath) Status(context.Context) (datapath.Status, error) {
	return datapath.Status{Name: "fake", Active: true, Interfaces: []string{"eth0"}, Detail: map[string]string{"k": "v"}}, nil
}

func TestDatapathRoundTrip(t *testing.T) {
	var got datapath.Config
	cc := connect(t, func(s *grpc.Server) { RegisterDatapath(s, fakeDatapath{&got}, Info{Name: "fake"}) })
	c := NewDatapathClient(cc)
	cfg := datapath.Config{
		PodCIDRs:           []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00::/64")},
		NonMasqueradeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		NativeRoutingCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		MasqLinkLocal:      true, MasqLinkLocalIPv6: true,
		EgressInterfaces: []string{"eth+"}, PodInterfaces: []string{"veth+"},
		MasqueradeToRouteSource: true, RandomFully: true,
		PortRange:  datapath.PortRange{Min: 40000, Max: 50000},
		Maps:       datapath.MapSizes{ConnTrack: 1024, CIDRs: 64},
		GCInterval: 5 * time.Second,
		Timeouts:   datapath.Timeouts{TCP: time.Hour, TCPClosed: time.Second, UDP: time.Minute, ICMP: 2 * time.Second},
		PinPath:    "/sys/fs/bpf/allot",
	}
	if err := c.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, cfg) {
		t.Fatalf("Apply delivered %+v, want %+v", got, cfg)
	}
	st, err := c.Status(context.Background())
	if err != nil || st.Name != "fake" || !st.Active || st.Detail["k"] != "v" {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if err := c.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestTransportErrorAfterServerStops(t *testing.T) {
	lis := bufconn.Listen(1 << 16)
	s := grpc.NewServer()
	RegisterPoolPolicy(s, fakePolicy{}, Info{Name: "x"})
	go func() { _ = s.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s.Stop()
	lis.Close()
	_, err = NewPoolPolicyClient(cc).SelectPodPools(context.Background(), &policy.PodRequest{})
	if !errors.Is(err, ErrTransport) {
		t.Fatalf("err = %v, want ErrTransport", err)
	}
}
