package operator

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/internal/sharedread"
)

// IPPools read live.
//
// The AllotNode reconciler reads the IPPools from the informer cache. An agent asks for the
// blocks of a pool created a moment before (a pod names it) as soon as its own watch, or a
// live read (core/agent/livepools.go), shows the pool, which may be before the operator's
// watch delivers it: the request would be marked unmet ("no such IPPool" in the node's
// PoolsFulfilled condition) until the informer catches up and a later reconcile clears it,
// a false alarm for whoever watches the condition, and the node's blocks would wait for
// that reconcile. So a requested pool the cache lacks is read from the API server itself
// (one GET of that name) before the request is declared unmet.
//
// A pool found live is used at once, as if the cache had it (allotNodeReconciler.poolTable),
// rather than requeueing the node until the cache has it: the live object is the newest
// state of the pool there is, so handing out of it is as safe as handing out of a cached one
// (the leader's one block set keeps every block of every pool apart, and buildPoolTable
// leaves out a CIDR of a newer pool that overlaps an older pool's, as always), while a
// requeue would make the node wait on the very watch that lags and needs a timer of its own.
// The IPPool reconciler adds the pool's finalizer and status once its informer delivers it,
// counting the blocks already handed out.
//
// A request naming a pool that does not exist must not cost a GET per reconcile: one read of
// a name answers every reconcile that misses it for livePoolWindow after it began (found or
// not: a negative cache, as the agent's), and reconciles that miss it while a read is in
// flight share that read. So the API server sees at most one GET per second per missing
// name, whatever the number of nodes asking. A read that fails (the API server away, a role
// without get on ippools) counts as "no such pool", the answer the cache gave: the request
// is reported unmet as it was before live reads, rather than failing the node's whole
// reconcile and with it the hand-outs of the pools the cache has.

const (
	// livePoolWindow is how long one live read of an IPPool answers later reconciles.
	livePoolWindow = time.Second
	// livePoolTimeout bounds one read within the reconcile's context.
	livePoolTimeout = 5 * time.Second
)

// livePools reads IPPools the cache lacks from the API server, at most once per window per
// name.
type livePools struct {
	reader client.Reader // the API server itself
	reads  *prometheus.CounterVec
	log    *slog.Logger
	last   sharedread.Reads[string, *allotv1.IPPool] // nil: no such IPPool, or the read failed
}

func newLivePools(reader client.Reader, reads *prometheus.CounterVec, log *slog.Logger) *livePools {
	l := &livePools{reader: reader, reads: reads, log: log}
	l.last.Window = livePoolWindow
	return l
}

// get returns IPPool name as the API server has it, or nil when it does not exist (or the
// read failed); a read younger than the window answers without another.
func (l *livePools) get(ctx context.Context, name string) *allotv1.IPPool {
	p, _ := l.last.Get(ctx, name, func() *allotv1.IPPool { return l.read(ctx, name) })
	return p
}

// read GETs IPPool name and counts the read by result.
func (l *livePools) read(ctx context.Context, name string) *allotv1.IPPool {
	ctx, cancel := context.WithTimeout(ctx, livePoolTimeout)
	defer cancel()
	var p allotv1.IPPool
	switch err := l.reader.Get(ctx, client.ObjectKey{Name: name}, &p); {
	case apierrors.IsNotFound(err):
		l.reads.WithLabelValues("none").Inc()
		return nil
	case err != nil:
		l.reads.WithLabelValues("error").Inc()
		l.log.Warn("reading a requested IPPool the cache lacks from the API server failed; the request is reported unmet", "pool", name, "err", err)
		return nil
	}
	l.reads.WithLabelValues("found").Inc()
	return &p
}

// missingPools are the pools of requests that need addresses and that cached (the cache's
// pool names) lacks, in request order, each once. Pure.
func missingPools(requests []allotv1.PoolRequest, cached map[string]bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, q := range requests {
		if cached[q.Pool] || seen[q.Pool] || (q.Needed.IPv4 <= 0 && q.Needed.IPv6 <= 0) {
			continue
		}
		seen[q.Pool] = true
		out = append(out, q.Pool)
	}
	return out
}
