package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/test/k8senv"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestAgentAddNamesPoolNotWatchedYet: an ADD naming an IPPool that the agent's watch has not
// delivered (the watch is held by the test, so the informer provably lacks it) is served
// from one live read of the IPPools: the node asks for the pool's blocks, the ADD waits for
// one and gets its address. A pool that does not exist fails clearly, naming it, after one
// live read; ADDs within the negative cache's window do not read again.
func TestAgentAddNamesPoolNotWatchedYet(t *testing.T) {
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.IPPoolSpec{
		IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.60.0.0/24"}, MaskSize: 28}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}); err != nil {
		t.Fatal(err)
	}
	opCtx, stopOp := context.WithCancel(ctx)
	defer stopOp()
	go (&fakeOperator{c: c}).run(opCtx)

	hold := k8senv.NewWatchHold()
	defer hold.Release()
	cfg := hold.Wrap(env.Config, "ippools")
	cnt := &k8senv.Counter{}
	r := &agentRig{t: t, env: env, c: c, node: "node-l", dir: t.TempDir(), grace: time.Minute, cfg: cnt.Wrap(cfg)}
	r.start()
	defer r.shutdown()
	eventually(t, "a default block", 20*time.Second, func() (bool, string) {
		return len(usage(r.m, "default", policy.IPv4).CIDRs) > 0, "no block yet"
	})

	// The pool is created while the agent's IPPool watch is held, and an ADD names it at once.
	hold.Hold()
	if err := c.Create(ctx, &allotv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}, Spec: allotv1.IPPoolSpec{
		IPv4: &allotv1.PoolFamily{CIDRs: []string{"10.61.0.0/24"}, MaskSize: 28}}}); err != nil {
		t.Fatal(err)
	}
	p := mkPod(t, c, "plain", "fresh-1", "node-l", map[string]string{ciliumannotations.DefaultAnnotation: "fresh"})
	lists := func() int64 { return cnt.Snapshot()["LIST ippools"] }
	before := lists()
	a1, err := r.m.Allocate(ctx, addReq(p, "c1"))
	if err != nil {
		t.Fatalf("ADD naming pool fresh, created a moment before: %v", err)
	}
	if len(a1.IPs) != 1 || a1.IPs[0].Pool != "fresh" || !strings.HasPrefix(a1.IPs[0].Address, "10.61.0.") {
		t.Fatalf("got %+v, want an address of pool fresh", a1.IPs)
	}
	if n := lists() - before; n != 1 {
		t.Fatalf("%d live LISTs of the IPPools for one ADD, want 1", n)
	}
	var cached allotv1.IPPool
	if err := r.a.cache.Get(ctx, types.NamespacedName{Name: "fresh"}, &cached); !apierrors.IsNotFound(err) {
		t.Fatalf("the informer has pool fresh (%v): the test did not hold its watch", err)
	}
	n, _ := getNode(c, "node-l")
	if !slices.ContainsFunc(n.Spec.IPAM.Pools.Requested, func(q allotv1.PoolRequest) bool { return q.Pool == "fresh" && q.Needed.IPv4 > 0 }) {
		t.Fatalf("requested %+v: want pool fresh", n.Spec.IPAM.Pools.Requested)
	}

	// A pool that does not exist: one live read, then the ADD fails naming it. A second ADD
	// within the negative cache's window reads nothing; once the window has passed, one more.
	r.a.livePools.last.Reset(time.Hour)
	missing := func(cid string) {
		t.Helper()
		q := mkPod(t, c, "plain", "missing-"+cid, "node-l", map[string]string{ciliumannotations.DefaultAnnotation: "nosuch"})
		_, err := r.m.Allocate(ctx, addReq(q, cid))
		if api.CodeOf(err) != api.CodeNoPool || !strings.Contains(err.Error(), `names pool "nosuch", which does not exist`) {
			t.Fatalf("ADD naming a missing pool: %v", err)
		}
	}
	for i, want := range []int64{1, 0} {
		before = lists()
		missing(fmt.Sprintf("m%d", i))
		if n := lists() - before; n != want {
			t.Fatalf("ADD %d naming a missing pool made %d live LISTs, want %d", i+1, n, want)
		}
	}
	r.a.livePools.last.Reset(0)
	before = lists()
	missing("m2")
	if n := lists() - before; n != 1 {
		t.Fatalf("ADD after the negative cache's window made %d live LISTs, want 1", n)
	}

	// The watch catches up: the informer's pool replaces the live copy, the block stays.
	hold.Release()
	eventually(t, "pool fresh from the informer, the live copy forgotten", 20*time.Second, func() (bool, string) {
		r.a.Trigger()
		r.a.livePools.mu.Lock()
		left := len(r.a.livePools.pools)
		r.a.livePools.mu.Unlock()
		err := r.a.cache.Get(ctx, types.NamespacedName{Name: "fresh"}, &cached)
		return err == nil && left == 0, fmt.Sprintf("cache: %v; live pools left: %d", err, left)
	})
	if u := usage(r.m, "fresh", policy.IPv4); len(u.CIDRs) != 1 || u.Used != 1 {
		t.Fatalf("pool fresh after the watch caught up: %+v", u)
	}
}
