package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api/client"
)

const standaloneWorkers = 8

// TestSoakStandalone: 8 workers exec allot-cni ADD and DEL against allotd while it is
// SIGKILLed every 1-5 s and started again on the same store.
func TestSoakStandalone(t *testing.T) {
	need(t)
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "allotd.sock")
	cfgPath := filepath.Join(dir, "allotd.yaml")
	// fsync on: the store's durability across SIGKILL is part of what is soaked.
	cfg := fmt.Sprintf(`mode: standalone
socket: %s
store: {path: %s}
http: {address: ""}
log: {level: info, format: text}
pools:
  - {name: soak-v4, cidrs: ["10.80.0.0/16"], gateway: 10.80.0.1, default: true}
  - {name: soak-v6, cidrs: ["fd00:80::/64"], gateway: "fd00:80::1", default: true}
`, sock, filepath.Join(dir, "allot.db"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &figures{name: "standalone", duration: env.duration, workers: standaloneWorkers, kills: map[string]int{}, restarts: map[string]int{}}
	var crashMu sync.Mutex
	p := newProc(t, "allotd", env.allotd, filepath.Join(dir, "allotd.log"), "--config", cfgPath)
	p.onCrash = func(p *proc, err error) {
		crashMu.Lock()
		f.crashes++
		crashMu.Unlock()
		t.Errorf("allotd exited by itself: %v\n%s", err, p.tail(30))
	}
	hard, cancelHard := context.WithTimeout(context.Background(), env.duration+settle)
	defer cancelHard()
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if err := serving(hard, sock); err != nil {
		t.Fatalf("allotd does not serve: %v\n%s", err, p.tail(30))
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %s of chaos", seed, env.duration)
	l, o := newLedger(), newOutages()
	tg := network{name: "soak", socket: sock}
	const args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=soak;K8S_POD_NAME=pod"
	ctx, cancel := context.WithTimeout(hard, env.duration)
	defer cancel()
	var wg sync.WaitGroup

	// Chaos: SIGKILL at a random moment 1-5 s after the daemon serves again.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 0))
		for sleep(ctx, between(rng, time.Second, 5*time.Second)) {
			p.kill()
			f.kills["allotd"]++
			o.down("allotd", time.Now())
			if err := p.start(); err != nil {
				t.Error(err)
				return
			}
			f.restarts["allotd"]++
			if err := serving(hard, sock); err != nil {
				t.Errorf("allotd does not serve after restart %d: %v", f.restarts["allotd"], err)
				return
			}
		}
	}()

	// Invariants, every second: the daemon's own list against the ledger.
	cli := client.New(sock)
	defer cli.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sleep(ctx, time.Second) {
			before := l.snapshot("")
			allocs, err := allocations(ctx, cli, tg.name)
			if err != nil {
				continue // killed meanwhile
			}
			l.verify("allotd", before, allocs)
		}
	}()

	for w := range standaloneWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			rt := &runtime{t: t, l: l, o: o, tg: tg, node: "allotd", abandon: func() bool { return rng.IntN(4) == 0 }}
			var mine []string
			for i := 0; ctx.Err() == nil; i++ {
				// Up to 32 containers per worker; below that, ADD a little more often than DEL.
				if n := len(mine); n > 0 && (n >= 32 || rng.IntN(100) < 45) {
					k := rng.IntN(n)
					id := mine[k]
					mine = append(mine[:k], mine[k+1:]...)
					rt.del(hard, id, args)
					continue
				}
				id := fmt.Sprintf("soak-w%d-%d", w, i)
				if rt.add(hard, id, args) {
					mine = append(mine, id)
				}
			}
		}()
	}
	wg.Wait()

	// After the chaos: the daemon serves (the last restart waited for it); GC with the live
	// containers as valid attachments; nothing else may remain.
	if err := serving(hard, sock); err != nil {
		t.Fatalf("allotd does not serve after the chaos: %v", err)
	}
	f.gcFreed, f.leaks, f.finalAlloc = finalGC(t, hard, l, "allotd", tg, cli)
	f.fill(l, o)
	report(f)
	checkLedger(t, l)
	t.Logf("standalone: %d ADDs, %d DELs, %d kills, %d containers live at the end, %d freed by GC, %d leaks",
		f.adds, f.dels, sum(f.kills), f.finalAlloc, f.gcFreed, f.leaks)
	if f.adds == 0 || sum(f.kills) == 0 {
		t.Errorf("the soak did nothing: %d ADDs, %d kills", f.adds, sum(f.kills))
	}
}
