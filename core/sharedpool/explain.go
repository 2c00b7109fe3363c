package sharedpool

import (
	"context"
	"net/netip"
	"strings"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

// noFreeAddress is the allocator's verdict on a candidate pool it found no address in.
const noFreeAddress = "no free address (every usable one is claimed, being claimed or reserved)"

// traceStart notes, for allotctl explain, who serves the request and the pools it saw.
func traceStart(ctx context.Context, views []policy.PoolView) {
	tr := explain.From(ctx)
	tr.Service("shared pools")
	tr.Pools(views)
}

// traceChosen notes the addresses of the answer, each with its pool's subnet as its block.
func traceChosen(ctx context.Context, al *api.Allocation) {
	tr := explain.From(ctx)
	if tr == nil {
		return
	}
	for _, ip := range al.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			continue
		}
		gw, _ := netip.ParseAddr(ip.Gateway)
		tr.Chose(ip.Pool, p, p.Masked(), gw)
	}
}

var _ explain.DryRunner = (*Allocator)(nil)

// AllocateDryRun decides req as Allocate would and finds the addresses it would claim, but
// creates, writes and keeps nothing (allotctl explain --dry-run). It does not look at what the
// pod holds or would take back (a repeated ADD, a StatefulSet pod coming back): it answers
// what a new pod would get.
func (a *Allocator) AllocateDryRun(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	w, requested, err := a.wantOf(req)
	if err != nil {
		return nil, err
	}
	views, blocked := a.idx.views()
	traceStart(ctx, views)
	preq, err := a.podRequest(ctx, w, views)
	if err != nil {
		return nil, err
	}
	var plan []famPlan
	if len(requested) > 0 {
		plan, err = a.requestedPlan(requested, nil, blocked)
	} else {
		var d policy.PodDecision
		if d, err = a.decide(ctx, w, preq, blocked); err == nil {
			plan = decidedPlan(d, nil)
		}
	}
	if err != nil {
		return nil, err
	}
	return a.peekPlan(ctx, w, plan)
}

// peekPlan finds the address each step of plan would claim, claiming none.
func (a *Allocator) peekPlan(ctx context.Context, w *want, plan []famPlan) (*api.Allocation, error) {
	var claims []*v1alpha1.AddressClaim
	for _, p := range plan {
		if p.addr.IsValid() {
			if held := a.idx.claim(k8s.ClaimName(p.addr)); held != nil {
				return nil, &api.Error{Code: api.CodeConflict, Field: p.field, Message: p.addr.String() + " is already claimed by pod " +
					held.Spec.Holder.Namespace + "/" + held.Spec.Holder.Pod}
			}
			claims = append(claims, a.newClaim(w, p.cands[0].Pool, p.addr))
			continue
		}
		c, err := a.peekFrom(ctx, w, p.fam, p.cands)
		if err != nil {
			return nil, err
		}
		claims = append(claims, c)
	}
	al, _ := a.allocationOf(w, claims)
	traceChosen(ctx, al)
	return al, nil
}

// peekFrom is claimFrom without the claim: the address this node would try first. Its
// pending mark, which keeps concurrent ADDs of this node off an address being claimed, is
// dropped at once.
func (a *Allocator) peekFrom(ctx context.Context, w *want, fam policy.Family, cands []policy.Candidate) (*v1alpha1.AddressClaim, error) {
	var tried []string
	for _, cand := range cands {
		ad, ok := a.idx.pick(cand.Pool, fam, a.start(cand.Pool, fam, false), false)
		if ok {
			a.idx.unpend(ad)
			return a.newClaim(w, cand.Pool, ad), nil
		}
		tried = append(tried, `"`+cand.Pool+`"`)
		explain.From(ctx).Pool(cand.Pool, fam, api.VerdictExhausted, noFreeAddress)
	}
	return nil, api.Errorf(api.CodeExhausted, "no free %s address in shared pool(s) %s", fam.Label(), strings.Join(tried, ", "))
}
