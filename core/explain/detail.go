package explain

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/allot-ipam/allot/sdk/policy"
)

// detailTimeout bounds asking one policy again for its per-pool reasons (a plugin may be
// slow or gone; the explanation is then shown without them).
const detailTimeout = 2 * time.Second

// maxReason bounds one per-pool reason, as the chain bounds a decision's Reason.
const maxReason = 2048

// fillDetail asks each policy that answered without per-pool reasons again, with
// policy.WithDetail, on the request it decided, and keeps the reasons it then gives. It runs
// when someone asks for the explanation, never on the ADD path: ordinary decisions leave
// the reasons out (a string per pool nobody reads).
func (t *Trace) fillDetail(ctx context.Context) {
	t.mu.Lock()
	var todo []int
	for i, s := range t.steps {
		if !s.detailed && s.Err == nil && s.Policy != nil && s.Request != nil && len(s.Decision.Rejected) == 0 {
			todo = append(todo, i)
		}
	}
	steps := append([]Step(nil), t.steps...)
	t.mu.Unlock()
	for _, i := range todo {
		rej := askDetail(ctx, steps[i])
		t.mu.Lock()
		if i < len(t.steps) {
			t.steps[i].detailed = true
			t.steps[i].Decision.Rejected = rej
		}
		t.mu.Unlock()
	}
}

// askDetail calls the step's policy again for its rejections; a failure or panic gives none.
func askDetail(ctx context.Context, s Step) (rej []policy.Rejection) {
	defer func() {
		if recover() != nil {
			rej = nil
		}
	}()
	ctx, cancel := context.WithTimeout(policy.WithDetail(ctx), detailTimeout)
	defer cancel()
	d, err := s.Policy.SelectPodPools(ctx, s.Request)
	if err != nil {
		return nil
	}
	return cleanRejected(d.Rejected, len(s.Request.Pools))
}

// cleanRejected bounds untrusted per-pool reasons: two per pool at most (one per family),
// valid UTF-8, each cut to maxReason bytes.
func cleanRejected(rs []policy.Rejection, pools int) []policy.Rejection {
	if len(rs) > 2*pools {
		rs = rs[:2*pools]
	}
	out := make([]policy.Rejection, len(rs))
	for i, r := range rs {
		r.Pool, r.Reason = clip(r.Pool), clip(r.Reason)
		if r.Cause < 0 || r.Cause > policy.MaxCause {
			r.Cause = policy.CauseUnspecified
		}
		out[i] = r
	}
	return out
}

func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
