package ebpf

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/allot-ipam/allot/bpf"
	"github.com/allot-ipam/allot/sdk/datapath"
	cebpf "github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Flags of struct ct_val and protocol numbers, as in bpf/snat.c.
const (
	ctFIN     = 0x1
	ctRST     = 0x2
	dirEgress = 0
	dirIngres = 1
	protoTCP  = 6
	protoUDP  = 17
)

// monotonicNow is the clock of bpf_ktime_get_ns (CLOCK_MONOTONIC), in ns.
// It is read for every entry judged: a collector that read it once per
// pass compared fresh timestamps with a stale "now" and deleted live flows.
func monotonicNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("ebpf: CLOCK_MONOTONIC: " + err.Error()) // cannot happen on Linux
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// collector deletes idle flows (both directions together).
type collector struct {
	log *slog.Logger
	ct  *cebpf.Map

	mu       sync.Mutex
	interval time.Duration
	timeouts datapath.Timeouts
	stats    gcStats

	kick chan struct{}
	quit chan struct{}
	done chan struct{}
}

type gcStats struct {
	passes, deleted uint64
	lastEntries     int
	lastDuration    time.Duration
	lastErr         string
}

func startCollector(log *slog.Logger, ct *cebpf.Map) *collector {
	c := &collector{
		log: log, ct: ct,
		interval: datapath.DefaultGCInterval,
		timeouts: datapath.Timeouts{}.Effective(),
		kick:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go c.run()
	return c
}

func (c *collector) configure(interval time.Duration, t datapath.Timeouts) {
	c.mu.Lock()
	changed := c.interval != interval
	c.interval, c.timeouts = interval, t
	c.mu.Unlock()
	if changed {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

func (c *collector) stop() {
	if c == nil {
		return
	}
	close(c.quit)
	<-c.done
}

func (c *collector) snapshot() gcStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *collector) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		interval := c.interval
		c.mu.Unlock()
		t := time.NewTimer(interval)
		select {
		case <-c.quit:
			t.Stop()
			return
		case <-c.kick:
			t.Stop()
			continue
		case <-t.C:
		}
		c.pass()
	}
}

type entry struct {
	k bpf.SnatCtKey
	v bpf.SnatCtVal
}

// reverseKey is the reply-direction key of an egress entry.
func reverseKey(e entry) bpf.SnatCtKey {
	return bpf.SnatCtKey{
		Saddr: e.k.Daddr, Daddr: e.v.Addr,
		Sport: e.k.Dport, Dport: e.v.Port,
		Proto: e.k.Proto, Dir: dirIngres,
	}
}

func (c *collector) timeout(proto uint8, flags uint16) time.Duration {
	c.mu.Lock()
	t := c.timeouts
	c.mu.Unlock()
	switch proto {
	case protoTCP:
		if flags&ctRST != 0 || flags&(ctFIN|ctFIN<<8) == ctFIN|ctFIN<<8 {
			return t.TCPClosed
		}
		return t.TCP
	case protoUDP:
		return t.UDP
	default:
		return t.ICMP
	}
}

// idle reports whether a flow last seen at ts is older than timeout,
// against a clock read now. Timestamps ahead of the clock (written after
// it was read) are never idle.
func idle(ts uint64, timeout time.Duration) bool {
	now := monotonicNow()
	return now > ts && now-ts > uint64(timeout)
}

// combinedFlags folds the reply entry's FIN into bit 8 so that "FIN in
// both directions" is testable on one value; RST from either side counts.
func combinedFlags(eg, rev uint16) uint16 {
	return eg&ctFIN | (rev&ctFIN)<<8 | (eg|rev)&ctRST
}

