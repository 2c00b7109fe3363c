package store

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary keys and values to the decoder. It must
// never panic, must fail only with a *CorruptError, and whatever it accepts
// must survive an encode/decode round trip unchanged.
func FuzzDecodeRecord(f *testing.F) {
	key, value, err := encodeRecord(testRecord("c1", "eth0", 7))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(key, value)
	f.Add(key, []byte(`{"v":1,"owner":{"container_id":"c1","ifname":"eth0"},"pod":{},"created":"2026-01-01T00:00:00Z"}`))
	f.Add(key, []byte(`{"v":1,"owner":{"container_id":"c1","ifname":"eth0"},"addresses":[{"pool":"p","prefix":"fe80::1%eth0/64"}]}`))
	f.Add(key, []byte(`{"v":1,"owner":{"container_id":"c1","ifname":"eth0"},"created":"9999-12-31T23:59:59-23:59"}`))
	f.Add(key, []byte(`{"v":2}`))
	f.Add(key, []byte(`{"v":1} {}`))
	f.Add([]byte("no-sep"), []byte(`{}`))
	f.Add([]byte("\x00"), []byte(`null`))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := decodeRecord(key, value)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not a CorruptError", err)
			}
			return
		}
		k2, v2, err := encodeRecord(r)
		if err != nil {
			t.Fatalf("decoded record %+v does not encode: %v", r, err)
		}
		if string(k2) != string(key) {
			t.Fatalf("key %q re-encodes as %q", key, k2)
		}
		r2, err := decodeRecord(k2, v2)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !equalRecord(r, r2) {
			t.Fatalf("round trip changed the record: %+v -> %+v", r, r2)
		}
	})
}

// FuzzWALFrame feeds arbitrary bytes to the write-ahead log's readers: as a frame, as a
// frame's payload and as a segment's content. They must never panic; what they accept
// must encode back to the same ops; and a segment's run must number its frames one by
// one.
func FuzzWALFrame(f *testing.F) {
	key, value, err := encodeRecord(testRecord("c1", "eth0", 7))
	if err != nil {
		f.Fatal(err)
	}
	batch := []*op{{key: key, value: value}, {key: key, del: true}, {bucket: metaBucket, key: nodeStateKey, value: []byte(`{}`)}, {bucket: metaBucket, key: nodeStateKey, del: true}}
	frame := appendFrame(nil, 7, batch)
	f.Add(frame)
	f.Add(frame[:len(frame)-9])
	f.Add(append([]byte{4}, frame[frameHeaderSize:]...)) // a payload, its op count first
	f.Add(appendFrame(appendFrame(nil, 1, batch[:1]), 2, batch[1:]))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if fr, size, ok, err := frameAt(data); ok && err == nil {
			if size > int64(len(data))+7 || size%8 != 0 {
				t.Fatalf("frame of %d bytes from %d bytes of input", size, len(data))
			}
			checkOpsRoundTrip(t, fr.ops)
		}
		if len(data) > 0 {
			if ops, err := decodeOps(data[1:], uint32(data[0])); err == nil {
				checkOpsRoundTrip(t, ops)
			}
		}
		sc, err := scanSegment("fuzz", append(appendWALHeader(nil, [walIDSize]byte{1}), data...))
		if err == nil {
			for i := 1; i < len(sc.run); i++ {
				if sc.run[i].seq != sc.run[i-1].seq+1 {
					t.Fatalf("run holds frame %d after %d", sc.run[i].seq, sc.run[i-1].seq)
				}
			}
		}
	})
}

// checkOpsRoundTrip encodes ops in a frame and decodes them back unchanged.
func checkOpsRoundTrip(t *testing.T, ops []walOp) {
	t.Helper()
	batch := make([]*op, len(ops))
	for i, o := range ops {
		batch[i] = &op{key: o.key, value: o.value, del: o.kind == walDelete || o.kind == walMetaDelete}
		if o.kind == walMetaPut || o.kind == walMetaDelete {
			batch[i].bucket = metaBucket
		}
	}
	fr, _, ok, err := frameAt(appendFrame(nil, 1, batch))
	if !ok || err != nil || len(fr.ops) != len(ops) {
		t.Fatalf("%d ops re-encode to a frame that decodes as ok=%v, %v, %d ops", len(ops), ok, err, len(fr.ops))
	}
	for i := range ops {
		if fr.ops[i].kind != ops[i].kind || !bytes.Equal(fr.ops[i].key, ops[i].key) || !bytes.Equal(fr.ops[i].value, ops[i].value) {
			t.Fatalf("op %d round trip: %+v -> %+v", i, ops[i], fr.ops[i])
		}
	}
}
