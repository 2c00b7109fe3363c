package eni

// Params are the per-node watermarks of Cilium's ENI IPAM (a CiliumNode's spec.ipam.*, see
// docs.cilium.io/en/stable/network/concepts/ipam/eni/, "ENI Allocation Parameters"). Zero
// values mean "off" except PreAllocate, whose default (8) DefaultParams sets.
type Params struct {
	// PreAllocate (spec.ipam.pre-allocate) is how many unused addresses a node keeps ready.
	PreAllocate int
	// MinAllocate (spec.ipam.min-allocate) is the least a node holds once it has any.
	MinAllocate int
	// MaxAllocate (spec.ipam.max-allocate) caps the addresses a node holds; 0 = no cap.
	MaxAllocate int
	// MaxAboveWatermark (spec.ipam.max-above-watermark) is how many addresses beyond the
	// need one allocation may add, and how many the release keeps above the watermark.
	MaxAboveWatermark int
}

// DefaultParams are Cilium's ENI defaults: pre-allocate 8, everything else off.
func DefaultParams() Params { return Params{PreAllocate: 8} }

// NeededIPs is the deficit formula of Cilium's ENI documentation ("Determination of ENI IP
// deficits or excess"), word for word:
//
//	neededIPS = max(pre-allocate - (available - used), min-allocate - available)
//	if max-allocate > 0 { neededIPS = min(max(max-allocate - available, 0), neededIPS) }
//
// clamped at 0 (a negative need is no need; Cilium's code, pkg/ipam/node.go calculateNeededIPs,
// clamps explicitly, and the two forms agree for every input, see TestNeededMatchesCodeForm).
func NeededIPs(available, used int, p Params) int {
	needed := max(p.PreAllocate-(available-used), p.MinAllocate-available)
	if p.MaxAllocate > 0 {
		needed = min(max(p.MaxAllocate-available, 0), needed)
	}
	return max(needed, 0)
}

// ExcessIPs is Cilium's excess formula (pkg/ipam/node.go, calculateExcessIPs): a node
// whose use and holding both stay at or under min-allocate + max-above-watermark keeps
// everything; otherwise it keeps used + pre-allocate + max-above-watermark. Cilium's own
// test pins (avail 17, used 0, pre 8, min 16, maw 0) at 9, so there is no branch that keeps
// the watermark itself once the node holds more than it.
func ExcessIPs(available, used int, p Params) int {
	watermark := p.MinAllocate + p.MaxAboveWatermark
	if used <= watermark && available <= watermark {
		return 0
	}
	return max(available-used-p.PreAllocate-p.MaxAboveWatermark, 0)
}

// SurgeIPs is the surge of Cilium's ENI allocation (surgeAllocate): when more pods are pending
// on a node than pre-allocate covers, the operator allocates the difference on top of the need
// so those pods do not wait for another round.
func SurgeIPs(pending int, p Params) int {
	return max(pending-p.PreAllocate, 0)
}

// AllocationTarget is how many addresses one allocation step aims for:
// needed + max-above-watermark + surge, never beyond max-allocate.
func AllocationTarget(available, needed, pending int, p Params) int {
	if needed <= 0 {
		return 0
	}
	want := needed + p.MaxAboveWatermark + SurgeIPs(pending, p)
	if p.MaxAllocate > 0 {
		want = min(want, max(p.MaxAllocate-available, 0))
	}
	return want
}

// Deficit orders the resync queue: the need when positive, minus the excess otherwise, so
// sorting by deficit (largest first) serves allocations before releases.
func Deficit(needed, excess int) int {
	if needed > 0 {
		return needed
	}
	return -excess
}
