package pluginrpc

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
)

// Pool references: a PodRequest carries every pool view the host knows, and from one call to
// the next only their free counts move, so the plugin keeps the views it has decoded and the
// host sends, for a view the plugin holds, a reference and the free count instead of the
// record (a 20-pool request shrinks from ~1.9 KB to ~0.3 KB, and the plugin decodes no pool).
// It is the WASM transport's pool references (sdk/ABI.md) made safe for concurrent calls on
// one connection, where the order in which the plugin handles requests is not the order in
// which the host sent them:
//
//   - Records are named by content, not position: the host gives each distinct record (its
//     bytes after the leading free count, see wire.AppendPodRequest) an id, never reused for
//     other bytes, and writes the id (PodRequest field 1001, varint) before the record
//     (field 5) until the plugin has confirmed it.
//   - The plugin confirms by answering with PodDecision field 1000 (varint 1): it stored every
//     id of the request before answering, so any request the host sends after that answer
//     may refer to them. References go in runs (PodRequest field 1002, length-delimited:
//     pairs of varints id, free), in position order with the full records.
//   - The host tells the plugin which ids it will not use again (field 1003, packed varints).
//     A reference the plugin does not hold (a request overtaken by another's forget list)
//     gets a POOL_REF_UNKNOWN error: the host forgets what it believed the plugin holds and
//     sends the request again in full, once.
//
// Compatibility: none of these fields is in policy.proto. A plugin built with an earlier SDK
// skips fields 1001 and 1003 as unknown and never confirms, so after its first successful
// answer the host stops sending ids; an earlier host never sends them. The messages and the
// contract version are unchanged.
const (
	fReqPoolID    = 1001
	fReqPoolRefs  = 1002
	fReqPoolForg  = 1003
	fDecPoolsHeld = 1000
	fPoolRecord   = 5 // PodRequest.pools
	fPoolFree     = 6 // PoolView.free, written first by wire.AppendPodRequest
)

// errPoolRefUnknown: the plugin was sent a reference to a pool record it does not hold.
var errPoolRefUnknown = fmt.Errorf("%w: pool reference unknown to the plugin", wire.ErrInvalid)

// Pool-reference support of the plugin, as the host has learnt it.
const (
	refsUnknown = iota // no call has told yet
	refsOn
	refsOff // an answer without confirmation: a plugin built with an earlier SDK
)

// hostPools is the host's side: the ids it has given and which of them the plugin confirmed.
type hostPools struct {
	mu      sync.Mutex
	state   int
	entries map[string]*hostPool // by record bytes after the free count
	nextID  uint64
	seq     uint64     // requests encoded so far
	forget  []uint64   // ids to tell the plugin to drop, sent with the next request
	last    []lastPool // the previous request's pools
}

type hostPool struct {
	id        uint64
	confirmed bool
	dropped   bool   // forgotten: never to be referred to again
	used      uint64 // seq of the last request carrying it
}

// lastPool is a pool of the previous request, by position, and its entry.
type lastPool struct {
	view wire.PoolSnapshot
	e    *hostPool
}

// hostPoolsKeep bounds the host's table: above it (or twice the pools of a request, if
// more), records that no request carried for hostPoolsAge requests are forgotten.
const (
	hostPoolsKeep = 256
	hostPoolsAge  = 64
)

// sent is what one encoded request defined, to be confirmed by its answer.
type sent struct {
	defined []*hostPool
	ids     bool // the request carried ids (a confirmation, or its absence, means something)
}

