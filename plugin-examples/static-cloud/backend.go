package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// Static is a cloud backend that hands out addresses from a fixed list. Each node has one
// pseudo interface, "static-<node>", holding the addresses assigned to it.
type Static struct {
	mu sync.Mutex
	// all addresses, sorted; owner maps an assigned address to its node.
	all   []netip.Addr
	owner map[netip.Addr]string
	// perNode caps the addresses of one node per family, 0 = no cap.
	perNode int
	// statePath, if set, is where assignments are saved after every change, so that a
	// restarted plugin does not hand out an address twice.
	statePath string
}

var _ cloud.CloudBackend = (*Static)(nil)

// NewStatic returns a backend over addrs, loading earlier assignments from statePath if it
// exists. Assignments of addresses no longer in the list are dropped.
func NewStatic(addrs []netip.Addr, perNode int, statePath string) (*Static, error) {
	s := &Static{all: addrs, owner: map[netip.Addr]string{}, perNode: perNode, statePath: statePath}
	if statePath == "" {
		return s, nil
	}
	b, err := os.ReadFile(statePath)
	if os.IsNotExist(err) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	var st map[string][]netip.Addr
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state %s: %w", statePath, err)
	}
	for node, as := range st {
		for _, a := range as {
			if _, ok := slices.BinarySearchFunc(addrs, a, netip.Addr.Compare); ok {
				s.owner[a] = node
			}
		}
	}
	return s, nil
}

// save writes the assignments atomically (temp file, fsync, rename).
func (s *Static) save() error {
	if s.statePath == "" {
		return nil
	}
	st := map[string][]netip.Addr{}
	for _, a := range s.all {
		if n, ok := s.owner[a]; ok {
			st[n] = append(st[n], a)
		}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.statePath), ".static-cloud-*")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return os.Rename(tmp.Name(), s.statePath)
}

func ifaceID(node string) string { return "static-" + node }

func subnetID(f cloud.Family) string { return "static-" + string(f) }

func family(a netip.Addr) cloud.Family {
	if a.Is4() {
		return cloud.IPv4
	}
	return cloud.IPv6
}

// Inventory implements cloud.CloudBackend.
func (s *Static) Inventory(_ context.Context, node cloud.NodeRef) (cloud.NodeInventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ifc := cloud.Interface{ID: ifaceID(node.Name), Index: 0, Subnet: subnetID(cloud.IPv4)}
	free := map[cloud.Family]uint64{}
	members := map[cloud.Family][]netip.Addr{}
	for _, a := range s.all {
		f := family(a)
		members[f] = append(members[f], a)
		switch s.owner[a] {
		case "":
			free[f]++
		case node.Name:
			ifc.Addresses = append(ifc.Addresses, a)
		}
	}
	inv := cloud.NodeInventory{
		Interfaces: []cloud.Interface{ifc},
		Limits:     cloud.Limits{MaxInterfaces: 1, AddressesPerInterface: s.perNode, IPv6AddressesPerInterface: s.perNode},
	}
	for _, f := range []cloud.Family{cloud.IPv4, cloud.IPv6} {
		if len(members[f]) > 0 {
			inv.Subnets = append(inv.Subnets, cloud.Subnet{ID: subnetID(f), CIDR: covering(members[f]), Free: free[f]})
		}
	}
	if len(members[cloud.IPv4]) == 0 {
		inv.Interfaces[0].Subnet = subnetID(cloud.IPv6)
	}
	return inv, nil
}

// Allocate implements cloud.CloudBackend: the lowest free addresses of the family.
func (s *Static) Allocate(_ context.Context, req cloud.AllocateRequest) (cloud.AllocateResult, error) {
	if req.Interface != ifaceID(req.Node.Name) {
		return cloud.AllocateResult{}, fmt.Errorf("static-cloud: node %q has only interface %q, not %q: %w",
			req.Node.Name, ifaceID(req.Node.Name), req.Interface, cloud.ErrNodeNotFound)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want := req.Count
	if s.perNode > 0 {
		held := 0
		for a, n := range s.owner {
			if n == req.Node.Name && family(a) == req.Family {
				held++
			}
		}
		if held >= s.perNode {
			return cloud.AllocateResult{}, fmt.Errorf("static-cloud: node %q holds %d %s addresses, the limit: %w", req.Node.Name, held, req.Family, cloud.ErrLimitReached)
		}
		want = min(want, s.perNode-held)
	}
	res := cloud.AllocateResult{Interface: req.Interface}
	for _, a := range s.all {
		if len(res.Addresses) == want {
			break
		}
		if _, taken := s.owner[a]; !taken && family(a) == req.Family {
			res.Addresses = append(res.Addresses, a)
		}
	}
	if len(res.Addresses) == 0 {
		return cloud.AllocateResult{}, fmt.Errorf("static-cloud: no free %s address left: %w", req.Family, cloud.ErrSubnetFull)
	}
	for _, a := range res.Addresses {
		s.owner[a] = req.Node.Name
	}
	if err := s.save(); err != nil {
		for _, a := range res.Addresses {
			delete(s.owner, a)
		}
		return cloud.AllocateResult{}, fmt.Errorf("static-cloud: %w", err)
	}
	return res, nil
}

// CreateInterface implements cloud.CloudBackend: a static list has no interfaces to create.
func (s *Static) CreateInterface(context.Context, cloud.CreateInterfaceRequest) (cloud.Interface, error) {
	return cloud.Interface{}, fmt.Errorf("static-cloud: a static list cannot create interfaces: %w", cloud.ErrUnsupported)
}

// Release implements cloud.CloudBackend. Addresses the node does not hold are ignored.
func (s *Static) Release(_ context.Context, req cloud.ReleaseRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var freed []netip.Addr
	for _, a := range req.Addresses {
		if s.owner[a] == req.Node.Name {
			delete(s.owner, a)
			freed = append(freed, a)
		}
	}
	if len(freed) == 0 {
		return nil
	}
	if err := s.save(); err != nil {
		for _, a := range freed {
			s.owner[a] = req.Node.Name
		}
		return fmt.Errorf("static-cloud: %w", err)
	}
	return nil
}
