// Package policychain composes pool policies into one: an ordered list of named policies
// where Skip falls through to the next, Decided and NoFit stop, and a policy that fails
// (error, panic, timeout, or output that does not validate) is replaced by an optional
// fallback policy for that request. Whatever transport produced a policy (built-in, process,
// WebAssembly), its output is untrusted and validated here before anyone acts on it.
package policychain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Sentinel errors, for errors.Is.
var (
	// ErrInvalidDecision: a policy answered something that breaks the contract (unknown
	// code, unknown pool, wrong family, duplicates, ...). The error names policy and field.
	ErrInvalidDecision = errors.New("invalid decision")
	// ErrPolicyPanic: a policy panicked; the panic was contained.
	ErrPolicyPanic = errors.New("policy panicked")
	// ErrPolicyTimeout: a policy did not answer within Config.Timeout.
	ErrPolicyTimeout = errors.New("policy timed out")
)

// Link is one named policy of a chain.
type Link struct {
	Name   string
	Policy policy.PoolPolicy
	// Inline marks in-process code that answers in microseconds and never blocks (the
	// built-in policies): it runs on the caller's goroutine with panic containment but
	// without the timer, goroutine and channel that make a call abandonable — those cost
	// more than the decision itself. Plugins are never inline.
	Inline bool
}

// Config configures a Chain.
type Config struct {
	// Policies are consulted in order until one answers Decided or NoFit.
	Policies []Link
	// Fallback, if set, answers in place of a policy that fails; a Skip from the fallback
	// lets the chain continue with the next policy. Without a fallback a failure is the
	// request's error.
	Fallback *Link
	// Timeout bounds each policy call, fallback included (0: no bound beyond ctx). A policy
	// that ignores its context is abandoned when the bound passes: its goroutine finishes in
	// the background and its answer is discarded.
	Timeout time.Duration
	// Logger receives one warning per failed policy call; nil means slog.Default().
	Logger *slog.Logger
	// OnError, if set, is called (synchronously) with every policy failure, e.g. to record
	// the plugin's last error for `allotctl plugins`.
	OnError func(policyName string, err error)
}

// Chain is a policy.PoolPolicy made of other policies. It is safe for concurrent use if its
// policies are.
type Chain struct {
	links    []Link
	fallback *Link
	timeout  time.Duration
	log      *slog.Logger
	onError  func(string, error)
	names    string // "[a b c]", for reasons
	inline   bool   // every link, fallback included, is Inline
}

var _ policy.PoolPolicy = (*Chain)(nil)

// New validates cfg and returns the chain. Errors name the field.
func New(cfg Config) (*Chain, error) {
	if len(cfg.Policies) == 0 {
		return nil, errors.New("policychain: policies: at least one policy is required")
	}
	seen := map[string]bool{}
	names := make([]string, 0, len(cfg.Policies))
	for i, l := range cfg.Policies {
		if l.Name == "" {
			return nil, fmt.Errorf("policychain: policies[%d].name: must not be empty", i)
		}
		if l.Policy == nil {
			return nil, fmt.Errorf("policychain: policies[%d] (%q): policy is nil", i, l.Name)
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("policychain: policies[%d].name: %q appears twice", i, l.Name)
		}
		seen[l.Name] = true
		names = append(names, l.Name)
	}
	if cfg.Fallback != nil {
		if cfg.Fallback.Name == "" {
			return nil, errors.New("policychain: fallback.name: must not be empty")
		}
		if cfg.Fallback.Policy == nil {
			return nil, fmt.Errorf("policychain: fallback (%q): policy is nil", cfg.Fallback.Name)
		}
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("policychain: timeout: %v must not be negative", cfg.Timeout)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Chain{
		links:   append([]Link(nil), cfg.Policies...),
		timeout: cfg.Timeout,
		log:     log,
		onError: cfg.OnError,
		names:   "[" + strings.Join(names, " ") + "]",
	}
	if cfg.Fallback != nil {
		fb := *cfg.Fallback
		c.fallback = &fb
	}
	c.inline = c.fallback == nil || c.fallback.Inline
	for _, l := range c.links {
		c.inline = c.inline && l.Inline
	}
	return c, nil
}

// Inline reports whether every policy of the chain, fallback included, is Inline: a
// decision then never blocks, and a caller need not bound it with a timer of its own.
func (c *Chain) Inline() bool { return c.inline }

// Names returns the chain's policy names, in order.
func (c *Chain) Names() []string {
	out := make([]string, len(c.links))
	for i, l := range c.links {
		out[i] = l.Name
	}
	return out
}

// SelectPodPools implements policy.PoolPolicy.
func (c *Chain) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	var skips []string
	tr := explain.From(ctx) // nil unless allotctl explain will want the steps
	for _, l := range c.links {
		d, err := c.podOnce(ctx, l, req)
		tr.Policy(explain.Step{Name: l.Name, Policy: l.Policy, Request: req, Decision: d, Err: err})
		if err != nil {
			if ctx.Err() != nil {
				// The caller gave up; a fallback would fail the same way.
				return policy.PodDecision{}, fmt.Errorf("policychain: policy %q: %w", l.Name, err)
			}
			c.report(l.Name, err)
			if c.fallback == nil {
				return policy.PodDecision{}, fmt.Errorf("policychain: policy %q: %w", l.Name, err)
			}
			fd, ferr := c.podOnce(ctx, *c.fallback, req)
			tr.Policy(explain.Step{Name: c.fallback.Name, Policy: c.fallback.Policy, Request: req, Decision: fd, Err: ferr, Fallback: true})
			if ferr != nil {
				c.report(c.fallback.Name, ferr)
				return policy.PodDecision{}, fmt.Errorf("policychain: policy %q: %w; fallback %q: %w", l.Name, err, c.fallback.Name, ferr)
			}
			if fd.Code == policy.Skip {
				skips = append(skips, fmt.Sprintf("%s failed and fallback %s skipped", l.Name, c.fallback.Name))
				continue
			}
			fd.Source = label(c.fallback.Name+" (fallback for "+l.Name+")", fd.Source)
			return fd, nil
		}
		if d.Code == policy.Skip {
			if d.Reason != "" {
				skips = append(skips, l.Name+": "+d.Reason)
			}
			continue
		}
		d.Source = label(l.Name, d.Source)
		return d, nil
	}
	reason := "no policy in chain " + c.names + " chose a pool"
	if len(skips) > 0 {
		reason += " (" + strings.Join(skips, "; ") + ")"
	}
	return policy.PodDecision{Code: policy.NoFit, Cause: policy.CauseNoMatch, Reason: reason}, nil
}

