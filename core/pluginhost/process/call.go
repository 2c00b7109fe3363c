package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/allot-ipam/allot/sdk/pluginrpc"
	"github.com/allot-ipam/allot/sdk/policy"
)

// call routes one method call to the current process. It is the only place that knows about
// timeouts, crashes and restarts; the per-kind adapters below are one line per method, so
// adding a method never means adding transport logic.
func call[I, R any](p *Plugin, ctx context.Context, method string, fn func(I, context.Context) (R, error)) (R, error) {
	var zero R
	pr, err := p.current()
	if err != nil {
		return zero, err
	}
	impl, ok := pr.impl.(I)
	if !ok {
		return zero, fmt.Errorf("plugin %q is a %s plugin, %s called: %w", p.cfg.Name, p.cfg.Kind, method, ErrWrongKind)
	}
	start := time.Now()
	var r R
	var timedOut bool
	if slot := pr.calls.begin(); slot >= 0 {
		// The supervisor's watchdog enforces the timeout (watchdog.go).
		r, err = fn(impl, ctx)
		timedOut = pr.calls.end(slot)
	} else {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		r, err = fn(impl, hostTimeout{cctx, ctx})
		timedOut = cctx.Err() != nil
		cancel()
	}
	if err == nil {
		return r, nil
	}
	return zero, p.callError(pr, ctx, start.Add(p.cfg.Timeout), timedOut, method, err)
}

// hostTimeout is the context of a call beyond the watchdog's slots: the host's own timeout
// cancels the call,
// but reporting only the caller's deadline: gRPC sends a context's deadline to the plugin
// (a grpc-timeout header to write and parse and a timer in the plugin, per call: a tenth
// of a bare call's cost), and the plugin needs none for a limit it does not enforce. When
// the host's timeout passes, cancelling the call cancels the plugin's context all the same;
// the caller's deadline still travels as before.
type hostTimeout struct {
	context.Context
	caller context.Context
}

func (c hostTimeout) Deadline() (time.Time, bool) { return c.caller.Deadline() }

// callError classifies a failed call: the caller's own deadline or cancellation, a hung
// plugin (our timeout, due at ours), a lost process, or an error the plugin returned.
func (p *Plugin) callError(pr *proc, ctx context.Context, ours time.Time, timedOut bool, method string, err error) error {
	callerDL, callerHas := ctx.Deadline()
	callerShorter := callerHas && !callerDL.After(ours)
	switch {
	case ctx.Err() != nil || (callerShorter && errors.Is(err, context.DeadlineExceeded)):
		// The caller gave up; the plugin is not to blame.
		return fmt.Errorf("plugin %q: %s: %w", p.cfg.Name, method, err)
	case timedOut || errors.Is(err, context.DeadlineExceeded):
		// The watchdog has killed the process already (the call then failed on the lost
		// connection); fail is a no-op then.
		p.fail(pr, fmt.Errorf("%s did not answer within %s", method, p.cfg.Timeout))
		if !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return fmt.Errorf("plugin %q: %s: no answer within %s, killing and restarting the plugin: %w: %w",
			p.cfg.Name, method, p.cfg.Timeout, ErrTimeout, err)
	case errors.Is(err, pluginrpc.ErrTransport):
		p.fail(pr, fmt.Errorf("%s: connection lost: %w", method, err))
		return fmt.Errorf("plugin %q: %s: lost the plugin process (crashed or killed), restarting it: %w: %w",
			p.cfg.Name, method, ErrCrashed, err)
	}
	return fmt.Errorf("plugin %q: %w", p.cfg.Name, err)
}

// PoolPolicy returns the plugin as a policy.PoolPolicy. Calls fail with ErrWrongKind if the
// plugin is of another kind.
func (p *Plugin) PoolPolicy() policy.PoolPolicy { return poolPolicy{p} }

// CloudBackend returns the plugin as a cloud.CloudBackend.
func (p *Plugin) CloudBackend() cloud.CloudBackend { return cloudBackend{p} }

// Datapath returns the plugin as a datapath.Datapath.
func (p *Plugin) Datapath() datapath.Datapath { return datapathAdapter{p} }

type poolPolicy struct{ p *Plugin }

func (a poolPolicy) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	return call(a.p, ctx, "SelectPodPools", func(c policy.PoolPolicy, ctx context.Context) (policy.PodDecision, error) {
		return c.SelectPodPools(ctx, req)
	})
}

func (a poolPolicy) SelectNodeCIDRConfig(ctx context.Context, req *policy.NodeRequest) (policy.NodeDecision, error) {
	return call(a.p, ctx, "SelectNodeCIDRConfig", func(c policy.PoolPolicy, ctx context.Context) (policy.NodeDecision, error) {
		return c.SelectNodeCIDRConfig(ctx, req)
	})
}

type cloudBackend struct{ p *Plugin }

func (a cloudBackend) Inventory(ctx context.Context, node cloud.NodeRef) (cloud.NodeInventory, error) {
	return call(a.p, ctx, "Inventory", func(c cloud.CloudBackend, ctx context.Context) (cloud.NodeInventory, error) {
		return c.Inventory(ctx, node)
	})
}

func (a cloudBackend) Allocate(ctx context.Context, req cloud.AllocateRequest) (cloud.AllocateResult, error) {
	return call(a.p, ctx, "Allocate", func(c cloud.CloudBackend, ctx context.Context) (cloud.AllocateResult, error) {
		return c.Allocate(ctx, req)
	})
}

func (a cloudBackend) CreateInterface(ctx context.Context, req cloud.CreateInterfaceRequest) (cloud.Interface, error) {
	return call(a.p, ctx, "CreateInterface", func(c cloud.CloudBackend, ctx context.Context) (cloud.Interface, error) {
		return c.CreateInterface(ctx, req)
	})
}

func (a cloudBackend) Release(ctx context.Context, req cloud.ReleaseRequest) error {
	_, err := call(a.p, ctx, "Release", func(c cloud.CloudBackend, ctx context.Context) (struct{}, error) {
		return struct{}{}, c.Release(ctx, req)
	})
	return err
}

type datapathAdapter struct{ p *Plugin }

func (a datapathAdapter) Apply(ctx context.Context, cfg datapath.Config) error {
	_, err := call(a.p, ctx, "Apply", func(c datapath.Datapath, ctx context.Context) (struct{}, error) {
		return struct{}{}, c.Apply(ctx, cfg)
	})
	return err
}

func (a datapathAdapter) Remove(ctx context.Context) error {
	_, err := call(a.p, ctx, "Remove", func(c datapath.Datapath, ctx context.Context) (struct{}, error) {
		return struct{}{}, c.Remove(ctx)
	})
	return err
}

func (a datapathAdapter) Status(ctx context.Context) (datapath.Status, error) {
	return call(a.p, ctx, "Status", func(c datapath.Datapath, ctx context.Context) (datapath.Status, error) {
		return c.Status(ctx)
	})
}

var (
	_ policy.PoolPolicy  = poolPolicy{}
	_ cloud.CloudBackend = cloudBackend{}
	_ datapath.Datapath  = datapathAdapter{}
)
