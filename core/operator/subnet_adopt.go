package operator

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/core/addrset"
	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

// adopt points w at the pool application a already has for w's interface, subnet and family
// when that pool has another name than the operator would give it: a pool `allotctl import`
// carried over from Spiderpool, whose auto pools are named by Spiderpool's rule. Spiderpool
// itself finds an application's auto pool by its owner labels (subnet, application kind,
// namespace and name, interface, IP version), not by name; so does this, through the
// annotations the importer writes. The pool keeps its name, so its AddressClaims (the running
// pods' addresses) stay valid, and its addresses (w.Existing) when no subnet allocation
// records them. The informer cache is enough: the pool is read from the API server again
// before any write.
func (s *subnetCtl) adopt(ctx context.Context, a *app, w *poolWant) error {
	var l allotv1.SharedIPPoolList
	if err := s.c.List(ctx, &l, client.MatchingLabels{allotv1.LabelAutoPool: "true",
		allotv1.LabelSubnet: allotk8s.LabelValue(w.Subnet)}); err != nil {
		return fmt.Errorf("list auto pools of AllotSubnet %s: %w", w.Subnet, err)
	}
	if p := adoptable(l.Items, a.id(), *w); p != nil {
		w.Pool, w.Existing = p.Name, poolFamily(p, w.Family).IPs
	}
	return nil
}

// adoptable is the pool of pools that application appID's want w adopts: none when a pool of
// w's own name exists, else the first by name made for the same application, interface and
// family and not being deleted. Pure.
func adoptable(pools []allotv1.SharedIPPool, appID string, w poolWant) *allotv1.SharedIPPool {
	var found *allotv1.SharedIPPool
	for i := range pools {
		p := &pools[i]
		if p.Name == w.Pool {
			return nil
		}
		iface := p.Annotations[allotv1.AnnotationAutoPoolInterface]
		if iface == "" {
			iface = defaultSubnetInterface // Spiderpool before 0.3.6 did not label the interface
		}
		if p.DeletionTimestamp != nil || p.Annotations[allotv1.AnnotationAutoPoolApp] != appID || iface != w.Interface ||
			poolFamily(p, w.Family) == nil {
			continue
		}
		if found == nil || p.Name < found.Name {
			found = p
		}
	}
	return found
}

func poolFamily(p *allotv1.SharedIPPool, fam policy.Family) *allotv1.SharedPoolFamily {
	if fam == policy.IPv4 {
		return p.Spec.IPv4
	}
	return p.Spec.IPv6
}

// seedAdopted is what an adopted pool that no subnet allocation records starts from: those of
// its addresses (w.Existing) still free in the subnet, so that its pods keep them. It returns
// them and free without them.
func seedAdopted(w poolWant, free addrset.Set) (cur, rest addrset.Set, err error) {
	ex, err := addrset.Parse("spec.ips", w.Family, w.Existing)
	if err != nil {
		return addrset.Set{}, addrset.Set{}, fmt.Errorf("SharedIPPool %s: %w", w.Pool, err)
	}
	cur = ex.Intersect(free)
	return cur, free.Subtract(cur), nil
}
