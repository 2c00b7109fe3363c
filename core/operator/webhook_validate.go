package operator

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/core/addrset"
	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/sharedpool"
	"github.com/allot-ipam/allot/sdk/policy"
)

// validatePool judges a SharedIPPool create or update (old is nil on create) against the
// other pools and the claims held out of it, read from r (the API server itself). It returns
// the reasons to refuse, each naming the field; none means allowed.
func validatePool(ctx context.Context, r client.Reader, obj, old *allotv1.SharedIPPool) ([]string, error) {
	res, err := sharedpool.Resolve(obj, sharedpool.Reserved{})
	if err != nil {
		// Resolve names the field (spec.ipv4.ips[3]: ...); strip its pool prefix.
		return []string{strings.TrimPrefix(err.Error(), fmt.Sprintf("SharedIPPool %q: ", obj.Name))}, nil
	}
	var pools allotv1.SharedIPPoolList
	if err := r.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("list SharedIPPools: %w", err)
	}
	var claims allotv1.AddressClaimList
	if err := r.List(ctx, &claims, client.MatchingLabels{allotv1.LabelClaimPool: allotk8s.LabelValue(obj.Name)}); err != nil {
		return nil, fmt.Errorf("list AddressClaims: %w", err)
	}
	var own []allotv1.AddressClaim
	for _, c := range claims.Items {
		if c.Spec.Pool == obj.Name {
			own = append(own, c)
		}
	}
	return poolProblems(obj, res, pools.Items, own), nil
}

// poolProblems is validatePool without the reads.
func poolProblems(obj *allotv1.SharedIPPool, res *sharedpool.Resolved, pools []allotv1.SharedIPPool, claims []allotv1.AddressClaim) []string {
	out := poolOverlaps(obj, res, pools)
	return append(out, heldAddressProblems(obj, res, claims)...)
}

// poolOverlaps are the pool's conflicts with the other pools.
func poolOverlaps(obj *allotv1.SharedIPPool, res *sharedpool.Resolved, pools []allotv1.SharedIPPool) []string {
	var out []string
	others := slices.Clone(pools)
	slices.SortFunc(others, func(a, b allotv1.SharedIPPool) int { return strings.Compare(a.Name, b.Name) })
	for i := range others {
		o := &others[i]
		if o.Name == obj.Name {
			continue
		}
		ro, err := sharedpool.Resolve(o, sharedpool.Reserved{})
		if err != nil {
			continue // a broken pool serves nothing; its own status says why
		}
		for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
			f, g := res.Get(fam), ro.Get(fam)
			if f == nil || g == nil {
				continue
			}
			// The same predicates as sharedpool.Conflicts, so what is let in here is never
			// marked AddressConflict later (barring races between two requests).
			if f.Subnet != g.Subnet && f.Subnet.Overlaps(g.Subnet) {
				out = append(out, fmt.Sprintf("spec.%s.subnet: %s overlaps the subnet %s of SharedIPPool %q; pools in different subnets must not overlap",
					fam, f.Subnet, g.Subnet, o.Name))
			}
			if f.Subnet == g.Subnet && f.Configured.Overlaps(g.Configured) {
				common := f.Configured.Intersect(g.Configured)
				out = append(out, fmt.Sprintf("spec.%s.ips: %d address(es) (%s) are also in SharedIPPool %q of subnet %s; pools in one subnet must not share an address",
					fam, common.Size(), few(common.Strings(), 5), o.Name, f.Subnet))
			}
		}
	}
	return out
}

// heldAddressProblems: addresses pods hold must stay in the pool (a reservation does not
// count: a reserved address in use stays with its pod), and none may become its gateway.
func heldAddressProblems(obj *allotv1.SharedIPPool, res *sharedpool.Resolved, claims []allotv1.AddressClaim) []string {
	var removed, gateway []string
	for _, c := range claims {
		a, err := netip.ParseAddr(c.Spec.IP)
		if err != nil {
			continue
		}
		a = a.Unmap()
		fam := policy.IPv6
		if a.Is4() {
			fam = policy.IPv4
		}
		h := c.Spec.Holder
		who := fmt.Sprintf("%s held by %s/%s", a, h.Namespace, h.Pod)
		f := res.Get(fam)
		switch {
		case f == nil:
			removed = append(removed, who)
		case !f.Configured.Contains(a):
			removed = append(removed, who)
		case f.Gateway == a:
			gateway = append(gateway, fmt.Sprintf("spec.%s.gateway: %s", fam, who))
		}
	}
	var out []string
	if len(removed) > 0 {
		out = append(out, fmt.Sprintf("spec.ips/excludeIPs: cannot remove addresses pods hold: %s (they can be removed once freed; `kubectl get addressclaims -l %s=%s` lists them)",
			few(removed, 10), allotv1.LabelClaimPool, allotk8s.LabelValue(obj.Name)))
	}
	return append(out, gateway...)
}

// validateReservedIP checks a ReservedIP's entries parse.
func validateReservedIP(obj *allotv1.ReservedIP) []string {
	if _, _, err := addrset.ParseMixed("spec.ips", obj.Spec.IPs); err != nil {
		return []string{err.Error()}
	}
	return nil
}

func few(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:n], ", ") + fmt.Sprintf(", and %d more", len(s)-n)
}

