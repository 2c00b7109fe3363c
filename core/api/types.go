// Package api holds the wire types of allotd's local API on a unix socket: a framed binary
// protocol (core/api/frame) spoken by allot-cni and allotctl, and HTTP/JSON beside it for
// curl and scripts. The types carry no behaviour; the server lives in
// core/api/server and the Go client in core/api/client. See API.md in this folder for the
// endpoints.
package api

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// DefaultSocket is where allotd listens unless configured otherwise.
const DefaultSocket = "/run/allot/allotd.sock"

// Owner identifies the holder of an allocation: one interface of one container.
// ADD and DEL are idempotent per owner.
type Owner struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// String is "containerID/ifName", the form used in logs and allotctl.
func (o Owner) String() string { return o.ContainerID + "/" + o.IfName }

// Validate checks the owner as it arrives from a CNI call, naming the field at fault. Container
// IDs are limited to 256 bytes (what the cluster records hold); interface names follow Linux
// (at most 15 bytes, no '/', whitespace or ':').
func (o Owner) Validate() error {
	if o.ContainerID == "" {
		return InvalidField("owner.containerID", "must not be empty")
	}
	if len(o.ContainerID) > 256 || strings.ContainsAny(o.ContainerID, "/\x00\n") {
		return InvalidField("owner.containerID", "%.40q is not a valid container ID", o.ContainerID)
	}
	if o.IfName == "" {
		return InvalidField("owner.ifName", "must not be empty")
	}
	if len(o.IfName) > 15 || strings.ContainsAny(o.IfName, "/: \t\n\x00") || o.IfName == "." || o.IfName == ".." {
		return InvalidField("owner.ifName", "%q is not a valid interface name", o.IfName)
	}
	return nil
}

// PodRef names the Kubernetes pod behind an owner, from CNI_ARGS; all fields may be empty
// outside Kubernetes.
type PodRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// AllocateRequest is a CNI ADD as the daemon sees it.
type AllocateRequest struct {
	Owner Owner `json:"owner"`
	// Network is the CNI network name; GC is scoped to it.
	Network string `json:"network"`
	Pod     PodRef `json:"pod,omitempty"`
	// Pools are pool names from the CNI ipam config, in order; empty lets the policy decide.
	Pools []string `json:"pools,omitempty"`
	// IPs are specific addresses the runtime asks for (CNI "ips" capability or IP= arg), as
	// plain addresses or CIDRs. Each is honoured or the request fails.
	IPs []string `json:"ips,omitempty"`
	// DefaultIPv4Pools / DefaultIPv6Pools are CNI-config defaults passed to the policy.
	DefaultIPv4Pools []string `json:"defaultIPv4Pools,omitempty"`
	DefaultIPv6Pools []string `json:"defaultIPv6Pools,omitempty"`
}

// Validate checks what every service needs of an ADD (owner and network) and returns the
// specific addresses the runtime asked for, parsed: plain or CIDR form, IPv4-mapped IPv6
// unmapped, each at most once. Errors name the field (owner.ifName, network, ips[1]).
func (r *AllocateRequest) Validate() ([]netip.Addr, error) {
	if err := r.Owner.Validate(); err != nil {
		return nil, err
	}
	if r.Network == "" {
		return nil, InvalidField("network", "must not be empty (the CNI network name)")
	}
	var out []netip.Addr
	for i, s := range r.IPs {
		f := fmt.Sprintf("ips[%d]", i)
		s = strings.TrimSpace(s)
		var a netip.Addr
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, InvalidField(f, "%q is not an IP address or CIDR", s)
			}
			a = p.Addr()
		} else {
			var err error
			if a, err = netip.ParseAddr(s); err != nil {
				return nil, InvalidField(f, "%q is not an IP address", s)
			}
		}
		a = a.Unmap()
		if slices.Contains(out, a) {
			return nil, InvalidField(f, "%s is requested twice", a)
		}
		out = append(out, a)
	}
	return out, nil
}

// IPConfig is one address handed to an owner.
type IPConfig struct {
	// Address is the address with the pool's prefix length, e.g. "10.244.0.5/16".
	Address string `json:"address"`
	Gateway string `json:"gateway,omitempty"`
	Pool    string `json:"pool"`
}

