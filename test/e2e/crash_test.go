package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
)

const crashPools = `
  - {name: crash-v4, cidrs: ["10.97.0.0/16"], gateway: 10.97.0.1, routes: [{dst: 0.0.0.0/0}], default: true}
  - {name: crash-v6, cidrs: ["fd00:97::/64"], gateway: "fd00:97::1", routes: [{dst: "::/0"}], default: true}
`

// ledger is what the storm's callers were told: an acknowledged ADD must survive a crash,
// an acknowledged DEL must stay freed, and a call cut off by the crash may go either way.
type ledger struct {
	mu        sync.Mutex
	acked     map[api.Owner][]string
	released  map[api.Owner]bool
	uncertain map[api.Owner]bool
	adds      int
	dels      int
}

// TestCrashDuringAddStorm SIGKILLs allotd while 16 workers exec allot-cni ADDs (and some
// DELs) against it, and 16 more call its API directly (many more requests in flight, so
// the kill lands inside group commits), restarts it on the same store, and checks that
// every acknowledged address is still held by its owner, every acknowledged DEL stayed
// done, and no address is held twice. Several rounds, each killing at a random moment.
func TestCrashDuringAddStorm(t *testing.T) {
	needDaemon(t)
	const (
		workers = 16
		rounds  = 4
	)
	d := startDaemon(t, crashPools)
	conf := d.netconf("crash", "")
	l := &ledger{acked: map[api.Owner][]string{}, released: map[api.Owner]bool{}, uncertain: map[api.Owner]bool{}}

	for round := range rounds {
		if round > 0 {
			d.start()
			l.verify(t, d, round)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		c := client.New(d.socket)
		for w := range workers {
			wg.Add(2)
			go func() {
				defer wg.Done()
				l.worker(t, conf, round, w, &stop)
			}()
			go func() {
				defer wg.Done()
				l.apiWorker(t, c, round, w, &stop)
			}()
		}
		// Let the storm build up, then kill at a random instant.
		time.Sleep(time.Duration(400+rand.IntN(800)) * time.Millisecond) // sleep: a real process killed at a random instant
		d.kill()
		stop.Store(true)
		wg.Wait()
		c.Close()
		t.Logf("round %d: %d ADDs and %d DELs acknowledged so far, %d cut off by the kill", round, l.adds, l.dels, len(l.uncertain))
	}
	d.start()
	l.verify(t, d, rounds)

	// After all the crashes, ADD for an acknowledged owner still answers the same addresses.
	n := 0
	for owner, want := range l.acked {
		out := execCNI(t, cniCall{Command: "ADD", ContainerID: owner.ContainerID, IfName: owner.IfName, Stdin: conf})
		wantOK(t, out)
		if got := resultAddrs(out.Result); !reflect.DeepEqual(got, want) {
			t.Fatalf("ADD after restart for %s gave %v, acknowledged %v", owner, got, want)
		}
		if n++; n == 10 {
			break
		}
	}
	if l.adds < rounds*workers {
		t.Errorf("only %d ADDs acknowledged in %d rounds: the storm was too thin to mean much", l.adds, rounds)
	}
}

func (l *ledger) worker(t *testing.T, conf []byte, round, w int, stop *atomic.Bool) {
	var mine []api.Owner
	for i := 0; !stop.Load(); i++ {
		// Every fifth call frees one of this worker's earlier allocations.
		if i%5 == 4 && len(mine) > 0 {
			owner := mine[0]
			mine = mine[1:]
			l.mu.Lock()
			delete(l.acked, owner)
			l.uncertain[owner] = true
			l.mu.Unlock()
			out, err := execCNIRaw(cniCall{Command: "DEL", ContainerID: owner.ContainerID, Stdin: conf})
			if !l.settle(t, owner, out, err, func() { l.released[owner] = true; l.dels++ }) {
				return
			}
			continue
		}
		owner := api.Owner{ContainerID: fmt.Sprintf("crash-r%d-w%d-%d", round, w, i), IfName: "eth0"}
		l.mu.Lock()
		l.uncertain[owner] = true
		l.mu.Unlock()
		out, err := execCNIRaw(cniCall{Command: "ADD", ContainerID: owner.ContainerID, Args: k8sArgs, Stdin: conf})
		if !l.settle(t, owner, out, err, func() { l.acked[owner] = resultAddrs(out.Result); l.adds++ }) {
			return
		}
		mine = append(mine, owner)
	}
}

// apiWorker is worker with the Go client instead of exec: ADDs and every fifth call a DEL.
func (l *ledger) apiWorker(t *testing.T, c *client.Client, round, w int, stop *atomic.Bool) {
	var mine []api.Owner
	call := func(owner api.Owner, fn func(context.Context) error, ok func()) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := fn(ctx)
		l.mu.Lock()
		defer l.mu.Unlock()
		var ae *api.Error
		switch {
		case err == nil:
			delete(l.uncertain, owner)
			ok()
			return true
		case errors.As(err, &ae) && ae.Code != api.CodeUnavailable:
			t.Errorf("%s: unexpected API error: %v", owner, err)
			return false
		default:
			return false // the kill cut the call off: it stays uncertain
		}
	}
	for i := 0; !stop.Load(); i++ {
		if i%5 == 4 && len(mine) > 0 {
			owner := mine[0]
			mine = mine[1:]
			l.mu.Lock()
			delete(l.acked, owner)
			l.uncertain[owner] = true
			l.mu.Unlock()
			if !call(owner, func(ctx context.Context) error {
				return c.Release(ctx, &api.ReleaseRequest{Owner: owner})
			}, func() { l.released[owner] = true; l.dels++ }) {
				return
			}
			continue
		}
		owner := api.Owner{ContainerID: fmt.Sprintf("crash-api-r%d-w%d-%d", round, w, i), IfName: "eth0"}
		l.mu.Lock()
		l.uncertain[owner] = true
		l.mu.Unlock()
		var a *api.Allocation
		if !call(owner, func(ctx context.Context) (err error) {
			a, err = c.Allocate(ctx, &api.AllocateRequest{Owner: owner, Network: "crash", Pod: api.PodRef{Namespace: "crash", Name: owner.ContainerID}})
			return err
		}, func() { l.acked[owner] = allocAddrs(*a); l.adds++ }) {
			return
		}
		mine = append(mine, owner)
	}
}

