package ipam

import (
	"context"
	"fmt"
	"testing"

	"github.com/allot-ipam/allot/core/api"
	"pgregory.net/rapid"
)

// TestPropertyAddDelRestart drives random ADD, DEL, repeated ADD and daemon restarts against
// a model of who holds what. Invariants after every step: no address is held twice, every
// acknowledged allocation is still held by its owner with the same addresses (also across
// restarts), a released owner holds nothing, and pool usage equals the model's (no leak).
func TestPropertyAddDelRestart(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		// A small pool so exhaustion and reuse happen often: /28 minus network, broadcast and
		// gateway = 13 addresses; the v6 /124 has 16.
		r := newRig(t, dualStack("10.7.0.0/28", "fd00:7::/124"))
		ctx := context.Background()
		model := map[string][]api.IPConfig{}
		owners := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p"})
		check := func() {
			all, err := r.m.Allocations(ctx)
			if err != nil {
				rt.Fatal(err)
			}
			if len(all) != len(model) {
				rt.Fatalf("daemon has %d owners, model %d", len(all), len(model))
			}
			seen := map[string]string{}
			for _, a := range all {
				want, ok := model[a.Owner.ContainerID]
				if !ok || fmt.Sprint(want) != fmt.Sprint(a.IPs) {
					rt.Fatalf("%s holds %v, model says %v", a.Owner, a.IPs, want)
				}
				for _, ip := range a.IPs {
					if prev, dup := seen[ip.Address]; dup {
						rt.Fatalf("%s held by %s and %s", ip.Address, prev, a.Owner)
					}
					seen[ip.Address] = a.Owner.ContainerID
				}
			}
			pools, _ := r.m.Pools(ctx)
			for _, p := range pools {
				var n uint64
				for _, ips := range model {
					for _, ip := range ips {
						if ip.Pool == p.Name {
							n++
						}
					}
				}
				if p.Used != n {
					rt.Fatalf("pool %s reports %d used, model %d", p.Name, p.Used, n)
				}
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"add": func(rt *rapid.T) {
				id := owners.Draw(rt, "owner")
				a, err := r.m.Allocate(ctx, add(id))
				if prev, held := model[id]; held {
					if err != nil || fmt.Sprint(prev) != fmt.Sprint(a.IPs) {
						rt.Fatalf("repeated ADD of %s: %v %v, want %v", id, a, err, prev)
					}
					return
				}
				if err != nil {
					if api.CodeOf(err) != api.CodeExhausted {
						rt.Fatalf("ADD %s: %v", id, err)
					}
					return
				}
				model[id] = a.IPs
			},
			"del": func(rt *rapid.T) {
				id := owners.Draw(rt, "owner")
				if err := r.m.Release(ctx, &api.ReleaseRequest{Owner: api.Owner{ContainerID: id, IfName: "eth0"}}); err != nil {
					rt.Fatalf("DEL %s: %v", id, err)
				}
				delete(model, id)
			},
			"restart": func(rt *rapid.T) {
				r.restart()
			},
			"": func(rt *rapid.T) { check() },
		})
	})
}