// pass makes one collection pass.
func (c *collector) pass() {
	start := time.Now()
	var egress []entry
	replies := map[bpf.SnatCtKey]bpf.SnatCtVal{}
	err := c.scan(func(e entry) {
		if e.k.Dir == dirEgress {
			egress = append(egress, e)
		} else {
			replies[e.k] = e.v
		}
	})
	total := len(egress) + len(replies)
	deleted := 0
	for _, eg := range egress {
		rk := reverseKey(eg)
		rv, hasReply := replies[rk]
		delete(replies, rk)
		last := max(eg.v.Ts, rv.Ts)
		if !idle(last, c.timeout(eg.k.Proto, combinedFlags(eg.v.Flags, rv.Flags))) {
			continue
		}
		// The snapshot may be stale: re-read both entries before deleting
		// so a flow that saw a packet since is kept.
		var cur, curRev bpf.SnatCtVal
		if c.ct.Lookup(&eg.k, &cur) != nil {
			continue
		}
		last = cur.Ts
		if hasReply && c.ct.Lookup(&rk, &curRev) == nil {
			last = max(last, curRev.Ts)
		}
		if !idle(last, c.timeout(eg.k.Proto, combinedFlags(cur.Flags, curRev.Flags))) {
			continue
		}
		if c.del(&eg.k) {
			deleted++
		}
		if hasReply && c.del(&rk) {
			deleted++
		}
	}
	// Reply entries whose egress entry is gone (LRU eviction).
	for k, v := range replies {
		if !idle(v.Ts, c.timeout(k.Proto, v.Flags&ctRST)) {
			continue
		}
		var cur bpf.SnatCtVal
		if c.ct.Lookup(&k, &cur) != nil || !idle(cur.Ts, c.timeout(k.Proto, cur.Flags&ctRST)) {
			continue
		}
		if c.del(&k) {
			deleted++
		}
	}
	c.mu.Lock()
	c.stats.passes++
	c.stats.deleted += uint64(deleted)
	c.stats.lastEntries = total
	c.stats.lastDuration = time.Since(start)
	c.stats.lastErr = ""
	if err != nil {
		c.stats.lastErr = err.Error()
	}
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("ebpf: gc iterate", "err", err)
	}
	if deleted > 0 {
		c.log.Debug("ebpf: gc", "entries", total, "deleted", deleted, "took", time.Since(start))
	}
}

// scan reads the whole flow table, in batches of 4096 entries where the
// kernel supports it (one syscall per batch instead of two per entry).
func (c *collector) scan(fn func(entry)) error {
	const batch = 4096
	keys := make([]bpf.SnatCtKey, batch)
	vals := make([]bpf.SnatCtVal, batch)
	var cursor cebpf.MapBatchCursor
	for first := true; ; first = false {
		n, err := c.ct.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			fn(entry{keys[i], vals[i]})
		}
		switch {
		case errors.Is(err, cebpf.ErrKeyNotExist):
			return nil
		case err != nil && first && errors.Is(err, cebpf.ErrNotSupported):
			var e entry
			it := c.ct.Iterate()
			for it.Next(&e.k, &e.v) {
				fn(e)
			}
			return it.Err()
		case err != nil:
			return err
		}
	}
}

func (c *collector) del(k *bpf.SnatCtKey) bool {
	err := c.ct.Delete(k)
	if err != nil && !errors.Is(err, cebpf.ErrKeyNotExist) {
		c.log.Warn("ebpf: gc delete", "err", err)
	}
	return err == nil
}

// clearClosingMarks clears the FIN and RST marks of the TCP entries of an
// adopted flow table. The programs once read the TCP flags from a byte of
// the acknowledgment number, so live flows in a table they filled carry
// such marks at random, and the collector would delete them after 10 s
// idle instead of 6 h. Cleared marks give the flows that really closed in
// the last seconds the established timeout instead (the collector removed
// older ones; LRU eviction still bounds them).
func clearClosingMarks(m *cebpf.Map) (int, error) {
	var k bpf.SnatCtKey
	var v bpf.SnatCtVal
	var marked []bpf.SnatCtKey
	it := m.Iterate()
	for it.Next(&k, &v) {
		if k.Proto == protoTCP && v.Flags&(ctFIN|ctRST) != 0 {
			marked = append(marked, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("iterate flows: %w", err)
	}
	n := 0
	for _, k := range marked {
		// Read again: the programs keep writing the entry meanwhile.
		if m.Lookup(&k, &v) != nil {
			continue
		}
		v.Flags &^= ctFIN | ctRST
		if m.Update(&k, &v, cebpf.UpdateExist) == nil {
			n++
		}
	}
	return n, nil
}
