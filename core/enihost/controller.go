package enihost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// StateFunc returns what the host must reflect: the node's ENIs and its pods' addresses, each
// with the device index of the ENI holding it (HostLink is filled by the Controller).
type StateFunc func(ctx context.Context) ([]ENI, []Pod, error)

// Controller keeps the host's ENI tables, pod rules and pod routes in line with the node's
// state: on Trigger (a pod added or deleted, the node's ENIs changed), every Resync, and
// every Retry while something could not be done yet (a pod whose veth the interface plugin
// has not created yet, an ENI not attached yet).
type Controller struct {
	Host  *Host
	State StateFunc
	// NetnsFiles lists the pods' namespace files (default: NetnsFiles(DefaultNetnsDirs)).
	NetnsFiles func() ([]string, error)
	Retry      time.Duration // default 1 s
	Resync     time.Duration // default 30 s
	Log        *slog.Logger
	// AcceptRA, if set, checks the primary ENI's accept_ra at every sync while the node has
	// IPv6 prefixes or pods: at start, and as IPv6 pods come (ptp turns forwarding on).
	AcceptRA *AcceptRAWatch

	// once sets trig and Log: Trigger, Run and SyncOnce may come first, from any goroutine.
	once    sync.Once
	trig    chan struct{}
	lastErr string
}

// Outcome is what one SyncOnce did: Sync's result and the pods whose veth was not found.
type Outcome struct {
	Result
	Unresolved []netip.Addr
}

// Pending reports whether SyncOnce left something to retry.
func (o Outcome) Pending() bool { return len(o.Unresolved) > 0 || len(o.Errors) > 0 }

func (c *Controller) init() {
	c.once.Do(func() {
		c.trig = make(chan struct{}, 1)
		if c.Log == nil {
			c.Log = slog.New(slog.DiscardHandler)
		}
	})
}

// Trigger asks for a sync soon; triggers coalesce. Call it before Run or from any goroutine
// once Run started.
func (c *Controller) Trigger() {
	c.init()
	select {
	case c.trig <- struct{}{}:
	default:
	}
}

// Run syncs until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.init()
	retry, resync := c.Retry, c.Resync
	if retry <= 0 {
		retry = time.Second
	}
	if resync <= 0 {
		resync = 30 * time.Second
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.trig:
		case <-timer.C:
		}
		next := resync
		out, err := c.SyncOnce(ctx)
		if err != nil || out.Pending() {
			next = retry
		}
		c.report(out, err)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// report logs what could not be done, once per distinct set of problems (the retry every
// second would otherwise repeat it).
func (c *Controller) report(out Outcome, err error) {
	var b strings.Builder
	if err != nil {
		b.WriteString(err.Error())
	}
	for _, e := range out.Errors {
		b.WriteString("; " + e.Error())
	}
	if len(out.Unresolved) > 0 {
		fmt.Fprintf(&b, "; no host-side veth found yet for %v", out.Unresolved)
	}
	msg := strings.TrimPrefix(b.String(), "; ")
	if msg != c.lastErr && msg != "" {
		c.Log.Warn("ENI host routing incomplete; retrying", "problems", msg)
	}
	c.lastErr = msg
}

// SyncOnce reads the state, finds the host-side veth of every pod without a route yet and
// applies the result.
func (c *Controller) SyncOnce(ctx context.Context) (Outcome, error) {
	c.init()
	var out Outcome
	enis, pods, err := c.State(ctx)
	if err != nil {
		return out, fmt.Errorf("enihost: node state: %w", err)
	}
	if c.AcceptRA != nil && usesIPv6(enis, pods) {
		c.AcceptRA.Check(ctx, c.Host, enis)
	}
	routed, err := c.Host.PodRoutes()
	if err != nil {
		return out, err
	}
	var find []netip.Addr
	for _, p := range pods {
		if _, ok := routed[p.Addr]; !ok && p.HostLink == 0 {
			find = append(find, p.Addr)
		}
	}
	var found map[netip.Addr]int
	var scanErr error
	if len(find) > 0 {
		list := c.NetnsFiles
		if list == nil {
			list = func() ([]string, error) { return NetnsFiles(DefaultNetnsDirs) }
		}
		paths, err := list()
		if err != nil {
			return out, err
		}
		found, scanErr = c.Host.HostVeths(paths, find)
	}
	for i := range pods {
		if l, ok := found[pods[i].Addr]; ok {
			pods[i].HostLink = l
		}
	}
	for _, a := range find {
		if _, ok := found[a]; !ok {
			out.Unresolved = append(out.Unresolved, a)
		}
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	res, err := c.Host.Sync(enis, pods)
	out.Result = res
	if scanErr != nil {
		out.Errors = append(out.Errors, scanErr)
	}
	return out, errors.Join(err)
}
