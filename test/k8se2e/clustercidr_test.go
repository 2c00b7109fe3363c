package k8se2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/daemon"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/test/k8senv"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// TestClusterCIDRConfigAgent: in ClusterCIDRConfig mode the operator writes the Node's
// spec.podCIDRs and allot's own agent (cluster.ipam: kubernetes) hands pods addresses from
// exactly those CIDRs, both families, with the CIDR's gateway and a default route through
// it; DEL frees; a restart keeps them, with the API server up or down.
func TestClusterCIDRConfigAgent(t *testing.T) {
	daemon.RouteKlog(slog.New(slog.DiscardHandler))
	env := k8senv.Start(t)
	c, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kubeconfig := writeKubeconfig(t, env.Config)
	for _, o := range []ctrlclient.Object{
		&allotv1.ClusterCIDRConfig{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: allotv1.ClusterCIDRConfigSpec{
			IPv4: &allotv1.CIDRBlockSpec{CIDR: "10.244.0.0/16", PerNodeMaskSize: 24},
			IPv6: &allotv1.CIDRBlockSpec{CIDR: "fd00:10:244::/112", PerNodeMaskSize: 120}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	startOperator(t, env, operator.Options{ClusterCIDRConfig: true, DisableMultiPool: true})

	var podCIDRs []netip.Prefix
	eventually(t, "node-c's spec.podCIDRs from the operator", 30*time.Second, func() (bool, string) {
		var n corev1.Node
		if err := c.Get(ctx, types.NamespacedName{Name: "node-c"}, &n); err != nil {
			return false, err.Error()
		}
		podCIDRs = podCIDRs[:0]
		for _, s := range n.Spec.PodCIDRs {
			podCIDRs = append(podCIDRs, netip.MustParsePrefix(s))
		}
		return len(podCIDRs) == 2, fmt.Sprint(n.Spec.PodCIDRs)
	})
	v4, v6 := podCIDRs[0], podCIDRs[1]
	if !v4.Addr().Is4() {
		v4, v6 = v6, v4
	}
	t.Logf("node-c's pod CIDRs: %s %s", v4, v6)

	cfg := agentConfig(t, "node-c", kubeconfig)
	cfg.Cluster.IPAM = config.IPAMKubernetes
	cfg.Cluster.PendingTimeout = 3 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, name: "node-c", cfg: &cfg}
	n.start()
	t.Cleanup(n.stop)
	cl := &cluster{t: t, env: env, c: c, nodes: []*node{n}}

	check := func(t *testing.T, a *api.Allocation) {
		t.Helper()
		if len(a.IPs) != 2 {
			t.Fatalf("want one address per family, got %+v", a.IPs)
		}
		for _, ip := range a.IPs {
			p := netip.MustParsePrefix(ip.Address)
			cidr, dst := v4, "0.0.0.0/0"
			if p.Addr().Is6() {
				cidr, dst = v6, "::/0"
			}
			gw := cidr.Addr().Next() // the CIDR's first usable address, as a bridge takes it
			if !cidr.Contains(p.Addr()) || p.Bits() != cidr.Bits() || ip.Pool != "default" {
				t.Errorf("%s (pool %s) is not an address of the node's pod CIDR %s", ip.Address, ip.Pool, cidr)
			}
			if p.Addr() == gw || ip.Gateway != gw.String() {
				t.Errorf("%s: gateway %q, want %s (never handed out)", ip.Address, ip.Gateway, gw)
			}
			if !slices.Contains(a.Routes, api.Route{Dst: dst, GW: gw.String()}) {
				t.Errorf("routes %+v lack %s via %s", a.Routes, dst, gw)
			}
		}
	}

	pods := map[string]*corev1.Pod{}
	allocs := map[string]*api.Allocation{}
	for i := range 4 {
		p := cl.pod("plain", fmt.Sprintf("c%d", i), n, nil)
		pods[p.Name] = p
	}
	t.Run("ADD from the node's pod CIDRs", func(t *testing.T) {
		for _, name := range []string{"c0", "c1", "c2"} {
			a, err := n.add(ctx, pods[name])
			if err != nil {
				t.Fatalf("ADD %s: %v", name, err)
			}
			check(t, a)
			allocs[name] = a
		}
		noDuplicates(t, holdings(t, n))
		// The agent writes neither the Node nor an AllotNode in this mode.
		var an allotv1.AllotNode
		if err := c.Get(ctx, types.NamespacedName{Name: "node-c"}, &an); !apierrors.IsNotFound(err) {
			t.Fatalf("AllotNode of node-c: %v, want none", err)
		}
	})

	t.Run("DEL frees", func(t *testing.T) {
		if err := n.del(ctx, pods["c1"]); err != nil {
			t.Fatal(err)
		}
		h := holdings(t, n)
		if _, ok := h["c1"]; ok || len(h) != 2 {
			t.Fatalf("after DEL of c1: %v", h)
		}
		st, err := n.cli.Pools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st {
			if p.Name == "default" && p.Used != 2 {
				t.Fatalf("pool %+v: want 2 used after the DEL", p)
			}
		}
	})

	t.Run("restart keeps them", func(t *testing.T) {
		n.stop()
		n.start()
		for _, name := range []string{"c0", "c2"} {
			a, err := n.add(ctx, pods[name])
			if err != nil || !slices.Equal(addrsOf(a), addrsOf(allocs[name])) {
				t.Fatalf("repeated ADD of %s after a restart: %v %v, want %v", name, addrsOf(a), err, addrsOf(allocs[name]))
			}
		}
		// Restarted while the API server is down: the pod CIDRs come from the node store.
		n.stop()
		env.StopAPIServer()
		n.start()
		a, err := n.add(ctx, pods["c3"])
		if err != nil {
			t.Fatalf("ADD with the API server down: %v", err)
		}
		check(t, a)
		if err := env.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the agent reconciled", 60*time.Second, func() (bool, string) {
			return !n.d.Agent().ServingLocal(), "still serving from local state"
		})
		if o := n.d.Manager().Orphans(); len(o) != 0 {
			t.Fatalf("orphans with unchanged pod CIDRs: %+v", o)
		}
		noDuplicates(t, holdings(t, n))
	})
}
