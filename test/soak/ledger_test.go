package soak

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/internal/benchutil"
)

// ledger is what the runtime was told, the ground truth the invariants are checked against.
// A container is live from its acknowledged ADD until its DEL starts; its addresses must
// stay allocated to it in that time, and no two live containers may hold one address.
// Container IDs are never reused.
type ledger struct {
	mu       sync.Mutex
	live     map[string]liveEntry // container ID -> what its ADD answered
	holder   map[string]string    // address -> live container ID
	deleting map[string]string    // container ID -> node, DEL started and not acknowledged

	adds, dels   int
	abandoned    int
	addFailures  map[string]int
	delFailures  map[string]int
	latencies    []time.Duration
	duplicates   map[string]bool   // one entry per (address, holders) found
	lost         map[string]bool   // acknowledged containers found without their addresses
	examples     map[string]string // op and failure kind -> the first message of that kind
	unexpected   []string          // failures no kill explains (first few)
	unexpectedN  int
	checks       int
	checkedAlloc int
}

type liveEntry struct {
	node  string
	addrs []string
}

func newLedger() *ledger {
	return &ledger{
		live: map[string]liveEntry{}, holder: map[string]string{}, deleting: map[string]string{},
		addFailures: map[string]int{}, delFailures: map[string]int{},
		duplicates: map[string]bool{}, lost: map[string]bool{}, examples: map[string]string{},
	}
}

// acked records an acknowledged ADD and checks its addresses against every live container
// of the cluster.
func (l *ledger) acked(node, id string, addrs []string, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.adds++
	l.latencies = append(l.latencies, took)
	for _, a := range addrs {
		if h, ok := l.holder[a]; ok && h != id {
			l.duplicates[fmt.Sprintf("%s told to %s (%s) while live in %s (%s)", a, id, node, h, l.live[h].node)] = true
		}
		l.holder[a] = id
	}
	l.live[id] = liveEntry{node: node, addrs: addrs}
}

// delStart marks id as being deleted: from now on its addresses may go to others.
func (l *ledger) delStart(node, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.live[id]; ok {
		for _, a := range e.addrs {
			if l.holder[a] == id {
				delete(l.holder, a)
			}
		}
		delete(l.live, id)
	}
	l.deleting[id] = node
}

func (l *ledger) delAcked(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.deleting, id)
	l.dels++
}

func (l *ledger) failed(op, kind, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if op == "ADD" {
		l.addFailures[kind]++
	} else {
		l.delFailures[kind]++
	}
	if _, ok := l.examples[op+" "+kind]; !ok {
		l.examples[op+" "+kind] = detail
	}
	if !expectedFailure(kind) {
		l.unexpected = append(l.unexpected, op+": "+detail)
		l.unexpectedN++
	}
}

// snapshot is the live containers of node (nil: every node) with their addresses.
func (l *ledger) snapshot(node string) map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for id, e := range l.live {
		if node == "" || e.node == node {
			out[id] = e.addrs
		}
	}
	return out
}