// encode appends req with pool references: the pools the plugin confirmed holding as
// references, the others in full with their ids. A pool equal (free count aside) to the one
// the previous request had at its position is not even encoded: its record is known.
func (h *hostPools) encode(dst []byte, req *policy.PodRequest) ([]byte, sent, error) {
	head := *req
	head.Pools = nil
	dst, err := wire.AppendPodRequest(dst, &head)
	if err != nil {
		return nil, sent{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == refsOff {
		for i := range req.Pools {
			if dst, err = wire.AppendPoolRecord(dst, &req.Pools[i]); err != nil {
				return nil, sent{}, err
			}
		}
		return dst, sent{}, nil
	}
	if h.entries == nil {
		h.entries = make(map[string]*hostPool)
	}
	h.seq++
	var s sent
	var runBuf [256]byte
	run := runBuf[:0]
	for i := range req.Pools {
		p := &req.Pools[i]
		e := h.known(i, p)
		if e == nil {
			// Encode the record and find it by its bytes after the free count.
			dst = flushRun(dst, run)
			run = run[:0]
			start := len(dst)
			if dst, err = wire.AppendPoolRecord(dst, p); err != nil {
				return nil, sent{}, err
			}
			_, rest := splitFree(dst[start+1:]) // after the one-byte tag of field 5
			e = h.entry(rest)
			h.remember(i, p, e)
			if !e.confirmed {
				rec := append(runBuf[:0:0], dst[start:]...)
				dst = protowire.AppendVarint(protowire.AppendTag(dst[:start], fReqPoolID, protowire.VarintType), e.id)
				dst = append(dst, rec...)
				s.defined = append(s.defined, e)
				continue
			}
			dst = dst[:start]
		}
		e.used = h.seq
		run = protowire.AppendVarint(protowire.AppendVarint(run, e.id), p.Free)
	}
	dst = flushRun(dst, run)
	if len(h.last) > len(req.Pools) {
		clear(h.last[len(req.Pools):])
		h.last = h.last[:len(req.Pools)]
	}
	s.ids = len(s.defined) > 0
	return h.appendForget(dst, len(req.Pools)), s, nil
}

// known returns the confirmed entry of the pool the previous request had at position i, if
// p equals it (free count aside).
func (h *hostPools) known(i int, p *policy.PoolView) *hostPool {
	if i >= len(h.last) {
		return nil
	}
	l := &h.last[i]
	if l.e == nil || !l.e.confirmed || l.e.dropped || !l.view.Same(p) {
		return nil
	}
	return l.e
}

// remember keeps a copy of p as the pool at position i (the caller may change its own).
func (h *hostPools) remember(i int, p *policy.PoolView, e *hostPool) {
	for len(h.last) <= i {
		h.last = append(h.last, lastPool{})
	}
	if h.last[i].e == e && h.last[i].view.Same(p) {
		return
	}
	h.last[i] = lastPool{view: wire.SnapshotPool(p), e: e}
}

// entry returns the table entry of a record, creating it with a new id.
func (h *hostPools) entry(rec []byte) *hostPool {
	e := h.entries[string(rec)]
	if e == nil {
		h.nextID++
		e = &hostPool{id: h.nextID}
		h.entries[string(rec)] = e
	}
	e.used = h.seq
	return e
}

// appendForget drops old records from a table grown past its bound and writes the ids
// due to be forgotten.
func (h *hostPools) appendForget(dst []byte, pools int) []byte {
	if len(h.entries) > max(hostPoolsKeep, 2*pools) {
		for k, e := range h.entries {
			if e.used+hostPoolsAge < h.seq {
				e.dropped = true
				delete(h.entries, k)
				h.forget = append(h.forget, e.id)
			}
		}
	}
	if len(h.forget) == 0 {
		return dst
	}
	var body []byte
	for _, id := range h.forget {
		body = protowire.AppendVarint(body, id)
	}
	h.forget = h.forget[:0]
	dst = protowire.AppendTag(dst, fReqPoolForg, protowire.BytesType)
	return protowire.AppendBytes(dst, body)
}

// answered records the outcome of a request: held is whether the plugin confirmed its ids.
func (h *hostPools) answered(s sent, held bool) {
	if !s.ids {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case held:
		h.state = refsOn
		for _, e := range s.defined {
			e.confirmed = true
		}
	case h.state == refsUnknown:
		h.state = refsOff
		h.entries = nil
	}
}

// reset forgets every confirmation: the plugin holds less than the host believed.
func (h *hostPools) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.entries {
		e.confirmed = false
	}
}

func flushRun(dst, run []byte) []byte {
	if len(run) == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, fReqPoolRefs, protowire.BytesType)
	return protowire.AppendBytes(dst, run)
}

// splitFree splits a pool record into its leading free count (absent: 0) and the rest.
func splitFree(rec []byte) (uint64, []byte) {
	v, n := protowire.ConsumeBytes(rec)
	if n < 0 {
		return 0, rec
	}
	rec = v
	if len(rec) > 0 && rec[0] == byte(fPoolFree<<3|protowire.VarintType) {
		if free, m := protowire.ConsumeVarint(rec[1:]); m > 0 {
			return free, rec[1+m:]
		}
	}
	return 0, rec
}

// slot is one position of PodRequest.pools as sent: a full record (the next decoded one,
// with its id, or 0) or a reference.
type slot struct {
	ref  bool
	id   uint64
	free uint64
}

// refsIn is what a request carried about pool references, read by the codec.
type refsIn struct {
	slots  []slot // nil unless the request carried ids or references
	forget []uint64
	ids    bool
}