// Route is a route the CNI result carries.
type Route struct {
	Dst string `json:"dst"`
	GW  string `json:"gw,omitempty"`
}

// Allocation is what an owner holds.
type Allocation struct {
	Owner   Owner      `json:"owner"`
	Network string     `json:"network"`
	Pod     PodRef     `json:"pod,omitempty"`
	IPs     []IPConfig `json:"ips"`
	Routes  []Route    `json:"routes,omitempty"`
	Created time.Time  `json:"created"`
}

// ReleaseRequest is a CNI DEL.
type ReleaseRequest struct {
	Owner Owner `json:"owner"`
	// Network is the CNI network name; in agent mode it sends requests of shared-pool
	// networks (cluster.sharedPools.networks) to the shared allocator. Empty (older
	// allot-cni): every allocator is asked to release the owner.
	Network string `json:"network,omitempty"`
	// Pod is the pod from CNI_ARGS, if given: shared pools find the pod's records by it.
	Pod PodRef `json:"pod,omitempty"`
}

// CheckRequest is a CNI CHECK: the owner must hold an allocation.
type CheckRequest struct {
	Owner Owner `json:"owner"`
	// Network and Pod: as in ReleaseRequest.
	Network string `json:"network,omitempty"`
	Pod     PodRef `json:"pod,omitempty"`
}

// GCRequest is a CNI GC: every allocation of Network whose owner is not in Valid is freed,
// except those made after the GC began (their owners may be newer than the runtime's list).
type GCRequest struct {
	Network string  `json:"network"`
	Valid   []Owner `json:"valid"`
}

// GCResponse lists what GC freed.
type GCResponse struct {
	Released []Owner `json:"released"`
}

// PoolStatus is one pool's usage.
type PoolStatus struct {
	Name   string   `json:"name"`
	Family string   `json:"family"`
	CIDRs  []string `json:"cidrs"`
	// Usable is how many addresses the pool can ever hand out (saturating at 2^64-1), Used
	// how many are held now.
	Usable      uint64  `json:"usable"`
	Used        uint64  `json:"used"`
	Free        uint64  `json:"free"`
	Utilization float64 `json:"utilization"`
	Default     bool    `json:"default,omitempty"`
}

// Status is the daemon's overall state, for CNI STATUS and allotctl status.
type Status struct {
	// Ready is true when the daemon can serve ADD: a pool has a free address, or (agent mode,
	// dynamic pools) blocks are requested from the operator on demand, so an ADD waits for one.
	Ready   bool         `json:"ready"`
	Message string       `json:"message,omitempty"`
	Version string       `json:"version"`
	Mode    string       `json:"mode"`
	Uptime  string       `json:"uptime"`
	Pools   []PoolStatus `json:"pools"`
	// Allocations is the number of owners holding addresses.
	Allocations int `json:"allocations"`
}

// PluginStatus is one loaded plugin, for allotctl plugins.
type PluginStatus struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Transport string `json:"transport"`
	Version   string `json:"version,omitempty"`
	Contract  string `json:"contract,omitempty"`
	Healthy   bool   `json:"healthy"`
	Restarts  int    `json:"restarts,omitempty"`
	LastError string `json:"lastError,omitempty"`
}

// Service is what the local API serves: core/ipam implements it for the node's pools, and in
// agent mode with shared pools core/daemon puts a router in front that sends shared-pool
// networks to core/sharedpool. Errors should be *Error (anything else is answered as
// CodeInternal).
type Service interface {
	Allocate(ctx context.Context, req *AllocateRequest) (*Allocation, error)
	Release(ctx context.Context, req *ReleaseRequest) error
	Check(ctx context.Context, req *CheckRequest) (*Allocation, error)
	GC(ctx context.Context, req *GCRequest) (*GCResponse, error)
	Status(ctx context.Context) (*Status, error)
	Pools(ctx context.Context) ([]PoolStatus, error)
	Allocations(ctx context.Context) ([]Allocation, error)
	Plugins(ctx context.Context) ([]PluginStatus, error)
}
