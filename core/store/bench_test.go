package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// benchGoroutines is the number of concurrent writers in the parallel
// benchmarks: about what a node sees when a burst of pods starts.
const benchGoroutines = 32

func benchPut(b *testing.B, opts Options, parallel bool) {
	ctx := context.Background()
	s := openTest(b, filepath.Join(b.TempDir(), "allot.db"), opts)
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		// SetParallelism(p) runs p*GOMAXPROCS goroutines.
		b.SetParallelism(max(1, (benchGoroutines+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n := int(seq.Add(1))
				if err := s.Put(ctx, testRecord(fmt.Sprintf("bench-%08d", n), "eth0", n)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	} else {
		for i := range b.N {
			if err := s.Put(ctx, testRecord(fmt.Sprintf("bench-%08d", i), "eth0", i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(st.AvgBatchSize(), "ops/batch")
	if st.Batches > 0 {
		b.ReportMetric(float64(st.TotalCommit.Microseconds())/float64(st.Batches), "µs/commit")
	}
}

// BenchmarkPutParallel: ~32 concurrent writers, real fsync. Group commit is
// what makes this fast.
func BenchmarkPutParallel(b *testing.B) { benchPut(b, Options{}, true) }

// BenchmarkPutSerial: one writer, real fsync: one commit per Put, the
// latency a lone CNI ADD sees.
func BenchmarkPutSerial(b *testing.B) { benchPut(b, Options{}, false) }

func BenchmarkPutParallelNoSync(b *testing.B) { benchPut(b, Options{NoSync: true}, true) }
func BenchmarkPutSerialNoSync(b *testing.B)   { benchPut(b, Options{NoSync: true}, false) }

// BenchmarkBoltTuning measures the bbolt settings chosen in defaultTuning
// against bbolt's defaults (see doc.go for the figures).
func BenchmarkBoltTuning(b *testing.B) {
	for _, tc := range []struct {
		name string
		t    boltTuning
	}{
		{"array+freelistsync", boltTuning{freelist: bolt.FreelistArrayType}},
		{"map+freelistsync", boltTuning{freelist: bolt.FreelistMapType}},
		{"array+nofreelistsync", boltTuning{freelist: bolt.FreelistArrayType, noFreelistSync: true}},
		{"map+nofreelistsync", boltTuning{freelist: bolt.FreelistMapType, noFreelistSync: true}},
	} {
		b.Run(tc.name+"/serial", func(b *testing.B) { benchPut(b, Options{tuning: &tc.t}, false) })
		b.Run(tc.name+"/parallel", func(b *testing.B) { benchPut(b, Options{tuning: &tc.t}, true) })
	}
}

// BenchmarkList measures the start-up rebuild: decode every record.
func BenchmarkList(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := openTest(b, filepath.Join(b.TempDir(), "allot.db"), Options{NoSync: true})
			for i := range n {
				if err := s.Put(ctx, testRecord(fmt.Sprintf("list-%08d", i), "eth0", i)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := s.List(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeRecord is the per-record cost of List (start-up rebuild).
func BenchmarkDecodeRecord(b *testing.B) {
	key, value, err := encodeRecord(testRecord("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0", 1))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeRecord(key, value); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGroupDelay compares the committer with and without waiting for the writers it
// expects back (commitLoop), under the closed-loop load of 32 writers.
func BenchmarkGroupDelay(b *testing.B) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"wait", 0}, {"nowait", -1}} {
		b.Run(tc.name+"/sync", func(b *testing.B) { benchPut(b, Options{MaxGroupDelay: tc.delay}, true) })
		b.Run(tc.name+"/nosync", func(b *testing.B) { benchPut(b, Options{MaxGroupDelay: tc.delay, NoSync: true}, true) })
	}
}

// BenchmarkOpenCheck measures what the defensive walk adds to Open on a store of 100,000
// records (a node holds a few hundred): Open with the walk, the walk alone, and bbolt's
// own Open, plus bbolt's Tx.Check for comparison.
func BenchmarkOpenCheck(b *testing.B) {
	path := populated(b, 100_000)
	st, _ := os.Stat(path)
	b.Logf("store of 100000 records: %d bytes", st.Size())
	b.Run("Open", func(b *testing.B) {
		for b.Loop() {
			s, err := Open(context.Background(), path, Options{})
			if err != nil {
				b.Fatal(err)
			}
			_ = s.Close()
		}
	})
	b.Run("walk", func(b *testing.B) {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for b.Loop() {
			if rep := inspectOpen(f, path, false); !rep.OK() {
				b.Fatal(rep.Summary())
			}
		}
	})
	opts := &bolt.Options{FreelistType: defaultTuning.freelist, NoFreelistSync: defaultTuning.noFreelistSync}
	b.Run("boltOpen", func(b *testing.B) {
		for b.Loop() {
			db, err := bolt.Open(path, 0o600, opts)
			if err != nil {
				b.Fatal(err)
			}
			_ = db.Close()
		}
	})
	b.Run("boltCheck", func(b *testing.B) {
		db, err := bolt.Open(path, 0o600, opts)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		for b.Loop() {
			_ = db.View(func(tx *bolt.Tx) error {
				for err := range tx.Check() {
					b.Fatal(err)
				}
				return nil
			})
		}
	})
}

// BenchmarkCheckpoint measures one checkpoint of 5,000 records (about what 2 MiB of log
// holds) into a file that grows by as many each time, with container IDs as random as
// a runtime's; the file is not synced, so this is the checkpoint's CPU.
func BenchmarkCheckpoint(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "allot.db"), Options{NoSync: true, checkpointInterval: time.Hour})
	const perCheckpoint = 5000
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		job := ckptJob{entries: overlay{}, seq: s.wal.seq}
		for range perCheckpoint {
			n++
			sum := sha256.Sum256([]byte(strconv.Itoa(n)))
			key, value, err := encodeRecord(testRecord(hex.EncodeToString(sum[:]), "eth0", n))
			if err != nil {
				b.Fatal(err)
			}
			job.entries[ovKey(nil, key)] = ovEntry{value: value}
		}
		s.ckptBusy.Store(true)
		b.StartTimer()
		if err := s.checkpoint(job); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perCheckpoint), "ns/record")
}
