package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The write-ahead log's format (see doc.go for the design).
//
// A segment file starts with a 32-byte header: the magic "allotWAL", the format version
// (uint32), a CRC-32C of the header's other bytes (uint32) and the 16-byte id of the
// bbolt file it belongs to (meta key "wal_id"). Frames follow from offset 32, each at an
// 8-byte boundary. A frame is one group commit: a 24-byte header, then the payload,
// then zero padding to the next 8-byte boundary.
//
//	0  payload length  uint32
//	4  op count        uint32 (at least 1)
//	8  sequence        uint64 (frames are numbered 1, 2, 3, ... across segments)
//	16 payload CRC-32C uint32
//	20 header CRC-32C  uint32, over bytes 0..20
//
// The payload holds the ops in order: a kind byte, the key (uvarint length, bytes) and,
// for a put, the value (uvarint length, bytes). Integers are little-endian.
//
// The header has a checksum of its own so that replay can tell a frame header from
// stale or torn bytes without reading (and checksumming) whatever length the bytes
// claim, and so can look for frames written after a damaged one cheaply.
const (
	walMagic        = "allotWAL"
	walVersion      = 1
	walHeaderSize   = 32
	frameHeaderSize = 24
	walIDSize       = 16
	// maxFramePayload bounds what a frame header may claim (a batch of DefaultMaxBatch
	// records of a few hundred bytes is well under 1 MiB).
	maxFramePayload = 256 << 20
)

