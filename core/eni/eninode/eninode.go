// Package eninode carries the ENI engine's state through the per-node AllotNode object, for
// the operator and the agent alike: the node's pool (spec.ipam.pool), its interfaces
// (status.eni), the addresses in use (status.ipam.used) and the release handshake
// (status.ipam.releaseIPs).
//
// Every write is read-modify-write on the live object with its resourceVersion and is
// retried on Conflict, so the operator and the agent never overwrite each other's fields;
// handshake transitions are compare-and-set per entry on top of that (a transition applies
// only if the entry is still in its From state in the object being written).
package eninode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/core/eni"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/cloud"
)

// Pool parses spec.ipam.pool into address -> interface ID. Entries that do not parse are
// returned apart (the caller reports them; they are never used).
func Pool(n *allotv1.AllotNode) (map[netip.Addr]string, []string) {
	out := make(map[netip.Addr]string, len(n.Spec.IPAM.Pool))
	var bad []string
	for k, v := range n.Spec.IPAM.Pool {
		a, err := netip.ParseAddr(k)
		if err != nil || a.Zone() != "" || a.Is4In6() {
			bad = append(bad, k)
			continue
		}
		out[a] = v.Resource
	}
	sort.Strings(bad)
	return out, bad
}

// States parses status.ipam.releaseIPs. Unparsable keys are skipped.
func States(n *allotv1.AllotNode) map[netip.Addr]eni.ReleaseState {
	out := make(map[netip.Addr]eni.ReleaseState, len(n.Status.IPAM.ReleaseIPs))
	for k, v := range n.Status.IPAM.ReleaseIPs {
		if a, err := netip.ParseAddr(k); err == nil {
			out[a] = eni.ReleaseState(v)
		}
	}
	return out
}

// Used parses status.ipam.used. Unparsable keys are skipped.
func Used(n *allotv1.AllotNode) []netip.Addr {
	out := make([]netip.Addr, 0, len(n.Status.IPAM.Used))
	for k := range n.Status.IPAM.Used {
		if a, err := netip.ParseAddr(k); err == nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// ApplyTransitions applies ts to the releaseIPs map m in place, compare-and-set per entry,
// and returns the transitions whose entry had moved.
func ApplyTransitions(m map[string]allotv1.ReleaseState, ts []eni.Transition) (out map[string]allotv1.ReleaseState, rejected []eni.Transition) {
	if m == nil {
		m = map[string]allotv1.ReleaseState{}
	}
	for _, t := range ts {
		k := t.Addr.String()
		if eni.ReleaseState(m[k]) != t.From {
			rejected = append(rejected, t)
			continue
		}
		if t.To == eni.StateNone {
			delete(m, k)
		} else {
			m[k] = allotv1.ReleaseState(t.To)
		}
	}
	if len(m) == 0 {
		m = nil
	}
	return m, rejected
}

// ErrNoNode is returned when the node's AllotNode does not exist.
var ErrNoNode = errors.New("eninode: AllotNode not found")

// Clients are what a read-modify-write needs: Live reads the object from the API server
// itself (not a cache, whose resourceVersion may lag and make every write conflict), Writer
// writes it. Cached, if set, serves reads that may be a little stale (Handshake.States).
type Clients struct {
	Live   client.Reader
	Writer client.Client
	Cached client.Reader
}

// conflictBackoff retries a write whose object moved meanwhile: the operator and the agent
// write the same object, so a few conflicts in a row are normal under load.
var conflictBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: time.Second}

// UpdateStatus reads the live AllotNode name, lets mutate change its status and writes it
// back with the object's resourceVersion, retrying on Conflict. mutate reports whether it
// changed anything (nothing is written otherwise); it may run several times.
func UpdateStatus(ctx context.Context, c Clients, name string, mutate func(*allotv1.AllotNode) bool) error {
	return update(ctx, c, name, mutate, true)
}

// UpdateSpec is UpdateStatus for the spec.
func UpdateSpec(ctx context.Context, c Clients, name string, mutate func(*allotv1.AllotNode) bool) error {
	return update(ctx, c, name, mutate, false)
}

func update(ctx context.Context, c Clients, name string, mutate func(*allotv1.AllotNode) bool, status bool) error {
	first := true
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		// The first attempt starts from the cache when there is one (most writes then cost
		// one request); a conflict means it was stale, and the retries read the live object.
		r := c.Live
		if first && c.Cached != nil {
			r = c.Cached
		}
		first = false
		var n allotv1.AllotNode
		err := r.Get(ctx, types.NamespacedName{Name: name}, &n)
		if apierrors.IsNotFound(err) && r != c.Live {
			err = c.Live.Get(ctx, types.NamespacedName{Name: name}, &n) // not cached yet?
		}
		if err != nil {
			return err
		}
		if !mutate(&n) {
			return nil
		}
		if status {
			return c.Writer.Status().Update(ctx, &n)
		}
		return c.Writer.Update(ctx, &n)
	})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s", ErrNoNode, name)
	}
	return err
}