// verify checks a daemon's allocation list against a snapshot of the ledger taken before
// the list was read: every container live in the snapshot and still live now (its DEL has
// not started, so nothing could have freed it) must hold exactly its addresses; and no
// address may be held twice in the list. Allocations the ledger does not know (ADDs in
// progress, or cut off by a kill) are left to the final GC.
func (l *ledger) verify(node string, before map[string][]string, allocs []api.Allocation) {
	held := map[string][]string{}
	byAddr := map[string]string{}
	var dups []string
	for _, a := range allocs {
		var addrs []string
		for _, ip := range a.IPs {
			ad := bare(ip.Address)
			addrs = append(addrs, ad)
			if o, ok := byAddr[ad]; ok && o != a.Owner.ContainerID {
				dups = append(dups, fmt.Sprintf("%s held by %s and %s on %s", ad, o, a.Owner.ContainerID, node))
			}
			byAddr[ad] = a.Owner.ContainerID
		}
		slices.Sort(addrs)
		held[a.Owner.ContainerID] = addrs
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checks++
	l.checkedAlloc += len(allocs)
	for _, d := range dups {
		l.duplicates[d] = true
	}
	for id, want := range before {
		if _, still := l.live[id]; !still {
			continue
		}
		got, ok := held[id]
		switch {
		case !ok:
			l.lost[fmt.Sprintf("%s (%s) acknowledged %v, no longer allocated", id, node, want)] = true
		case !slices.Equal(got, want):
			l.lost[fmt.Sprintf("%s (%s) acknowledged %v, holds %v", id, node, want, got)] = true
		}
	}
}

// liveIDs are the live container IDs of node, for a GC's valid attachments.
func (l *ledger) liveIDs(node string) []string {
	var ids []string
	for id := range l.snapshot(node) {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// outages measures how long a daemon gives no service after a kill: from the kill until an
// ADD that started after it succeeds on that daemon.
type outages struct {
	mu      sync.Mutex
	open    map[string]time.Time
	longest time.Duration
	n       int
}

func newOutages() *outages { return &outages{open: map[string]time.Time{}} }

// down: who was killed at at (an outage already open keeps its start).
func (o *outages) down(who string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.open[who]; !ok {
		o.open[who] = at
	}
}

// served: an ADD on who that started at began succeeded at end.
func (o *outages) served(who string, began, end time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t0, ok := o.open[who]; ok && began.After(t0) {
		o.longest = max(o.longest, end.Sub(t0))
		o.n++
		delete(o.open, who)
	}
}

// figures are one scenario's results, printed as a column of the table.
type figures struct {
	name       string
	duration   time.Duration
	workers    int
	adds, dels int
	abandoned  int
	addFail    map[string]int
	delFail    map[string]int
	kills      map[string]int
	restarts   map[string]int
	crashes    int
	dupAddrs   int
	dupBlocks  int
	lost       int
	leaks      int
	gcFreed    int
	p50, p99   time.Duration
	maxADD     time.Duration
	outage     time.Duration
	failover   time.Duration // longest time from killing the operator leader to a new leader
	apiOutage  time.Duration // longest kube-apiserver or etcd restart
	checks     int
	finalAlloc int
}

var (
	figMu   sync.Mutex
	figList []*figures
)

func report(f *figures) {
	figMu.Lock()
	defer figMu.Unlock()
	figList = append(figList, f)
}

// fill copies the ledger's and outages' counts into f.
func (f *figures) fill(l *ledger, o *outages) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f.adds, f.dels, f.abandoned = l.adds, l.dels, l.abandoned
	f.addFail, f.delFail = maps(l.addFailures), maps(l.delFailures)
	f.dupAddrs, f.lost = len(l.duplicates), len(l.lost)
	f.checks = l.checks
	lat := slices.Clone(l.latencies)
	slices.Sort(lat)
	f.p50, f.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	if len(lat) > 0 {
		f.maxADD = lat[len(lat)-1]
	}
	o.mu.Lock()
	f.outage = o.longest
	o.mu.Unlock()
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// breakdown is "12 (agent 8, operator leader 4)".
func breakdown(m map[string]int) string {
	n := sum(m)
	if len(m) <= 1 {
		return fmt.Sprint(n)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// printFigures prints one column per scenario that ran.
func printFigures(w io.Writer) {
	figMu.Lock()
	defer figMu.Unlock()
	if len(figList) == 0 {
		return
	}
	slices.SortFunc(figList, func(a, b *figures) int { return strings.Compare(b.name, a.name) }) // standalone, cluster
	rows := []benchutil.Row[*figures]{
		{Name: "chaos time", Value: func(f *figures) string { return f.duration.Round(time.Second).String() }},
		{Name: "workers (allot-cni execs)", Value: func(f *figures) string { return fmt.Sprint(f.workers) }},
		{Name: "ADDs acknowledged", Value: func(f *figures) string { return fmt.Sprint(f.adds) }},
		{Name: "DELs acknowledged", Value: func(f *figures) string { return fmt.Sprint(f.dels) }},
		{Name: "ADDs failed (retried)", Value: func(f *figures) string { return breakdown(f.addFail) }},
		{Name: "failed ADDs left without DEL", Value: func(f *figures) string { return fmt.Sprint(f.abandoned) }},
		{Name: "DELs failed (retried)", Value: func(f *figures) string { return breakdown(f.delFail) }},
		{Name: "kills (SIGKILL)", Value: func(f *figures) string { return breakdown(f.kills) }},
		{Name: "restarts", Value: func(f *figures) string { return breakdown(f.restarts) }},
		{Name: "crashes (exits not caused)", Value: func(f *figures) string { return fmt.Sprint(f.crashes) }},
		{Name: "duplicate addresses", Value: func(f *figures) string { return fmt.Sprint(f.dupAddrs) }},
		{Name: "blocks on two nodes", Value: func(f *figures) string {
			if f.name == "standalone" {
				return "-"
			}
			return fmt.Sprint(f.dupBlocks)
		}},
		{Name: "acknowledged ADDs lost", Value: func(f *figures) string { return fmt.Sprint(f.lost) }},
		{Name: "invariant checks", Value: func(f *figures) string { return fmt.Sprint(f.checks) }},
		{Name: "freed by the final GC", Value: func(f *figures) string { return fmt.Sprint(f.gcFreed) }},
		{Name: "leaks after the final GC", Value: func(f *figures) string { return fmt.Sprint(f.leaks) }},
		{Name: "ADD latency p50", Value: func(f *figures) string { return ms(f.p50) }},
		{Name: "ADD latency p99", Value: func(f *figures) string { return ms(f.p99) }},
		{Name: "ADD latency max", Value: func(f *figures) string { return ms(f.maxADD) }},
		{Name: "longest without service after a kill", Value: func(f *figures) string { return ms(f.outage) }},
		{Name: "longest leader failover", Value: func(f *figures) string { return ms(f.failover) }},
		{Name: "longest API server / etcd restart", Value: func(f *figures) string { return ms(f.apiOutage) }},
	}
	fmt.Fprintln(w)
	benchutil.Columns(w, "SOAK", figList, func(f *figures) string { return f.name }, rows)
	fmt.Fprintln(w)
}
