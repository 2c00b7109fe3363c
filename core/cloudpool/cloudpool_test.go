package cloudpool

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/sdk/cloud"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fake is an in-memory backend for unit tests; test/e2e uses the real example plugin.
type fake struct {
	inv      cloud.NodeInventory
	next     netip.Addr
	limit    error
	answer   func(cloud.AllocateRequest) cloud.AllocateResult
	requests []cloud.AllocateRequest
}

func (f *fake) Inventory(context.Context, cloud.NodeRef) (cloud.NodeInventory, error) {
	return f.inv, nil
}
func (f *fake) Allocate(_ context.Context, r cloud.AllocateRequest) (cloud.AllocateResult, error) {
	f.requests = append(f.requests, r)
	if f.limit != nil {
		return cloud.AllocateResult{}, f.limit
	}
	if f.answer != nil {
		return f.answer(r), nil
	}
	res := cloud.AllocateResult{Interface: r.Interface}
	for range r.Count {
		res.Addresses = append(res.Addresses, f.next)
		f.next = f.next.Next()
	}
	return res, nil
}
func (f *fake) CreateInterface(context.Context, cloud.CreateInterfaceRequest) (cloud.Interface, error) {
	return cloud.Interface{}, cloud.ErrUnsupported
}
func (f *fake) Release(context.Context, cloud.ReleaseRequest) error { return nil }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func inventory(held ...string) cloud.NodeInventory {
	in := cloud.Interface{ID: "eni-1", Index: 0, Subnet: "subnet-a"}
	for _, h := range held {
		in.Addresses = append(in.Addresses, addr(h))
	}
	return cloud.NodeInventory{
		Interfaces: []cloud.Interface{in},
		Subnets:    []cloud.Subnet{{ID: "subnet-a", CIDR: netip.MustParsePrefix("192.0.2.0/24"), Free: 100}},
	}
}

func TestFillTopsUpAndOnlyHandsOutHeldAddresses(t *testing.T) {
	f := &fake{inv: inventory("192.0.2.10", "192.0.2.11"), next: addr("192.0.2.50")}
	res, err := Fill(context.Background(), f, Request{Name: "cloud", Family: cloud.IPv4, Want: 5, Gateway: addr("192.0.2.1")}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 3 || len(res.Held) != 5 || len(f.requests) != 1 || f.requests[0].Count != 3 || f.requests[0].Interface != "eni-1" {
		t.Fatalf("added %d held %v requests %+v", res.Added, res.Held, f.requests)
	}
	p, err := allocator.New(res.Allocator)
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Usable != 5 {
		t.Fatalf("usable %d, want exactly the 5 held addresses", st.Usable)
	}
	var got []string
	for {
		a, err := p.AllocateNext()
		if err != nil {
			break
		}
		got = append(got, a.String())
	}
	if strings.Join(got, ",") != "192.0.2.10,192.0.2.11,192.0.2.50,192.0.2.51,192.0.2.52" {
		t.Fatalf("handed out %v", got)
	}
	if res.Allocator.CIDRs[0].String() != "192.0.2.0/24" {
		t.Fatalf("pool CIDRs %v: pods should get the subnet's prefix", res.Allocator.CIDRs)
	}
}

func TestFillUsesWhatItHasWhenTheBackendRunsOut(t *testing.T) {
	f := &fake{inv: inventory("192.0.2.10"), limit: cloud.ErrLimitReached}
	res, err := Fill(context.Background(), f, Request{Name: "cloud", Family: cloud.IPv4, Want: 4}, quiet)
	if err != nil || len(res.Held) != 1 {
		t.Fatalf("%v %v", res.Held, err)
	}
	f = &fake{inv: inventory(), limit: cloud.ErrSubnetFull}
	_, err = Fill(context.Background(), f, Request{Name: "cloud", Family: cloud.IPv4, Want: 4}, quiet)
	if err == nil || !strings.Contains(err.Error(), "holds no ipv4 address") {
		t.Fatalf("got %v", err)
	}
}

func TestBadBackendAnswersAreRefused(t *testing.T) {
	cases := []struct {
		name   string
		inv    cloud.NodeInventory
		answer func(cloud.AllocateRequest) cloud.AllocateResult
		want   string
	}{
		{"duplicate in inventory", inventory("192.0.2.10", "192.0.2.10"), nil, "interfaces[0].addresses[1]: 192.0.2.10 is also listed"},
		{"outside subnet", inventory("198.51.100.1"), nil, "interfaces[0].addresses[0]: 198.51.100.1 is outside subnet"},
		{"too many", inventory(), func(r cloud.AllocateRequest) cloud.AllocateResult {
			return cloud.AllocateResult{Addresses: []netip.Addr{addr("192.0.2.5"), addr("192.0.2.6"), addr("192.0.2.7")}}
		}, "addresses: asked for 2, got 3"},
		{"wrong family", inventory(), func(r cloud.AllocateRequest) cloud.AllocateResult {
			return cloud.AllocateResult{Addresses: []netip.Addr{addr("2001:db8::5")}}
		}, "addresses[0]: 2001:db8::5 is not ipv4"},
		{"already held", inventory("192.0.2.10"), func(r cloud.AllocateRequest) cloud.AllocateResult {
			return cloud.AllocateResult{Addresses: []netip.Addr{addr("192.0.2.10")}}
		}, "already held"},
		{"wrong interface", inventory(), func(r cloud.AllocateRequest) cloud.AllocateResult {
			return cloud.AllocateResult{Interface: "eni-9", Addresses: []netip.Addr{addr("192.0.2.5")}}
		}, "interface: asked for eni-1, got eni-9"},
		{"outside subnet on allocate", inventory(), func(r cloud.AllocateRequest) cloud.AllocateResult {
			return cloud.AllocateResult{Addresses: []netip.Addr{addr("203.0.113.5")}}
		}, "addresses[0]: 203.0.113.5 is outside subnet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := 2
			if len(c.inv.Interfaces[0].Addresses) > 0 {
				want = len(c.inv.Interfaces[0].Addresses) + 1
			}
			f := &fake{inv: c.inv, answer: c.answer, next: addr("192.0.2.100")}
			_, err := Fill(context.Background(), f, Request{Name: "cloud", Family: cloud.IPv4, Want: want}, quiet)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestComplement(t *testing.T) {
	p := netip.MustParsePrefix("10.0.0.0/29")
	got := complement(p, []netip.Addr{addr("10.0.0.0"), addr("10.0.0.3"), addr("10.0.0.7")})
	var s []string
	for _, r := range got {
		s = append(s, r.String())
	}
	if strings.Join(s, " ") != "10.0.0.1-10.0.0.2 10.0.0.4-10.0.0.6" {
		t.Fatalf("got %v", s)
	}
	if l := lastAddr(netip.MustParsePrefix("2001:db8::/120")); l != addr("2001:db8::ff") {
		t.Fatalf("lastAddr %v", l)
	}
}
