package store_test

// Damaged store files against the rule that matters: never hand out an address that a
// record still readable in the file holds. Each case damages a copy of a populated
// store (bytes flipped, the file truncated, or both), then:
//
//   - Open, List and the ipam manager's rebuild must fail cleanly (an error, never a
//     panic), or succeed and then allocate, through ipam, only addresses that no
//     readable record holds;
//   - salvage (what `allotd store salvage` and an agent's rebuild do) must not panic,
//     and the salvaged store obeys the same rule.
//
// A record is readable when its stored bytes are still intact somewhere in the file.
// The populated store is written with Puts only, so any intact copy of a record (even on
// a free page) is of a record that is live: a stricter oracle than "what bbolt can
// reach", and independent of the code under test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/addrset"
	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/plugins/policy/static"
	"github.com/allot-ipam/allot/sdk/policy"
	bolt "go.etcd.io/bbolt"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const corruptPool = "10.77.0.0/23" // 510 usable addresses; the store holds 400 of them

// pristine is a populated store file and, per record, its stored value and address.
type pristine struct {
	data   []byte
	values map[string][]byte     // owner -> stored value
	addrs  map[string]netip.Addr // owner -> address
}

var (
	pristineOnce sync.Once
	pristineFile pristine
	pristineErr  error
)

func getPristine(t testing.TB) pristine {
	pristineOnce.Do(func() { pristineFile, pristineErr = buildPristine() })
	if pristineErr != nil {
		t.Fatal(pristineErr)
	}
	return pristineFile
}

