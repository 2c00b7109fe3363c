package main

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/pluginrpc"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestParseAddresses(t *testing.T) {
	tests := []struct {
		in   string
		want []netip.Addr
		err  string
	}{
		{"10.0.0.3, 10.0.0.1-10.0.0.2", addrs("10.0.0.1", "10.0.0.2", "10.0.0.3"), ""},
		{"fd00::1-fd00::2 10.0.0.1 10.0.0.1", addrs("10.0.0.1", "fd00::1", "fd00::2"), ""},
		{"::ffff:10.0.0.9", addrs("10.0.0.9"), ""},
		{"", nil, "empty list"},
		{"10.0.0.1,bogus", nil, `addresses[1] "bogus"`},
		{"10.0.0.5-10.0.0.1", nil, "ends before it starts"},
		{"10.0.0.1-fd00::1", nil, "mixes IPv4 and IPv6"},
		{"fe80::1%eth0", nil, "zones"},
		{"fd00::-fd00::ffff:ffff", nil, "more than"},
	}
	for _, tt := range tests {
		got, err := ParseAddresses(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseAddresses(%q) = %v, want error %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseAddresses(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

func node(n string) cloud.NodeRef { return cloud.NodeRef{Name: n} }

func TestStaticBackend(t *testing.T) {
	ctx := context.Background()
	state := filepath.Join(t.TempDir(), "state.json")
	all, _ := ParseAddresses("10.0.0.1-10.0.0.5,fd00::1-fd00::2")
	s, err := NewStatic(all, 3, state)
	if err != nil {
		t.Fatal(err)
	}

	res, err := s.Allocate(ctx, cloud.AllocateRequest{Node: node("a"), Interface: "static-a", Family: cloud.IPv4, Count: 2})
	if err != nil || !reflect.DeepEqual(res.Addresses, addrs("10.0.0.1", "10.0.0.2")) {
		t.Fatalf("Allocate a = %+v, %v", res, err)
	}
	// Per-node cap: a holds 2 of 3, asking for 5 gets 1.
	res, err = s.Allocate(ctx, cloud.AllocateRequest{Node: node("a"), Interface: "static-a", Family: cloud.IPv4, Count: 5})
	if err != nil || !reflect.DeepEqual(res.Addresses, addrs("10.0.0.3")) {
		t.Fatalf("Allocate a capped = %+v, %v", res, err)
	}
	if _, err := s.Allocate(ctx, cloud.AllocateRequest{Node: node("a"), Interface: "static-a", Family: cloud.IPv4, Count: 1}); !errors.Is(err, cloud.ErrLimitReached) {
		t.Fatalf("Allocate over cap = %v, want ErrLimitReached", err)
	}
	res, err = s.Allocate(ctx, cloud.AllocateRequest{Node: node("b"), Interface: "static-b", Family: cloud.IPv4, Count: 3})
	if err != nil || !reflect.DeepEqual(res.Addresses, addrs("10.0.0.4", "10.0.0.5")) {
		t.Fatalf("Allocate b = %+v, %v", res, err)
	}
	if _, err := s.Allocate(ctx, cloud.AllocateRequest{Node: node("c"), Interface: "static-c", Family: cloud.IPv4, Count: 1}); !errors.Is(err, cloud.ErrSubnetFull) {
		t.Fatalf("Allocate from empty list = %v, want ErrSubnetFull", err)
	}
	if _, err := s.Allocate(ctx, cloud.AllocateRequest{Node: node("c"), Interface: "eni-1", Family: cloud.IPv4, Count: 1}); err == nil {
		t.Fatal("Allocate on a foreign interface succeeded")
	}
	if _, err := s.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: node("a")}); !errors.Is(err, cloud.ErrUnsupported) {
		t.Fatalf("CreateInterface = %v", err)
	}

	// Release: only the node's own addresses, idempotent.
	if err := s.Release(ctx, cloud.ReleaseRequest{Node: node("b"), Interface: "static-b", Addresses: addrs("10.0.0.1", "10.0.0.4")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, cloud.ReleaseRequest{Node: node("b"), Interface: "static-b", Addresses: addrs("10.0.0.4")}); err != nil {
		t.Fatal(err)
	}

	inv, err := s.Inventory(ctx, node("a"))
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.NodeInventory{
		Interfaces: []cloud.Interface{{ID: "static-a", Subnet: "static-ipv4", Addresses: addrs("10.0.0.1", "10.0.0.2", "10.0.0.3")}},
		Subnets: []cloud.Subnet{
			{ID: "static-ipv4", CIDR: netip.MustParsePrefix("10.0.0.0/29"), Free: 1},
			{ID: "static-ipv6", CIDR: netip.MustParsePrefix("fd00::/126"), Free: 2},
		},
		Limits: cloud.Limits{MaxInterfaces: 1, AddressesPerInterface: 3, IPv6AddressesPerInterface: 3},
	}
	if !reflect.DeepEqual(inv, want) {
		t.Fatalf("Inventory a =\n%+v\nwant\n%+v", inv, want)
	}

	// A restarted plugin remembers who holds what.
	s2, err := NewStatic(all, 3, state)
	if err != nil {
		t.Fatal(err)
	}
	inv2, _ := s2.Inventory(ctx, node("a"))
	if !reflect.DeepEqual(inv2, inv) {
		t.Fatalf("after reload: %+v", inv2)
	}
	res, err = s2.Allocate(ctx, cloud.AllocateRequest{Node: node("c"), Interface: "static-c", Family: cloud.IPv4, Count: 2})
	if err != nil || !reflect.DeepEqual(res.Addresses, addrs("10.0.0.4")) {
		t.Fatalf("Allocate after reload = %+v, %v (must not reuse held addresses)", res, err)
	}
}

// TestServedAsPlugin runs the binary through go-plugin, as allotd does.
func TestServedAsPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: builds and runs the plugin binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "static-cloud")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-state", filepath.Join(dir, "state.json"))
	cmd.Env = []string{"STATIC_CLOUD_ADDRESSES=192.0.2.10-192.0.2.12"}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginrpc.Handshake,
		Plugins:          pluginrpc.HostPlugins(),
		Cmd:              cmd,
		AutoMTLS:         true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
	})
	defer client.Kill()
	rpcClient, err := client.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rpcClient.Dispense(string(pluginrpc.KindCloudBackend))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if info, err := raw.(pluginrpc.Describer).PluginInfo(ctx); err != nil || info.Kind != pluginrpc.KindCloudBackend || info.ContractVersion != cloud.ContractVersion {
		t.Fatalf("PluginInfo = %+v, %v", info, err)
	}
	b := raw.(cloud.CloudBackend)
	res, err := b.Allocate(ctx, cloud.AllocateRequest{Node: node("n1"), Interface: "static-n1", Family: cloud.IPv4, Count: 2})
	if err != nil || !reflect.DeepEqual(res.Addresses, addrs("192.0.2.10", "192.0.2.11")) {
		t.Fatalf("Allocate = %+v, %v", res, err)
	}
	if _, err := b.Allocate(ctx, cloud.AllocateRequest{Node: node("n1"), Interface: "static-n1", Family: cloud.IPv6, Count: 1}); !errors.Is(err, cloud.ErrSubnetFull) {
		t.Fatalf("Allocate v6 = %v, want ErrSubnetFull across the process boundary", err)
	}
	if _, err := b.CreateInterface(ctx, cloud.CreateInterfaceRequest{Node: node("n1")}); !errors.Is(err, cloud.ErrUnsupported) {
		t.Fatalf("CreateInterface = %v, want ErrUnsupported", err)
	}
	inv, err := b.Inventory(ctx, node("n1"))
	if err != nil || len(inv.Interfaces) != 1 || len(inv.Interfaces[0].Addresses) != 2 || inv.Subnets[0].Free != 1 {
		t.Fatalf("Inventory = %+v, %v", inv, err)
	}
	if err := b.Release(ctx, cloud.ReleaseRequest{Node: node("n1"), Interface: "static-n1", Addresses: res.Addresses}); err != nil {
		t.Fatal(err)
	}
}