// Handshake is the eni.Handshake carried by status.ipam.releaseIPs. States reads through
// Cached when set, else Live (a cache is fine: every Apply is compare-and-set on the live
// object). Wrap it with eni.Checked to hold one side to its transitions.
type Handshake struct{ Clients }

var _ eni.Handshake = Handshake{}

// States implements eni.Handshake. A node without an object has no entries.
func (h Handshake) States(ctx context.Context, node string) (map[netip.Addr]eni.ReleaseState, error) {
	r := h.Cached
	if r == nil {
		r = h.Live
	}
	var n allotv1.AllotNode
	if err := r.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
		if apierrors.IsNotFound(err) {
			return map[netip.Addr]eni.ReleaseState{}, nil
		}
		return nil, fmt.Errorf("eninode: read AllotNode %s: %w", node, err)
	}
	return States(&n), nil
}

// Apply implements eni.Handshake.
func (h Handshake) Apply(ctx context.Context, node string, ts []eni.Transition) ([]eni.Transition, error) {
	var rejected []eni.Transition
	err := UpdateStatus(ctx, h.Clients, node, func(n *allotv1.AllotNode) bool {
		before := len(n.Status.IPAM.ReleaseIPs)
		var m map[string]allotv1.ReleaseState
		m, rejected = ApplyTransitions(cloneStates(n.Status.IPAM.ReleaseIPs), ts)
		changed := len(rejected) < len(ts) || before != len(m)
		n.Status.IPAM.ReleaseIPs = m
		return changed
	})
	if errors.Is(err, ErrNoNode) {
		return ts, nil // nothing to move: the node is gone
	}
	if err != nil {
		return nil, fmt.Errorf("eninode: handshake on AllotNode %s: %w", node, err)
	}
	return rejected, nil
}

