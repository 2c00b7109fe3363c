// Command constant is a test guest whose policy answers the same decision to every pod
// request without looking at it: a decision through it costs the WASM transport alone
// (encoding, the guest SDK's decoding and encoding, the host's decoding), the floor the
// benchmarks compare a real policy with.
package main

import (
	"context"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wasm/guest"
)

type constant struct{ policy.PodOnly }

// decision is what the label policy answers the benchmarks' request.
var decision = policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: "pool-v4-07"}},
	Source: "pod label allot.io/pool"}

func (constant) SelectPodPools(context.Context, *policy.PodRequest) (policy.PodDecision, error) {
	return decision, nil
}

func init() { guest.RegisterPoolPolicy(constant{}, guest.Name("constant"), guest.Version("0.1.0")) }

func main() {}