// specChanged: metadata-only updates (finalizers, labels) skip the checks, so the operator
// can always remove its finalizer and a pool that conflicts anyway can be edited to fix it.
func specChanged(obj, old *allotv1.SharedIPPool) bool {
	return old == nil || !equality.Semantic.DeepEqual(obj.Spec, old.Spec)
}

// validateSubnet judges an AllotSubnet create or update (old is nil on create) against the
// other subnets, read from r (the API server itself).
func validateSubnet(ctx context.Context, r client.Reader, obj, old *allotv1.AllotSubnet) ([]string, error) {
	var subs allotv1.AllotSubnetList
	if err := r.List(ctx, &subs); err != nil {
		return nil, fmt.Errorf("list AllotSubnets: %w", err)
	}
	return subnetProblems(obj, old, subs.Items), nil
}

// subnetProblems is validateSubnet without the reads: every entry parses and lies inside the
// subnet (the field named), the subnet shares no address with another AllotSubnet (pools cut
// from both would overlap), and an update keeps every address given to a pool
// (status.allocations of the stored object).
func subnetProblems(obj, old *allotv1.AllotSubnet, others []allotv1.AllotSubnet) []string {
	var out []string
	mine := map[policy.Family]*sharedpool.ResolvedFamily{}
	for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
		if subnetFamily(obj, fam) == nil {
			continue
		}
		f, err := resolveSubnet(obj, fam, sharedpool.Reserved{})
		if err != nil {
			out = append(out, strings.TrimPrefix(err.Error(), fmt.Sprintf("AllotSubnet %s: ", obj.Name)))
			continue
		}
		mine[fam] = f
	}
	if len(out) > 0 {
		return out
	}
	out = subnetOverlaps(obj, mine, others)
	if old == nil {
		return out
	}
	return append(out, allocationsTakenOut(mine, old)...)
}

// subnetOverlaps are the subnet's (resolved: mine) conflicts with the other subnets.
func subnetOverlaps(obj *allotv1.AllotSubnet, mine map[policy.Family]*sharedpool.ResolvedFamily, others []allotv1.AllotSubnet) []string {
	var out []string
	sorted := slices.Clone(others)
	slices.SortFunc(sorted, func(a, b allotv1.AllotSubnet) int { return strings.Compare(a.Name, b.Name) })
	for i := range sorted {
		o := &sorted[i]
		if o.Name == obj.Name {
			continue
		}
		for fam, f := range mine {
			if subnetFamily(o, fam) == nil {
				continue
			}
			g, err := resolveSubnet(o, fam, sharedpool.Reserved{})
			if err != nil {
				continue
			}
			if f.Subnet != g.Subnet && f.Subnet.Overlaps(g.Subnet) {
				out = append(out, fmt.Sprintf("spec.%s.subnet: %s overlaps the subnet %s of AllotSubnet %q", fam, f.Subnet, g.Subnet, o.Name))
			}
			if f.Subnet == g.Subnet && f.Configured.Overlaps(g.Configured) {
				common := f.Configured.Intersect(g.Configured)
				out = append(out, fmt.Sprintf("spec.%s.ips: %d address(es) (%s) are also in AllotSubnet %q; pools cut from both would overlap",
					fam, common.Size(), few(common.Strings(), 5), o.Name))
			}
		}
	}
	return out
}

// allocationsTakenOut: an update must keep every address the stored subnet gave to a pool.
func allocationsTakenOut(mine map[policy.Family]*sharedpool.ResolvedFamily, old *allotv1.AllotSubnet) []string {
	var taken []string
	for _, al := range old.Status.Allocations {
		fam := policy.Family(al.Family)
		set, err := addrset.Parse("status.allocations.ips", fam, al.IPs)
		if err != nil {
			continue
		}
		var gone addrset.Set
		if f := mine[fam]; f == nil {
			gone = set
		} else {
			gone = set.Subtract(f.Usable)
		}
		if !gone.Empty() {
			taken = append(taken, fmt.Sprintf("%s of SharedIPPool %q (%s)", gone.String(), al.Pool, al.Application))
		}
	}
	if len(taken) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("spec.ips/excludeIPs/gateway: cannot take out addresses given to pools: %s (they leave the subnet once their pool shrinks or is reclaimed)",
		few(taken, 10))}
}

// Mode names, as error messages give them.
const (
	modeClusterCIDR = "ClusterCIDRConfig mode"
	modeENI         = "ENI mode"
)

// ippoolMode is the mode IPPools are refused in, "" when they are used (multi-pool on).
func ippoolMode(o *Options) string {
	switch {
	case !o.DisableMultiPool:
		return ""
	case o.ENI != nil:
		return modeENI
	case o.ClusterCIDRConfig:
		return modeClusterCIDR
	}
	return "this mode"
}

// ippoolProblems refuses every IPPool in a mode that never reads one: an IPPool there would
// be accepted and do nothing.
func ippoolProblems(mode string) []string {
	if mode == "" {
		return nil
	}
	return []string{fmt.Sprintf("IPPool has no effect in %s (the operator runs with multi-pool off): node addresses come from %s; remove the IPPool or turn multi-pool on",
		mode, map[string]string{modeENI: "the cloud backend (cluster.eni)", modeClusterCIDR: "ClusterCIDRConfigs"}[mode])}
}