// SelectNodeCIDRConfig implements policy.PoolPolicy.
func (c *Chain) SelectNodeCIDRConfig(ctx context.Context, req *policy.NodeRequest) (policy.NodeDecision, error) {
	var skips []string
	for _, l := range c.links {
		d, err := c.nodeOnce(ctx, l, req)
		if err != nil {
			if ctx.Err() != nil {
				return policy.NodeDecision{}, fmt.Errorf("policychain: policy %q: %w", l.Name, err)
			}
			c.report(l.Name, err)
			if c.fallback == nil {
				return policy.NodeDecision{}, fmt.Errorf("policychain: policy %q: %w", l.Name, err)
			}
			fd, ferr := c.nodeOnce(ctx, *c.fallback, req)
			if ferr != nil {
				c.report(c.fallback.Name, ferr)
				return policy.NodeDecision{}, fmt.Errorf("policychain: policy %q: %w; fallback %q: %w", l.Name, err, c.fallback.Name, ferr)
			}
			if fd.Code == policy.Skip {
				skips = append(skips, fmt.Sprintf("%s failed and fallback %s skipped", l.Name, c.fallback.Name))
				continue
			}
			return fd, nil
		}
		if d.Code == policy.Skip {
			if d.Reason != "" {
				skips = append(skips, l.Name+": "+d.Reason)
			}
			continue
		}
		return d, nil
	}
	reason := "no policy in chain " + c.names + " chose a CIDR config"
	if len(skips) > 0 {
		reason += " (" + strings.Join(skips, "; ") + ")"
	}
	return policy.NodeDecision{Code: policy.NoFit, Cause: policy.CauseNoMatch, Reason: reason}, nil
}

func label(name, source string) string {
	if source == "" {
		return name
	}
	return name + ": " + source
}

func (c *Chain) report(name string, err error) {
	c.log.Warn("pool policy failed", "policy", name, "error", err)
	if c.onError != nil {
		c.onError(name, err)
	}
}

// podOnce calls one policy with containment and validates its answer.
func (c *Chain) podOnce(ctx context.Context, l Link, req *policy.PodRequest) (policy.PodDecision, error) {
	d, err := call(ctx, c.linkTimeout(l), func(ctx context.Context) (policy.PodDecision, error) {
		return l.Policy.SelectPodPools(ctx, req)
	})
	if err != nil {
		return d, err
	}
	if err := ValidatePodDecision(&d, req); err != nil {
		return policy.PodDecision{}, err
	}
	return d, nil
}

func (c *Chain) nodeOnce(ctx context.Context, l Link, req *policy.NodeRequest) (policy.NodeDecision, error) {
	d, err := call(ctx, c.linkTimeout(l), func(ctx context.Context) (policy.NodeDecision, error) {
		return l.Policy.SelectNodeCIDRConfig(ctx, req)
	})
	if err != nil {
		return d, err
	}
	if err := ValidateNodeDecision(&d, req); err != nil {
		return policy.NodeDecision{}, err
	}
	return d, nil
}

// linkTimeout is the bound of one call of l: none for inline links (see Link.Inline).
func (c *Chain) linkTimeout(l Link) time.Duration {
	if l.Inline {
		return 0
	}
	return c.timeout
}

// call runs f with panic containment and, with a timeout, abandons it when the bound passes.
// Without a timeout it runs on the caller's goroutine: no goroutine or channel per decision.
func call[T any](ctx context.Context, timeout time.Duration, f func(context.Context) (T, error)) (T, error) {
	if timeout <= 0 {
		return safe(ctx, f)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1) // buffered: an abandoned call must not block forever
	go func() {
		v, err := safe(ctx, f)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, fmt.Errorf("%w after %v", ErrPolicyTimeout, timeout)
		}
		return zero, ctx.Err()
	}
}

func safe[T any](ctx context.Context, f func(context.Context) (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, fmt.Errorf("%w: %v", ErrPolicyPanic, r)
		}
	}()
	return f(ctx)
}
