package store

import (
	"bytes"
	"context"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// The overlay holds what the log has and the bbolt file does not yet: the writes since
// the last checkpoint. Reads look in it before the file. There are two: the active one
// takes the committer's writes, and the frozen one is being checkpointed into the file
// (nil when no checkpoint runs). Both are guarded by Store.ovMu; the committer changes
// the active one only after the frame holding the change is synced.

// overlay maps a bucket tag and a key to the latest write of that key.
type overlay map[string]ovEntry

// ovEntry is a put (value) or a delete.
type ovEntry struct {
	value []byte
	del   bool
}

// Bucket tags of overlay keys.
const (
	tagRecords = 'r'
	tagMeta    = 'm'
)

func ovKey(bucket, key []byte) string {
	// One allocation: the conversion of key is only an operand of the concatenation.
	if bucket != nil {
		return string(rune(tagMeta)) + string(key)
	}
	return string(rune(tagRecords)) + string(key)
}

// applyOverlay records batch, which the log now holds, in the active overlay.
func (s *Store) applyOverlay(batch []*op) {
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	for _, o := range batch {
		s.active[ovKey(o.bucket, o.key)] = ovEntry{value: o.value, del: o.del}
	}
}

// lookup returns the overlay's latest write of key in bucket (nil: records), if any.
func (s *Store) lookup(bucket, key []byte) (ovEntry, bool) {
	k := ovKey(bucket, key)
	s.ovMu.RLock()
	defer s.ovMu.RUnlock()
	if e, ok := s.active[k]; ok {
		return e, true
	}
	e, ok := s.frozen[k]
	return e, ok
}

// get returns the value of key in bucket (nil: records) as the log and the file hold it
// together, or nil when there is none.
func (s *Store) get(bucket, key []byte) ([]byte, error) {
	if e, ok := s.lookup(bucket, key); ok {
		if e.del {
			return nil, nil
		}
		return e.value, nil
	}
	var v []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(recordsBucket)
		if bucket != nil {
			b = tx.Bucket(bucket)
		}
		v = bytes.Clone(b.Get(key))
		return nil
	})
	return v, err
}

// ovRecord is one record key's overlay entry, for merging with the file.
type ovRecord struct {
	key []byte
	ovEntry
}

// forEachRecord calls fn for every record, log and file merged, in key order. The
// overlay is copied and the file's read transaction begun under one lock, so both are
// of the same moment (a checkpoint that lands meanwhile changes nothing: what it writes
// to the file is what the copy holds).
func (s *Store) forEachRecord(ctx context.Context, fn func(k, v []byte) error) error {
	s.ovMu.RLock()
	tx, err := s.db.Begin(false)
	var over []ovRecord
	if err == nil {
		over = recordOverlay(s.active, s.frozen)
	}
	s.ovMu.RUnlock()
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	c := tx.Bucket(recordsBucket).Cursor()
	k, v := c.First()
	for k != nil || len(over) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case len(over) == 0 || (k != nil && bytes.Compare(k, over[0].key) < 0):
			err = fn(k, v)
			k, v = c.Next()
		default:
			if k != nil && bytes.Equal(k, over[0].key) {
				k, v = c.Next()
			}
			if !over[0].del {
				err = fn(over[0].key, over[0].value)
			}
			over = over[1:]
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// recordOverlay returns the record entries of the overlays, active over frozen, sorted
// by key.
func recordOverlay(active, frozen overlay) []ovRecord {
	merged := make(map[string]ovEntry, len(active)+len(frozen))
	for _, o := range []overlay{frozen, active} {
		for k, e := range o {
			if k[0] == tagRecords {
				merged[k[1:]] = e
			}
		}
	}
	out := make([]ovRecord, 0, len(merged))
	for k, e := range merged {
		out = append(out, ovRecord{key: []byte(k), ovEntry: e})
	}
	slices.SortFunc(out, func(a, b ovRecord) int { return bytes.Compare(a.key, b.key) })
	return out
}
