// Command faulty is a test guest: a well-behaved pool policy, except that the pod name
// picks a fault. Built by the tests with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared.
//
//	panic    panics (a Go panic becomes proc_exit(2): a trap for the host)
//	loop     loops forever (stopped by the per-call deadline)
//	grow     allocates without bound (stopped by the memory cap)
//	sleep    sleeps an hour (virtual time: returns at once)
//	env      reports what it can see of the outside world in Reason
//	error    returns an error (a policy error, not a trap)
//	badpool  answers a candidate with an empty pool name (invalid output)
//	rejected answers NoFit with a Cause and per-pool Rejected detail
//	echo-*   answers Skip with the request's pod, namespace, node, CNI part and pools' free
//	         counts in Reason (echo)
//
// Any other pod gets the first pool of each family, in request order, with the pod name
// echoed in Source so tests can tell concurrent answers apart.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wasm/guest"
)

type faulty struct{}

var hoard [][]byte

var spin int

func (faulty) SelectPodPools(_ context.Context, r *policy.PodRequest) (policy.PodDecision, error) {
	switch r.Pod.Name {
	case "panic":
		panic("boom: policy panicked on purpose")
	case "loop":
		for {
			spin++
		}
	case "grow":
		for {
			hoard = append(hoard, make([]byte, 1<<20))
		}
	case "sleep":
		t0 := time.Now()
		time.Sleep(time.Hour)
		return policy.PodDecision{Code: policy.Skip, Reason: "slept " + time.Since(t0).Round(time.Minute).String()}, nil
	case "env":
		return policy.PodDecision{Code: policy.Skip, Reason: env()}, nil
	case "error":
		return policy.PodDecision{}, errors.New("policy failed on purpose")
	case "badpool":
		return policy.PodDecision{Code: policy.Decided, IPv4: []policy.Candidate{{Pool: ""}}}, nil
	case "rejected":
		return policy.PodDecision{Code: policy.NoFit, Reason: "no pool fits", Cause: policy.CauseNoMatch,
			Rejected: []policy.Rejection{
				{Pool: "pool-v4-00", Family: policy.IPv4, Cause: policy.CauseInvalid, Reason: "annotation names no pool"},
				{Pool: "pool-v6-00", Cause: policy.CauseUnavailable, Reason: "disabled"},
			}}, nil
	}
	if strings.HasPrefix(r.Pod.Name, "echo-") {
		return policy.PodDecision{Code: policy.Skip, Reason: echo(r)}, nil
	}
	d := policy.PodDecision{Code: policy.Decided, Source: "pod " + r.Pod.Name}
	for _, p := range r.Pools {
		switch {
		case p.Family == policy.IPv4 && len(d.IPv4) == 0:
			d.IPv4 = append(d.IPv4, policy.Candidate{Pool: p.Name})
		case p.Family == policy.IPv6 && len(d.IPv6) == 0:
			d.IPv6 = append(d.IPv6, policy.Candidate{Pool: p.Name})
		}
	}
	if len(d.IPv4)+len(d.IPv6) == 0 {
		return policy.PodDecision{Code: policy.NoFit, Reason: "no pools"}, nil
	}
	return d, nil
}

// echo is what an echo-* pod is answered; the tests compute the same from their request.
func echo(r *policy.PodRequest) string {
	s := fmt.Sprintf("pod %+v ns %+v node %+v cni %+v pools", r.Pod, r.Namespace, r.Node, r.CNI)
	for _, p := range r.Pools {
		s += fmt.Sprintf(" %s:%d", p.Name, p.Free)
	}
	return s
}

func (faulty) SelectNodeCIDRConfig(_ context.Context, r *policy.NodeRequest) (policy.NodeDecision, error) {
	if r.Node.Name == "panic" {
		panic("boom: node policy panicked on purpose")
	}
	d := policy.NodeDecision{Code: policy.Decided}
	for _, c := range r.Configs {
		d.Configs = append(d.Configs, c.Name)
	}
	return d, nil
}

// env reports the clock, randomness, filesystem and environment as the guest sees
// them, in a line the host test parses.
func env() string {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	_, ferr := os.ReadFile("/etc/hostname")
	_, derr := os.ReadDir("/")
	return fmt.Sprintf("time=%s rand=%s file=%v dir=%v env=%d",
		time.Now().UTC().Format(time.RFC3339), hex.EncodeToString(rnd[:]), ferr != nil, derr != nil,
		len(os.Environ()))
}

func init() { guest.RegisterPoolPolicy(faulty{}, guest.Name("faulty"), guest.Version("0.0.1-test")) }

func main() {}
