package agent

import (
	"math/rand/v2"
	"time"

	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// StatusQuiet bounds how long the status of a node with no address in use waits
// (statusDue): between half of it and all of it, at random (test/scale waits for these
// writes before it counts the steady state).
const StatusQuiet = time.Minute

// statusDue is when the node's usage st, which differs from the object's status cur, is to
// be written: now when either counts an address in use, else after a random wait of up to
// StatusQuiet, kept across syncs until it passes.
//
// Such a status says only how many addresses the node's blocks hold: the spec the operator
// wrote says as much, nothing waits for it, and no pool's count of addresses in use (the sum
// the operator writes to its status) changes. It is the status of a node that just got its
// first blocks, before any pod: nodes booting together (a cluster starting, or its agents
// after a control-plane outage) would each write one at the moment the operator's block
// writes for the others need the API server (test/scale: 5,000 writes, a third of the
// agents' requests in the start). Spread over the next minute, they come after; jittered, as
// Kubernetes clients spread their retries, so that they do not arrive together either.
func (a *Agent) statusDue(cur, st v1alpha1.NodeIPAMStatus) time.Time {
	now := a.opts.Now()
	if inUse(cur) || inUse(st) {
		a.statusAt = time.Time{}
		return now
	}
	if a.statusAt.IsZero() {
		a.statusAt = now.Add(StatusQuiet/2 + rand.N(StatusQuiet/2))
	}
	return a.statusAt
}

// inUse reports whether st counts an address in use.
func inUse(st v1alpha1.NodeIPAMStatus) bool {
	for _, p := range st.Pools {
		if (p.IPv4 != nil && p.IPv4.Used != 0) || (p.IPv6 != nil && p.IPv6.Used != 0) {
			return true
		}
	}
	return false
}