// scanRefs reads the pool-reference fields of a request (the decoder skipped them) into
// slots' backing array, if it has room. A request without any (from a host built with an
// earlier SDK) leaves refsIn.slots nil.
func scanRefs(b []byte, buf []slot) (refsIn, error) {
	var r refsIn
	var next uint64 // id of the next full record
	plain := 0      // full records before the first id or reference
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return r, protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var u uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			u, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return r, protowire.ParseError(n)
		}
		b = b[n:]
		if r.slots == nil && (num == fReqPoolID || num == fReqPoolRefs) {
			if cap(buf) < plain+1 {
				buf = make([]slot, 0, plain+32)
			}
			r.slots = buf[:plain]
		}
		var err error
		switch {
		case num == fReqPoolID && typ == protowire.VarintType:
			next, r.ids = u, true
		case num == fPoolRecord && typ == protowire.BytesType && r.slots == nil:
			plain++
		case num == fPoolRecord && typ == protowire.BytesType:
			r.slots = append(r.slots, slot{id: next})
			next = 0
		case num == fReqPoolRefs && typ == protowire.BytesType:
			r.slots, err = appendRefs(r.slots, v)
		case num == fReqPoolForg && typ == protowire.BytesType:
			r.forget, err = appendIDs(r.forget, v)
		}
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

// appendRefs appends the references of one run (pairs of varints id, free).
func appendRefs(slots []slot, v []byte) ([]slot, error) {
	for len(v) > 0 {
		id, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return slots, fmt.Errorf("pool references: %v", protowire.ParseError(n))
		}
		free, m := protowire.ConsumeVarint(v[n:])
		if m < 0 {
			return slots, fmt.Errorf("pool references: %v", protowire.ParseError(m))
		}
		v = v[n+m:]
		slots = append(slots, slot{ref: true, id: id, free: free})
	}
	return slots, nil
}

// appendIDs appends packed varint ids.
func appendIDs(ids []uint64, v []byte) ([]uint64, error) {
	for len(v) > 0 {
		id, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return ids, fmt.Errorf("forgotten pools: %v", protowire.ParseError(n))
		}
		v = v[n:]
		ids = append(ids, id)
	}
	return ids, nil
}

func hasRef(slots []slot) bool {
	for _, s := range slots {
		if s.ref {
			return true
		}
	}
	return false
}

// pluginPoolsMax bounds the plugin's table against a host that never says what to forget;
// past it the table starts over (the host then gets POOL_REF_UNKNOWN once and resends).
const pluginPoolsMax = 1 << 14

// pluginPools is the plugin's side: the pool views it holds by id. Views are shared between
// requests: pool views are read-only for policies, by contract.
type pluginPools struct {
	mu    sync.RWMutex
	views map[uint64]*policy.PoolView
}

// resolve builds req.Pools from the slots: decoded records (req.Pools as decoded) in their
// places and held views for references, and stores the records that came with ids.
func (p *pluginPools) resolve(req *policy.PodRequest, r refsIn) error {
	if r.slots == nil && len(r.forget) == 0 {
		return nil
	}
	if r.ids || len(r.forget) > 0 {
		p.store(req.Pools, r)
	}
	if !hasRef(r.slots) {
		return nil
	}
	pools := make([]policy.PoolView, len(r.slots))
	full := req.Pools
	p.mu.RLock()
	defer p.mu.RUnlock()
	for i, s := range r.slots {
		if !s.ref {
			pools[i], full = full[0], full[1:]
			continue
		}
		v := p.views[s.id]
		if v == nil {
			return fmt.Errorf("%w: pools[%d]: id %d", errPoolRefUnknown, i, s.id)
		}
		pools[i] = *v
		pools[i].Free = s.free
	}
	req.Pools = pools
	return nil
}

// store keeps the records that came with ids and drops the forgotten ones.
func (p *pluginPools) store(decoded []policy.PoolView, r refsIn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.views == nil || len(p.views) > pluginPoolsMax {
		p.views = make(map[uint64]*policy.PoolView)
	}
	for _, id := range r.forget {
		delete(p.views, id)
	}
	k := 0
	for _, s := range r.slots {
		if s.ref {
			continue
		}
		if s.id != 0 && p.views[s.id] == nil {
			v := decoded[k]
			p.views[s.id] = &v
		}
		k++
	}
}

// appendHeld appends the confirmation that the request's ids are held.
func appendHeld(b []byte) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, fDecPoolsHeld, protowire.VarintType), 1)
}

// scanHeld reports whether an answer confirms its request's ids.
func scanHeld(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		if num == fDecPoolsHeld && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b[n:])
			return v == 1
		}
		b = b[n+m:]
	}
	return false
}