func cloneStates(m map[string]allotv1.ReleaseState) map[string]allotv1.ReleaseState {
	out := make(map[string]allotv1.ReleaseState, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// PoolOf is spec.ipam.pool for the eligible interfaces of pool (what eni.Publisher gets).
func PoolOf(pool cloud.NodeInventory) map[string]allotv1.PoolAddress {
	out := map[string]allotv1.PoolAddress{}
	for _, ifc := range pool.Interfaces {
		// The addresses of IPv4 prefixes are listed one by one, as Cilium does: the agent
		// hands them out like secondary addresses.
		for _, a := range eni.PoolAddrs(ifc) {
			out[a.String()] = allotv1.PoolAddress{Resource: ifc.ID}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ENIStatusOf is status.eni for the eligible interfaces of pool.
func ENIStatusOf(pool cloud.NodeInventory) *allotv1.ENIStatus {
	cidr := map[string]string{}
	for _, s := range pool.Subnets {
		if s.CIDR.IsValid() {
			cidr[s.ID] = s.CIDR.String()
		}
	}
	st := &allotv1.ENIStatus{}
	for _, ifc := range pool.Interfaces {
		e := allotv1.ENIInterface{ID: ifc.ID, Index: int32(ifc.Index), MAC: ifc.MAC, Subnet: ifc.Subnet, SubnetCIDR: cidr[ifc.Subnet]}
		for _, a := range ifc.Addresses {
			e.Addresses = append(e.Addresses, a.String())
		}
		for _, p := range ifc.Prefixes {
			e.Prefixes = append(e.Prefixes, p.String())
		}
		e.SecurityGroups = slices.Clone(ifc.SecurityGroups)
		sort.Strings(e.SecurityGroups)
		st.Interfaces = append(st.Interfaces, e)
		st.Available += int32(len(eni.PoolAddrs(ifc)))
	}
	sort.SliceStable(st.Interfaces, func(i, j int) bool { return st.Interfaces[i].Index < st.Interfaces[j].Index })
	st.InterfaceCount = int32(len(st.Interfaces))
	return st
}

// Publisher is the eni.Publisher writing spec.ipam.pool and status.eni. A node without an
// object is skipped (the agent creates it; the next change or resync publishes again).
type Publisher struct{ Clients }

var _ eni.Publisher = Publisher{}

// Publish implements eni.Publisher.
func (p Publisher) Publish(ctx context.Context, node string, pool cloud.NodeInventory) error {
	// status.eni first: an agent that sees an address in the pool then already knows its
	// interface's subnet (how to present it to pods).
	st := ENIStatusOf(pool)
	err := UpdateStatus(ctx, p.Clients, node, func(n *allotv1.AllotNode) bool {
		if equality.Semantic.DeepEqual(n.Status.ENI, st) {
			return false
		}
		n.Status.ENI = st
		return true
	})
	if err != nil && !errors.Is(err, ErrNoNode) {
		return fmt.Errorf("eninode: publish interfaces of %s: %w", node, err)
	}
	want := PoolOf(pool)
	err = UpdateSpec(ctx, p.Clients, node, func(n *allotv1.AllotNode) bool {
		if equality.Semantic.DeepEqual(n.Spec.IPAM.Pool, want) {
			return false
		}
		n.Spec.IPAM.Pool = want
		return true
	})
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("eninode: publish pool of %s: %w", node, err)
	}
	return nil
}

// Params returns the node's watermarks: def with the overrides of spec.eni applied, or nil
// when the node overrides none.
func Params(spec *allotv1.NodeENISpec, def eni.Params) *eni.Params {
	if spec == nil || (spec.PreAllocate == nil && spec.MinAllocate == nil && spec.MaxAllocate == nil && spec.MaxAboveWatermark == nil) {
		return nil
	}
	p := def
	set := func(dst *int, v *int32) {
		if v != nil {
			*dst = int(*v)
		}
	}
	set(&p.PreAllocate, spec.PreAllocate)
	set(&p.MinAllocate, spec.MinAllocate)
	set(&p.MaxAllocate, spec.MaxAllocate)
	set(&p.MaxAboveWatermark, spec.MaxAboveWatermark)
	return &p
}

// ProviderID returns the node's provider ID: the Node's spec.providerID when set, else one
// built from spec.eni's instance ID and zone in AWS's form (aws:///<zone>/<instance-id>).
func ProviderID(nodeProviderID string, spec *allotv1.NodeENISpec) string {
	if nodeProviderID != "" {
		return nodeProviderID
	}
	if spec != nil && spec.InstanceID != "" {
		return "aws:///" + spec.Zone + "/" + spec.InstanceID
	}
	return ""
}

// Owner formats a pod reference for status.ipam.used.
func Owner(namespace, name, fallback string) string {
	if name == "" {
		return fallback
	}
	return strings.TrimPrefix(namespace+"/"+name, "/")
}
