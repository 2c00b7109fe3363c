package explain

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Meta is what the service knows of a request beyond its trace.
type Meta struct {
	Owner   api.Owner
	Network string
	Pod     api.PodRef
	Time    time.Time
	DryRun  bool
}

// Explanation turns the trace into words: the policies in order, a verdict for every pool the
// policy saw (the allocator's, else the deciding policy's, else a rejection some policy
// reported), the addresses chosen, and err as the request's error.
func (t *Trace) Explanation(m Meta, err error) api.Explanation {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := api.Explanation{Owner: m.Owner, Network: m.Network, Pod: m.Pod, Time: m.Time, DryRun: m.DryRun, Service: t.service}
	for _, s := range t.steps {
		e.Policies = append(e.Policies, stepOf(s))
	}
	e.Pools = t.poolVerdicts()
	for _, c := range t.chosen {
		a := api.ChosenAddress{Address: c.addr.String(), Pool: c.pool, Family: string(famOf(c.addr)), Block: c.block.String()}
		if !c.block.IsValid() {
			a.Block = ""
		}
		if c.gw.IsValid() {
			a.Gateway = c.gw.String()
		}
		e.Addresses = append(e.Addresses, a)
	}
	if err != nil {
		var ae *api.Error
		if !errors.As(err, &ae) {
			ae = &api.Error{Code: api.CodeInternal, Message: err.Error()}
		}
		e.Error = ae
	}
	return e
}

func famOf(p netip.Prefix) policy.Family {
	if p.Addr().Is4() {
		return policy.IPv4
	}
	return policy.IPv6
}

func stepOf(s step) api.PolicyStep {
	p := api.PolicyStep{Policy: s.Name, Fallback: s.Fallback}
	if s.Err != nil {
		p.Error = s.Err.Error()
		return p
	}
	p.Code, p.Reason, p.Source = s.Decision.Code.String(), s.Decision.Reason, s.Decision.Source
	if s.Decision.Cause != policy.CauseUnspecified {
		p.Cause = s.Decision.Cause.String()
	}
	p.IPv4, p.IPv6 = poolNames(s.Decision.IPv4), poolNames(s.Decision.IPv6)
	return p
}

func poolNames(cs []policy.Candidate) []string {
	if len(cs) == 0 {
		return nil
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Pool
	}
	return out
}

// deciding is the step whose answer stood: the last one that did not fail or skip.
func (t *Trace) deciding() (step, bool) {
	for i := len(t.steps) - 1; i >= 0; i-- {
		if s := t.steps[i]; s.Err == nil && s.Decision.Code != policy.Skip {
			return s, true
		}
	}
	return step{}, false
}

// poolVerdicts gives every pool the policy saw its verdict, taken and candidates first.
func (t *Trace) poolVerdicts() []api.PoolVerdict {
	dec, decided := t.deciding()
	out := make([]api.PoolVerdict, 0, len(t.pools))
	for _, v := range t.pools {
		pv := api.PoolVerdict{Pool: v.Name, Family: string(v.Family), Free: v.Free, Total: v.Total}
		switch {
		case t.allocatorVerdict(&pv):
		case decided && dec.Decision.Names(v.Name, v.Family):
			pv.Verdict, pv.By = api.VerdictCandidate, dec.Name
		case t.rejection(&pv):
		default:
			pv.Verdict = api.VerdictNotChosen
			if decided {
				pv.By = dec.Name
			}
		}
		out = append(out, pv)
	}
	slices.SortStableFunc(out, func(a, b api.PoolVerdict) int { return rank(a.Verdict) - rank(b.Verdict) })
	return out
}

func (t *Trace) allocatorVerdict(pv *api.PoolVerdict) bool {
	for _, c := range t.chosen {
		if c.pool == pv.Pool && string(famOf(c.addr)) == pv.Family {
			pv.Verdict, pv.By = api.VerdictTaken, "allocator"
			return true
		}
	}
	for i := len(t.verdicts) - 1; i >= 0; i-- {
		if v := t.verdicts[i]; v.pool == pv.Pool && string(v.fam) == pv.Family {
			pv.Verdict, pv.By, pv.Reason = v.verdict, "allocator", v.reason
			return true
		}
	}
	return false
}

// rejection finds the latest policy that reported why it left the pool out.
func (t *Trace) rejection(pv *api.PoolVerdict) bool {
	for i := len(t.steps) - 1; i >= 0; i-- {
		s := t.steps[i]
		for _, r := range s.Decision.Rejected {
			if r.Pool == pv.Pool && (r.Family == "" || string(r.Family) == pv.Family) {
				pv.Verdict, pv.By, pv.Reason = api.VerdictRejected, s.Name, r.Reason
				if r.Cause != policy.CauseUnspecified {
					pv.Cause = r.Cause.String()
				}
				return true
			}
		}
	}
	return false
}

var ranks = map[string]int{api.VerdictTaken: 0, api.VerdictCandidate: 1, api.VerdictExhausted: 2,
	api.VerdictDisabled: 3, api.VerdictUnavailable: 4, api.VerdictRejected: 5, api.VerdictNotChosen: 6}

func rank(v string) int {
	if r, ok := ranks[v]; ok {
		return r
	}
	return len(ranks)
}
