package process

import (
	"sync/atomic"
	"time"
)

// inflight is the calls running on one process, for the supervisor's watchdog. The
// per-call timeout is enforced by the supervisor instead of a context per call: a
// cancellable context costs the host a timer and about eight allocations per call (the
// context, its channel, gRPC's child registered with it), as much as the rest of the host's
// own work on a decision, and gRPC would send its deadline to the plugin. A call takes a slot
// holding its start time; every watchPeriod the supervisor marks the calls running longer
// than the timeout and kills the process, which ends every call on it (as a timeout always
// did). Beyond inflightSlots concurrent calls, a call falls back to a context deadline.
type inflight struct {
	epoch time.Time
	next  atomic.Uint32               // where the next call starts looking for a free slot
	slots [inflightSlots]atomic.Int64 // start (ns after epoch, > 0), 0 when free, negated when overdue
}

const inflightSlots = 64

// begin takes a slot for a call starting now; -1 if all are taken.
func (f *inflight) begin() int {
	now := int64(time.Since(f.epoch)) + 1 // never 0
	h := int(f.next.Add(1))
	for i := range inflightSlots {
		j := (h + i) % inflightSlots
		if f.slots[j].CompareAndSwap(0, now) {
			return j
		}
	}
	return -1
}

// end frees a call's slot and reports whether the watchdog found the call overdue.
func (f *inflight) end(slot int) bool {
	return f.slots[slot].Swap(0) < 0
}

// overdue marks the calls that have run longer than d and reports whether there were any.
func (f *inflight) overdue(d time.Duration) bool {
	now := int64(time.Since(f.epoch)) + 1
	found := false
	for i := range f.slots {
		s := f.slots[i].Load()
		if s > 0 && now-s > int64(d) && f.slots[i].CompareAndSwap(s, -s) {
			found = true
		}
	}
	return found
}

// watchPeriod is how often the supervisor looks for exited processes and overdue calls: a
// call is found overdue at most this long after its timeout.
func watchPeriod(timeout time.Duration) time.Duration {
	return min(exitPoll, max(timeout/4, 5*time.Millisecond))
}
