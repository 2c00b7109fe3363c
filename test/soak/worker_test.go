package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
)

// settle is how long after the chaos the workers may take to finish their calls (a DEL
// retried until the restarted daemon answers) and the final checks may take.
const settle = 3 * time.Minute

// runtime drives allot-cni against one daemon as a container runtime does: an ADD that
// fails is torn down with DEL (retried until acknowledged) before the next attempt, and
// every DEL is retried until acknowledged.
type runtime struct {
	t  *testing.T
	l  *ledger
	o  *outages
	tg network
	// node names the daemon in the ledger and outages.
	node string
	// abandon, if set, says whether to leave a failed ADD without its teardown, as a
	// runtime that restarted and forgot the sandbox would: what such an ADD committed
	// before it was cut off is the final GC's to free.
	abandon func() bool
}

// add is one ADD of container id. On success the ledger and the outage clock hear of it;
// on failure the container is deleted again (hard bounds the retries) and add reports false.
func (r *runtime) add(hard context.Context, id, args string) bool {
	began := time.Now()
	out, err := r.tg.exec(hard, cniCall{cmd: "ADD", containerID: id, args: args})
	switch {
	case err != nil:
		r.t.Errorf("%s ADD %s: %v", r.node, id, err)
	case out.err == nil:
		r.l.acked(r.node, id, out.addrs, out.took)
		r.o.served(r.node, began, time.Now())
		return true
	default:
		r.l.failed("ADD", failureKind(out.err), fmt.Sprintf("%s %s: CNI error %d: %s", r.node, id, out.err.Code, out.err.Msg))
	}
	if r.abandon != nil && r.abandon() {
		r.l.mu.Lock()
		r.l.abandoned++
		r.l.mu.Unlock()
		return false
	}
	// A cut-off ADD may have been committed before the kill: the teardown frees it.
	r.del(hard, id, args)
	return false
}

// del DELs container id until the daemon acknowledges it.
func (r *runtime) del(hard context.Context, id, args string) {
	r.l.delStart(r.node, id)
	for {
		out, err := r.tg.exec(hard, cniCall{cmd: "DEL", containerID: id, args: args})
		switch {
		case err != nil && hard.Err() == nil:
			r.t.Errorf("%s DEL %s: %v", r.node, id, err)
		case err == nil && out.err == nil:
			r.l.delAcked(id)
			return
		case err == nil:
			r.l.failed("DEL", failureKind(out.err), fmt.Sprintf("%s %s: CNI error %d: %s", r.node, id, out.err.Code, out.err.Msg))
		}
		select {
		case <-hard.Done():
			r.t.Errorf("%s: DEL of %s not acknowledged within %s after the chaos", r.node, id, settle)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// serving waits until the daemon on socket answers Status.
func serving(ctx context.Context, socket string) error {
	c := client.New(socket)
	defer c.Close()
	return waitFor(ctx, func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.Status(cctx)
		return err == nil, fmt.Sprint(err)
	})
}

// allocations lists a daemon's allocations of network, with a bound.
func allocations(ctx context.Context, c *client.Client, network string) ([]api.Allocation, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all, err := c.Allocations(cctx)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, a := range all {
		if a.Network == network {
			out = append(out, a)
		}
	}
	return out, nil
}

// between is a random duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// finalGC is the runtime's GC after the chaos: the live containers of node are the valid
// attachments, anything else of the network is freed. It returns how many allocations GC
// freed and how many remain that no live container explains (leaks), and checks the rest
// against the ledger.
func finalGC(t *testing.T, ctx context.Context, l *ledger, node string, tg network, c *client.Client) (freed, leaks, remaining int) {
	t.Helper()
	before := l.snapshot(node)
	pre, err := allocations(ctx, c, tg.name)
	if err != nil {
		t.Errorf("%s: allocations before GC: %v", node, err)
		return 0, 0, 0
	}
	out, err := tg.exec(ctx, cniCall{cmd: "GC", valid: l.liveIDs(node)})
	if err != nil || out.err != nil {
		t.Errorf("%s: GC: %v %v", node, err, out.err)
	}
	post, err := allocations(ctx, c, tg.name)
	if err != nil {
		t.Errorf("%s: allocations after GC: %v", node, err)
		return 0, 0, 0
	}
	l.verify(node, before, post)
	for _, a := range post {
		if _, ok := before[a.Owner.ContainerID]; !ok {
			leaks++
			t.Errorf("%s: leak after GC: %s holds %v", node, a.Owner, a.IPs)
		}
	}
	return len(pre) - len(post), leaks, len(post)
}

// checkLedger fails the test on what the ledger found (showing the first few of each).
func checkLedger(t *testing.T, l *ledger) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	show := func(what string, m map[string]bool) {
		n := 0
		for k := range m {
			if n++; n > 10 {
				break
			}
			t.Errorf("%s: %s", what, k)
		}
	}
	kinds := make([]string, 0, len(l.examples))
	for k := range l.examples {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		t.Logf("first %s failure: %s", k, l.examples[k])
	}
	show("duplicate", l.duplicates)
	show("lost", l.lost)
	for i, u := range l.unexpected {
		if i == 10 {
			break
		}
		t.Errorf("unexpected failure: %s", u)
	}
	if l.unexpectedN > 10 {
		t.Errorf("... %d unexpected failures in all", l.unexpectedN)
	}
}
