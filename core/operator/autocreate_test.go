package operator_test

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
)

// TestAutoCreatePools: Cilium's autoCreateCiliumPodIPPools. Pools of the configuration are
// created when the operator starts leading if absent; a pool that exists (made by a user, or
// created earlier and edited since) is never overwritten, by this term or the next.
func TestAutoCreatePools(t *testing.T) {
	h := newHarness(t)
	userMade := &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "edited"},
		Spec: allotv1.IPPoolSpec{IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.50.0.0/16"}, MaskSize: 26}}}
	h.create(userMade)
	auto := []allotv1.IPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "auto"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.40.0.0/16"}, MaskSize: 24},
			IPv6: &allotv1.PoolFamily{CIDRs: []string{"fd00:40::/104"}, MaskSize: 120}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "edited"}, Spec: allotv1.IPPoolSpec{
			IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.99.0.0/16"}, MaskSize: 24}}},
	}
	withAuto := func(o *operator.Options) { o.AutoCreatePools = auto }
	get := func(name string) *allotv1.IPPool {
		t.Helper()
		var p allotv1.IPPool
		if err := h.c.Get(h.ctx, client.ObjectKey{Name: name}, &p); err != nil {
			t.Fatalf("IPPool %s: %v", name, err)
		}
		return &p
	}

	r := h.run("op-1", withAuto)
	r.waitLeader(t, waitFor)
	// OnLeader runs after the pools were created.
	p := get("auto")
	if p.Spec.IPv4 == nil || !slices.Equal(p.Spec.IPv4.CIDRs, []string{"10.40.0.0/16"}) || p.Spec.IPv4.MaskSize != 24 ||
		p.Spec.IPv6 == nil || !slices.Equal(p.Spec.IPv6.CIDRs, []string{"fd00:40::/104"}) || p.Spec.IPv6.MaskSize != 120 {
		t.Fatalf("auto-created IPPool spec %+v %+v", p.Spec.IPv4, p.Spec.IPv6)
	}
	if e := get("edited"); !slices.Equal(e.Spec.IPv4.CIDRs, []string{"10.50.0.0/16"}) || e.Spec.IPv4.MaskSize != 26 || e.Generation != 1 {
		t.Errorf("the user's IPPool was changed: %+v (generation %d)", e.Spec.IPv4, e.Generation)
	}

	// A user edits the auto-created pool; the next operator start leaves the edit alone. The
	// operator writes the pool's status meanwhile, so the edit retries on a conflict as kubectl
	// edit would.
	if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		p := get("auto")
		p.Spec.IPv4.CIDRs = append(p.Spec.IPv4.CIDRs, "10.41.0.0/16")
		return h.c.Update(h.ctx, p)
	}); err != nil {
		t.Fatal(err)
	}
	gen := get("auto").Generation
	r.stop(t)
	r2 := h.run("op-2", withAuto)
	r2.waitLeader(t, waitFor)
	if p := get("auto"); !slices.Equal(p.Spec.IPv4.CIDRs, []string{"10.40.0.0/16", "10.41.0.0/16"}) || p.Generation != gen {
		t.Errorf("after a restart the edited IPPool is %+v (generation %d, was %d); want the user's edit kept", p.Spec.IPv4, p.Generation, gen)
	}
}
