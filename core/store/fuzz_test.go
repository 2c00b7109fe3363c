package store

import (
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