func buildPristine() (pristine, error) {
	dir, err := os.MkdirTemp("", "allot-corrupt-")
	if err != nil {
		return pristine{}, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "allot.db")
	ctx := context.Background()
	s, err := store.Open(ctx, path, store.Options{NoSync: true})
	if err != nil {
		return pristine{}, err
	}
	base := netip.MustParsePrefix(corruptPool).Addr()
	// Several commits of different sizes: a tree of a few levels, free pages with
	// older copies of leaves, and records spread over many pages.
	a := base.Next().Next() // .1 is the gateway
	for i := range 400 {
		r := store.Record{
			Owner:     store.Owner{ContainerID: fmt.Sprintf("%064x", i*7919), IfName: "eth0"},
			Network:   "net",
			Pod:       store.Pod{Namespace: "ns", Name: fmt.Sprintf("pod-%d", i), UID: fmt.Sprintf("uid-%d", i)},
			Addresses: []store.Address{{Pool: "v4", Prefix: netip.PrefixFrom(a, 23), Gateway: base.Next()}},
			Created:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second),
		}
		a = a.Next()
		if err := s.Put(ctx, r); err != nil {
			return pristine{}, err
		}
	}
	if err := s.Close(); err != nil {
		return pristine{}, err
	}
	p := pristine{values: map[string][]byte{}, addrs: map[string]netip.Addr{}}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		return pristine{}, err
	}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("records")).ForEach(func(k, v []byte) error {
			p.values[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	_ = db.Close()
	if err != nil {
		return pristine{}, err
	}
	s, err = store.Open(ctx, path, store.Options{NoSync: true})
	if err != nil {
		return pristine{}, err
	}
	recs, err := s.List(ctx)
	_ = s.Close()
	if err != nil {
		return pristine{}, err
	}
	for _, r := range recs {
		p.addrs[keyOf(r.Owner)] = r.Addresses[0].Prefix.Addr()
	}
	p.data, err = os.ReadFile(path)
	return p, err
}

func keyOf(o store.Owner) string { return o.ContainerID + "\x00" + o.IfName }

// held returns the addresses of the records whose stored bytes are intact in data.
func (p pristine) held(data []byte) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for k, v := range p.values {
		if bytes.Contains(data, v) {
			out[p.addrs[k]] = k
		}
	}
	return out
}

type outcome struct{ refused, listFailed, served, salvaged int }

// checkDamaged runs one damaged file through Open+ipam and through salvage.
func checkDamaged(t testing.TB, dir string, p pristine, data []byte, out *outcome) {
	held := p.held(data)
	path := filepath.Join(dir, "allot.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := store.Open(ctx, path, store.Options{NoSync: true, LockTimeout: time.Second})
	switch {
	case err != nil:
		if !errors.Is(err, store.ErrUnusable) {
			t.Fatalf("Open of a damaged file = %v, want ErrUnusable", err)
		}
		out.refused++
	default:
		if allocateAll(t, s, held, "the damaged file itself") {
			out.served++
		} else {
			out.listFailed++
		}
		_ = s.Close()
	}

	salvaged := filepath.Join(dir, "salvaged.db")
	_ = os.Remove(salvaged)
	rep, err := store.Salvage(ctx, path, salvaged, store.InspectOptions{LockTimeout: time.Second, NoSync: true})
	if err != nil {
		t.Fatalf("Salvage: %v", err)
	}
	s, err = store.Open(ctx, salvaged, store.Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open of the salvaged file: %v", err)
	}
	if !allocateAll(t, s, held, fmt.Sprintf("the salvaged file (%d records read, %d recovered, lost %v)", len(rep.Records), len(rep.Recovered), rep.Lost)) {
		t.Fatal("the salvaged file does not List")
	}
	_ = s.Close()
	out.salvaged++
}

// allocateAll rebuilds an ipam manager from s and allocates until the pool is
// exhausted, failing if any address handed out is one a readable record holds. It
// reports false if the manager refused to start (a record List could not decode).
func allocateAll(t testing.TB, s *store.Store, held map[netip.Addr]string, what string) bool {
	t.Helper()
	pfx := netip.MustParsePrefix(corruptPool)
	// Only a few addresses beyond the records' are free, so exhausting the pool hands
	// out those and every address a lost record leaves: the ones that matter.
	spare := pfx.Addr()
	for range 2 + 400 + 8 {
		spare = spare.Next()
	}
	pol := static.New()
	m, err := ipam.New(context.Background(), ipam.Options{
		Pools: []ipam.PoolSpec{{Allocator: allocator.Config{Name: "v4", CIDRs: []netip.Prefix{pfx}, Gateway: pfx.Addr().Next(),
			Exclude: []addrset.Range{{From: spare, To: netip.MustParseAddr("10.77.1.254")}}}, Default: true}},
		Store:  s,
		Logger: quiet,
		Policy: func(string) policy.PoolPolicy { return pol },
	})
	if err != nil {
		if !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("ipam.New on %s = %v, want ErrCorrupt", what, err)
		}
		return false
	}
	for i := 0; ; i++ {
		a, err := m.Allocate(context.Background(), &api.AllocateRequest{Owner: api.Owner{ContainerID: fmt.Sprintf("new-%d", i), IfName: "eth0"}, Network: "net"})
		if err != nil {
			if api.CodeOf(err) != api.CodeExhausted {
				t.Fatalf("Allocate on %s: %v", what, err)
			}
			return true
		}
		got := netip.MustParsePrefix(a.IPs[0].Address).Addr()
		if owner, ok := held[got]; ok {
			t.Fatalf("%s: handed out %s, which the readable record of %q holds", what, got, owner)
		}
	}
}

// damage applies n random mutations: byte flips, page-sized scribbles, a truncation.
func damage(rng *rand.Rand, data []byte) []byte {
	d := bytes.Clone(data)
	switch rng.IntN(4) {
	case 0: // a few flipped bytes anywhere
		for range 1 + rng.IntN(8) {
			d[rng.IntN(len(d))] ^= byte(1 + rng.IntN(255))
		}
	case 1: // truncation at any offset
		d = d[:rng.IntN(len(d))]
	case 2: // a run of garbage, as a torn or misdirected write leaves
		off, n := rng.IntN(len(d)), 1+rng.IntN(512)
		for i := off; i < min(off+n, len(d)); i++ {
			d[i] = byte(rng.Uint32())
		}
	default: // flips, then a truncation at a page boundary
		for range 1 + rng.IntN(4) {
			d[rng.IntN(len(d))] ^= byte(1 + rng.IntN(255))
		}
		d = d[:4096*rng.IntN(len(d)/4096+1)]
	}
	return d
}

// TestDamagedStoreFiles runs a few hundred damaged copies (deterministic seed).
func TestDamagedStoreFiles(t *testing.T) {
	p := getPristine(t)
	cases := 400
	if testing.Short() || raceEnabled {
		// The race detector makes each case about ten times slower; -race runs
		// (CI's) still cover a hundred.
		cases = 100
	}
	rng := rand.New(rand.NewPCG(20260101, 7))
	dir := t.TempDir()
	var out outcome
	for i := range cases {
		data := damage(rng, p.data)
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkDamaged(t, dir, p, data, &out) })
	}
	t.Logf("%d damaged files: %d refused at Open, %d refused at List, %d opened and served, %d salvaged; none handed out a readable record's address",
		cases, out.refused, out.listFailed, out.served, out.salvaged)
}

// FuzzStoreFile damages the populated store as the input says: the first two bytes
// (big endian, in units of 16 bytes) truncate the file unless zero, then each group of
// three bytes is a position (two bytes, a fraction of the file's length in 1/65536ths)
// and a byte to XOR there.
func FuzzStoreFile(f *testing.F) {
	f.Add([]byte{0, 0})
	f.Add([]byte{0, 3, 0, 0, 0})
	f.Add([]byte{0, 0, 0x10, 0x00, 0xff})
	f.Add([]byte{0, 0, 0x00, 0x04, 0x01, 0x04, 0x05, 0x80})
	f.Add([]byte{0x01, 0x00, 0x22, 0x22, 0x22})
	f.Fuzz(func(t *testing.T, in []byte) {
		p := getPristine(t)
		d := bytes.Clone(p.data)
		if len(in) >= 2 {
			if cut := (int(in[0])<<8 | int(in[1])) * 16; cut > 0 && cut < len(d) {
				d = d[:cut]
			}
			in = in[2:]
		}
		for ; len(in) >= 3 && len(d) > 0; in = in[3:] {
			off := (int(in[0])<<8 | int(in[1])) * len(p.data) / 65536
			if off < len(d) {
				d[off] ^= in[2]
			}
		}
		checkDamaged(t, t.TempDir(), p, d, &outcome{})
	})
}