// Op kinds in a frame: a put or a delete in the records bucket or the meta bucket.
const (
	walPut        byte = 1
	walDelete     byte = 2
	walMetaPut    byte = 3
	walMetaDelete byte = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// walOp is one decoded op of a frame.
type walOp struct {
	kind       byte
	key, value []byte
}

// walFrame is one decoded frame.
type walFrame struct {
	seq uint64
	ops []walOp
	off int64 // where it starts in its segment
}

// WALError reports a write-ahead log that cannot be replayed: which segment, where in
// it, which frame, and why.
type WALError struct {
	Path   string
	Offset int64
	Seq    uint64 // 0 when the damage is not in a frame
	Reason string
}

func (e *WALError) Error() string {
	if e.Seq == 0 {
		return fmt.Sprintf("write-ahead log %s at offset %d: %s", e.Path, e.Offset, e.Reason)
	}
	return fmt.Sprintf("write-ahead log %s at offset %d (frame %d): %s", e.Path, e.Offset, e.Seq, e.Reason)
}

// walKind is the frame kind of o.
func walKind(o *op) byte {
	switch {
	case o.bucket != nil && o.del:
		return walMetaDelete
	case o.bucket != nil:
		return walMetaPut
	case o.del:
		return walDelete
	}
	return walPut
}

// appendWALHeader appends a segment header for the store id.
func appendWALHeader(b []byte, id [walIDSize]byte) []byte {
	start := len(b)
	b = append(b, walMagic...)
	b = binary.LittleEndian.AppendUint32(b, walVersion)
	b = append(b, 0, 0, 0, 0) // the CRC, below
	b = append(b, id[:]...)
	binary.LittleEndian.PutUint32(b[start+12:], walHeaderCRC(b[start:]))
	return b
}

func walHeaderCRC(h []byte) uint32 {
	c := crc32.Update(0, castagnoli, h[:12])
	return crc32.Update(c, castagnoli, h[16:walHeaderSize])
}

// parseWALHeader checks a segment header and returns the store id it names.
func parseWALHeader(h []byte) ([walIDSize]byte, error) {
	var id [walIDSize]byte
	switch {
	case len(h) < walHeaderSize:
		return id, fmt.Errorf("%d bytes, shorter than a segment header (%d)", len(h), walHeaderSize)
	case string(h[:8]) != walMagic:
		return id, fmt.Errorf("not a write-ahead log segment (magic %q)", h[:8])
	case binary.LittleEndian.Uint32(h[8:]) != walVersion:
		return id, fmt.Errorf("format version %d, this build reads %d", binary.LittleEndian.Uint32(h[8:]), walVersion)
	case binary.LittleEndian.Uint32(h[12:]) != walHeaderCRC(h):
		return id, fmt.Errorf("segment header checksum mismatch")
	}
	copy(id[:], h[16:walHeaderSize])
	return id, nil
}

// appendFrame appends the frame holding batch as sequence seq, padded to 8 bytes.
func appendFrame(b []byte, seq uint64, batch []*op) []byte {
	start := len(b)
	b = append(b, make([]byte, frameHeaderSize)...)
	for _, o := range batch {
		k := walKind(o)
		b = append(b, k)
		b = binary.AppendUvarint(b, uint64(len(o.key)))
		b = append(b, o.key...)
		if k == walPut || k == walMetaPut {
			b = binary.AppendUvarint(b, uint64(len(o.value)))
			b = append(b, o.value...)
		}
	}
	payload := b[start+frameHeaderSize:]
	h := b[start : start+frameHeaderSize]
	binary.LittleEndian.PutUint32(h[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[4:], uint32(len(batch)))
	binary.LittleEndian.PutUint64(h[8:], seq)
	binary.LittleEndian.PutUint32(h[16:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(h[:20], castagnoli))
	for (len(b)-start)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// frameHeader is a frame header whose own checksum matched.
type frameHeader struct {
	length, count uint32
	seq           uint64
	payloadCRC    uint32
}

// size is the frame's length on disk, padding included.
func (h frameHeader) size() int64 { return (frameHeaderSize + int64(h.length) + 7) &^ 7 }

// parseFrameHeader reports whether b starts with a well-formed frame header. It rejects
// zeros (unused space) before computing any checksum.
func parseFrameHeader(b []byte) (frameHeader, bool) {
	if len(b) < frameHeaderSize {
		return frameHeader{}, false
	}
	h := frameHeader{
		length:     binary.LittleEndian.Uint32(b[0:]),
		count:      binary.LittleEndian.Uint32(b[4:]),
		seq:        binary.LittleEndian.Uint64(b[8:]),
		payloadCRC: binary.LittleEndian.Uint32(b[16:]),
	}
	if h.count == 0 || h.seq == 0 || h.length > maxFramePayload {
		return frameHeader{}, false
	}
	if binary.LittleEndian.Uint32(b[20:]) != crc32.Checksum(b[:20], castagnoli) {
		return frameHeader{}, false
	}
	return h, true
}

// frameAt decodes the frame at the start of b. ok is false when there is no whole frame
// with matching checksums there (unused space, stale or torn bytes); err is set when the
// checksums match but the payload does not decode, which only a writer bug or deliberate
// damage can cause.
func frameAt(b []byte) (f walFrame, size int64, ok bool, err error) {
	h, ok := parseFrameHeader(b)
	if !ok || int64(len(b)) < frameHeaderSize+int64(h.length) {
		return walFrame{}, 0, false, nil
	}
	payload := b[frameHeaderSize : frameHeaderSize+int(h.length)]
	if crc32.Checksum(payload, castagnoli) != h.payloadCRC {
		return walFrame{}, 0, false, nil
	}
	ops, err := decodeOps(payload, h.count)
	if err != nil {
		return walFrame{seq: h.seq}, 0, true, err
	}
	return walFrame{seq: h.seq, ops: ops}, h.size(), true, nil
}

// decodeOps decodes count ops that must fill payload exactly. It never panics (FuzzWALFrame).
func decodeOps(payload []byte, count uint32) ([]walOp, error) {
	if count == 0 {
		return nil, fmt.Errorf("no ops")
	}
	if uint64(count) > uint64(len(payload))/2 { // an op takes at least 2 bytes
		return nil, fmt.Errorf("%d ops cannot fit in %d bytes", count, len(payload))
	}
	ops := make([]walOp, 0, count)
	r := payload
	for i := range count {
		if len(r) == 0 {
			return nil, fmt.Errorf("op %d of %d: payload ends", i, count)
		}
		o := walOp{kind: r[0]}
		if o.kind < walPut || o.kind > walMetaDelete {
			return nil, fmt.Errorf("op %d: unknown kind %d", i, o.kind)
		}
		var err error
		if o.key, r, err = lengthPrefixed(r[1:]); err != nil {
			return nil, fmt.Errorf("op %d key: %w", i, err)
		}
		if len(o.key) == 0 {
			return nil, fmt.Errorf("op %d: empty key", i)
		}
		if o.kind == walPut || o.kind == walMetaPut {
			if o.value, r, err = lengthPrefixed(r); err != nil {
				return nil, fmt.Errorf("op %d value: %w", i, err)
			}
		}
		ops = append(ops, o)
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%d bytes after the last op", len(r))
	}
	return ops, nil
}

// lengthPrefixed splits a uvarint length and that many bytes off b.
func lengthPrefixed(b []byte) (v, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, nil, fmt.Errorf("bad length")
	}
	if n > uint64(len(b)-w) {
		return nil, nil, fmt.Errorf("length %d beyond the payload", n)
	}
	return bytes.Clone(b[w : w+int(n)]), b[w+int(n):], nil
}

// segmentScan is what one segment holds: the run of consecutive frames from its start,
// and every other frame found intact after the run ended (stale frames of an earlier
// use of the segment, or frames written after a damaged one).
type segmentScan struct {
	path    string
	run     []walFrame
	end     int64 // where the run ended
	orphans []walFrame
}

// scanSegment reads a segment's frames. The run stops at the first offset without an
// intact frame or whose frame does not follow the one before; from there it searches
// every 8-byte boundary for intact frames (orphans), which replay uses to tell a torn
// tail (nothing newer follows) from damage (a newer frame was written after it).
func scanSegment(path string, data []byte) (segmentScan, error) {
	sc := segmentScan{path: path, end: walHeaderSize}
	off := int64(walHeaderSize)
	for off < int64(len(data)) {
		f, size, ok, err := frameAt(data[off:])
		if err != nil {
			return sc, &WALError{Path: path, Offset: off, Seq: f.seq, Reason: err.Error()}
		}
		if !ok || (len(sc.run) > 0 && f.seq != sc.run[len(sc.run)-1].seq+1) {
			break
		}
		f.off = off
		sc.run = append(sc.run, f)
		off += size
	}
	sc.end = off
	for off < int64(len(data)) {
		f, size, ok, err := frameAt(data[off:])
		if ok && err == nil {
			f.off = off
			sc.orphans = append(sc.orphans, f)
			off += size
			continue
		}
		off += 8
	}
	return sc, nil
}
