package k8se2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-ipam/allot/core/api"
)

// TestENIAgentStartsWithoutAPIServer is TestAgentStartsWithoutAPIServer in ENI mode: an agent
// restarted while the API server is down serves ADD from the ENI addresses its node store
// kept (each presented with its subnet's prefix length and router, as before the restart)
// and DEL for what it allocated; when the API server is back it reconciles, and every address
// a pod holds is one EC2 assigns to the node's instance, held once.
func TestENIAgentStartsWithoutAPIServer(t *testing.T) {
	e := newENIEnv(t, eniSetup{nodes: 1, types: []string{"m5.large"}, subnets: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}})
	ctx := context.Background()
	n := e.nodes[0]
	eventually(t, "eni-00 pre-allocated", 2*time.Minute, func() (bool, string) { return e.settled(true) })
	if err := e.scale(ctx, n, 2); err != nil {
		t.Fatal(err)
	}
	before := map[string]*api.Allocation{}
	for _, p := range e.pods[n.name] {
		a, err := n.add(ctx, p) // a repeated ADD answers what the pod holds
		if err != nil {
			t.Fatal(err)
		}
		before[p.Name] = a
	}
	// Pods scheduled during the outage: API objects the restarted agent never reads.
	var later []*corev1.Pod
	for i := range 2 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("offline-%d", i)},
			Spec: corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		if err := e.c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		later = append(later, p)
	}
	assigned := e.ec2Addrs(n.name)

	n.stop()
	e.env.StopAPIServer()
	n.start()
	eventually(t, "the agent serves from its node store", time.Minute, func() (bool, string) {
		return n.d.Agent().ServingLocal(), "not serving from local state"
	})
	first := e.pods[n.name][0]
	if err := n.del(ctx, first); err != nil {
		t.Fatalf("DEL %s with the API server down: %v", first.Name, err)
	}
	for _, p := range later {
		a, err := n.add(ctx, p)
		if err != nil {
			t.Fatalf("ADD %s with the API server down: %v", p.Name, err)
		}
		ip := a.IPs[0]
		pfx := netip.MustParsePrefix(ip.Address)
		if _, ok := assigned[pfx.Addr()]; !ok || pfx.Bits() != 24 || ip.Gateway != "10.1.0.1" {
			t.Fatalf("ADD %s with the API server down got %+v: want an address of the instance's ENIs (%d) as /24 via 10.1.0.1", p.Name, ip, len(assigned))
		}
	}
	second := e.pods[n.name][1]
	if again, err := n.add(ctx, second); err != nil || !slices.Equal(addrsOf(again), addrsOf(before[second.Name])) {
		t.Fatalf("repeated ADD of %s: %v %v, want %v", second.Name, addrsOf(again), err, addrsOf(before[second.Name]))
	}
	noDuplicates(t, holdings(t, n))

	if err := e.env.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent reconciled", 2*time.Minute, func() (bool, string) {
		return !n.d.Agent().ServingLocal(), "still serving from local state"
	})
	h := holdings(t, n)
	if _, ok := h[first.Name]; ok || len(h) != 3 {
		t.Fatalf("allocations after the outage: %v (want %s and the two offline pods)", h, second.Name)
	}
	noDuplicates(t, h)
	eventually(t, "status.ipam.used names the three pods, on the instance's addresses", time.Minute, func() (bool, string) {
		an := (&cluster{t: t, env: e.env, c: e.c}).allotNode(n.name)
		truth := e.ec2Addrs(n.name)
		for _, as := range h {
			for _, s := range as {
				a := netip.MustParsePrefix(s).Addr()
				if _, ok := truth[a]; !ok {
					return false, fmt.Sprintf("%s is not assigned to the instance", a)
				}
				if _, ok := an.Status.IPAM.Used[a.String()]; !ok {
					return false, fmt.Sprintf("%s not in status.ipam.used %v", a, an.Status.IPAM.Used)
				}
			}
		}
		return len(an.Status.IPAM.Used) == 3, fmt.Sprintf("status.ipam.used %v", an.Status.IPAM.Used)
	})
}
