package wasm

import (
	"context"
	"fmt"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// partShape returns the part bits of a request (field 1001, 0 if absent) and the fields
// of its pod.
func partShape(t *testing.T, b []byte) (bits uint64, present []protowire.Number, pod []protowire.Number) {
	t.Helper()
	fieldsOf(t, b, func(num protowire.Number, val []byte) {
		switch num {
		case fPodReqPartRefs:
			bits, _ = protowire.ConsumeVarint(val)
		case fPodReqPod:
			body, _ := protowire.ConsumeBytes(val)
			fieldsOf(t, body, func(pn protowire.Number, _ []byte) { pod = append(pod, pn) })
		}
		if num >= 1 && num <= 4 {
			present = append(present, num)
		}
	})
	return bits, present, pod
}

func TestWithPartRefs(t *testing.T) {
	in := &instance{}
	req := podRequest("web", map[string]string{"app": "web"})
	all := partNamespace | partNode | partCNI | partPodRest
	steps := []struct {
		name   string
		change func()
		bits   uint64
	}{
		{"first request: all in full", func() {}, 0},
		{"unchanged: every part referenced", func() {}, all},
		{"another pod of the workload", func() { req.Pod.Name, req.Pod.UID = "web-2", "uid-2" }, all},
		{"pod labels changed", func() { req.Pod.Labels = map[string]string{"app": "db"} }, all &^ partPodRest},
		{"node labels changed", func() { req.Node.Labels = map[string]string{"zone": "b"} }, all &^ partNode},
		{"namespace and cni changed", func() { req.Namespace.Name, req.CNI.IfName = "ns2", "net1" }, partNode | partPodRest},
		{"forgotten after a failed call", func() { in.forget() }, 0},
		{"referenced again", func() {}, all},
	}
	for _, s := range steps {
		s.change()
		b, err := wire.AppendPodRequest(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		bits, present, pod := partShape(t, in.withPartRefs(nil, b))
		if bits != s.bits {
			t.Fatalf("%s: bits %#x, want %#x", s.name, bits, s.bits)
		}
		if want := 1 + 3 - popcount(bits&^partPodRest); len(present) != want {
			t.Errorf("%s: fields %v present, want %d", s.name, present, want)
		}
		if bits&partPodRest != 0 && fmt.Sprint(pod) != "[2 3]" {
			t.Errorf("%s: pod fields %v, want only name and uid", s.name, pod)
		}
	}
}

func popcount(v uint64) int {
	n := 0
	for ; v != 0; v &= v - 1 {
		n++
	}
	return n
}

// TestPartRefsThroughGuest: with part references and runs of unchanged pools the guest sees
// every change of the pod, namespace, node, CNI part and free counts; and so it does when the
// host uses fewer features, as with a guest of an earlier SDK (pool references only, or none).
func TestPartRefsThroughGuest(t *testing.T) {
	for _, c := range []struct {
		name                         string
		poolRefs, sameRuns, partRefs bool
	}{{"all", true, true, true}, {"pool references only", true, false, false}, {"none", false, false, false}} {
		t.Run(c.name, func(t *testing.T) {
			p := openGuest(t, buildGuest(t, faultyDir, true), func(c *Config) { c.Instances = 1 })
			if !p.poolRefs || !p.partRefs || !p.sameRuns {
				t.Fatalf("the SDK guest announces %v, %v, %v; want every feature", p.poolRefs, p.sameRuns, p.partRefs)
			}
			p.poolRefs, p.sameRuns, p.partRefs = c.poolRefs, c.sameRuns, c.partRefs
			echoSteps(t, p)
		})
	}
}

// echoSteps changes an echo-* request step by step and checks what the guest saw.
func echoSteps(t *testing.T, p *Plugin) {
	req := podRequest("echo-1", map[string]string{"app": "web"})
	for i, change := range []func(){
		func() {},
		func() {},
		func() { req.Pod.Name, req.Pod.UID = "echo-2", "uid-2" },
		func() { req.Pod.Annotations = nil },
		func() { req.Namespace.Labels["team"] = "db" },
		func() { req.Node = policy.Node{Name: "node-2"} },
		func() { req.CNI.Pools = []string{"pool-v4-01"} },
		func() { req.Pod.OwnerKind, req.Pod.OwnerName = "", "" },
		func() { req.Pools[3].Free++ },
		func() {},
		func() { req.Pools[0].Free, req.Pools[19].Free = 0, 1 },
		func() {},
		func() { req.Pools[0].Free = 5 },
		func() {},
	} {
		change()
		d, err := p.SelectPodPools(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := fmt.Sprintf("pod %+v ns %+v node %+v cni %+v pools", req.Pod, req.Namespace, req.Node, req.CNI)
		for _, p := range req.Pools {
			want += fmt.Sprintf(" %s:%d", p.Name, p.Free)
		}
		if d.Reason != want {
			t.Fatalf("step %d: guest saw\n%s\nwant\n%s", i, d.Reason, want)
		}
	}
}

// TestGuestWithoutFeatures: a guest that announces no features (built before pool and part
// references, like testdata/genguest) is sent every pool and part in full, every time.
func TestGuestWithoutFeatures(t *testing.T) {
	p := openGuest(t, buildGuest(t, genGuestDir, true), func(c *Config) { c.Instances = 1 })
	if p.poolRefs || p.partRefs {
		t.Fatalf("pool references %v, part references %v; want neither", p.poolRefs, p.partRefs)
	}
	req := podRequest("web", nil)
	for i := range 3 {
		req.Pod.Name = fmt.Sprint("web-", i)
		d, err := p.SelectPodPools(context.Background(), req)
		if err != nil || d.Code != policy.Decided {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
	}
}