// settle records the outcome of one call; false means the daemon is gone and the worker
// should stop.
func (l *ledger) settle(t *testing.T, owner api.Owner, out cniOut, err error, ok func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
		t.Errorf("%s: %v", owner, err)
		return false
	case out.Err == nil:
		delete(l.uncertain, owner)
		ok()
		return true
	case out.Err.Code == types.ErrTryAgainLater:
		return false // the kill: the call stays uncertain
	default:
		t.Errorf("%s: unexpected CNI error %d: %s", owner, out.Err.Code, out.Err.Error())
		return false
	}
}

func (l *ledger) verify(t *testing.T, d *daemon, round int) {
	t.Helper()
	allocs := d.allocations()
	holder := map[string]api.Owner{}
	for owner, a := range allocs {
		for _, ip := range a.IPs {
			if prev, dup := holder[ip.Address]; dup {
				t.Fatalf("after crash %d: %s held by both %s and %s", round, ip.Address, prev, owner)
			}
			holder[ip.Address] = owner
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for owner, want := range l.acked {
		a, ok := allocs[owner]
		if !ok {
			t.Fatalf("after crash %d: acknowledged %s (%v) lost", round, owner, want)
		}
		if got := allocAddrs(a); !reflect.DeepEqual(got, want) {
			t.Fatalf("after crash %d: %s holds %v, acknowledged %v", round, owner, got, want)
		}
	}
	for owner := range l.released {
		if a, ok := allocs[owner]; ok {
			t.Fatalf("after crash %d: acknowledged DEL of %s undone: holds %v", round, owner, allocAddrs(a))
		}
	}
	// Calls cut off by the kill are now decided one way or the other.
	for owner := range l.uncertain {
		if a, ok := allocs[owner]; ok {
			l.acked[owner] = allocAddrs(a)
		} else {
			l.released[owner] = true
		}
	}
	clear(l.uncertain)
	t.Logf("after crash %d: %d owners hold %d addresses, all acknowledged state intact", round, len(allocs), len(holder))
}
