package store

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

const (
	crashEnvPath  = "ALLOT_STORE_CRASH_PATH"
	crashEnvRound = "ALLOT_STORE_CRASH_ROUND"
)

// crashRecord derives the record for (round, worker, i) so the parent can
// check content without the child telling it.
func crashRecord(round, worker, i int) Record {
	n := uint32(round*1_000_000 + worker*10_000 + i) // unique per record
	r := testRecord(fmt.Sprintf("r%d-w%02d-%05d", round, worker, i), "eth0", 0)
	r.Pod.UID = fmt.Sprintf("uid-%d-%d-%d", round, worker, i)
	r.Addresses[0].Prefix = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}), 8)
	r.Addresses[1].Prefix = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 12: byte(n >> 24), 13: byte(n >> 16), 14: byte(n >> 8), 15: byte(n)}), 64)
	return r
}

// TestMain makes the test binary the child process of TestCrashRecovery when
// the parent sets crashEnvPath: as a test of its own the child would show up
// as a skip in every other run.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnvPath); path != "" {
		crashChild(path)
	}
	os.Exit(m.Run())
}

// crashChild writes records to the store at path from many goroutines until
// killed and prints "P owner" after each acknowledged Put and "D owner" after
// each acknowledged Delete. It never returns.
func crashChild(path string) {
	round, _ := strconv.Atoi(os.Getenv(crashEnvRound))
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	ack := func(kind string, o Owner) {
		// One write(2) per line to a pipe: atomic, so the parent never
		// sees half a line unless the kill lands inside it (then the line
		// has no newline and is ignored).
		mu.Lock()
		defer mu.Unlock()
		_, _ = os.Stdout.WriteString(kind + " " + o.String() + "\n")
	}
	_, _ = os.Stdout.WriteString("READY\n")
	deadline := time.Now().Add(30 * time.Second) // never outlive a lost parent for long
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				r := crashRecord(round, w, i)
				if err := s.Put(ctx, r); err != nil {
					fmt.Printf("ERR put %s: %v\n", r.Owner, err)
					os.Exit(3)
				}
				ack("P", r.Owner)
				if i%4 == 3 {
					if err := s.Delete(ctx, r.Owner); err != nil {
						fmt.Printf("ERR delete %s: %v\n", r.Owner, err)
						os.Exit(3)
					}
					ack("D", r.Owner)
				}
			}
		})
	}
	wg.Wait()
	os.Exit(4) // the parent should have killed us long before
}

// TestCrashRecovery SIGKILLs a writing child process at random moments and
// checks after each kill that every acknowledged Put is present and intact,
// every acknowledged Delete is gone, and the file is consistent.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: kills and restarts a child process several times; run without -short")
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("ALLOT_STORE_CRASH_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (rerun with ALLOT_STORE_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	path := filepath.Join(t.TempDir(), "state", "allot.db")
	ctx := context.Background()

	// Acknowledgements across all rounds.
	acks := newAckLog()
	const rounds = 5
	for round := range rounds {
		delay := time.Duration(50+rng.IntN(400)) * time.Millisecond
		lines := runCrashChild(t, path, round, delay)
		var puts, dels int
		for _, l := range lines {
			kind, owner, ok := strings.Cut(l, " ")
			if !ok || (kind != "P" && kind != "D") {
				t.Fatalf("round %d: unexpected child line %q", round, l)
			}
			cid, ifname, _ := strings.Cut(owner, "/")
			var rd, w, i int
			if _, err := fmt.Sscanf(cid, "r%d-w%d-%d", &rd, &w, &i); err != nil {
				t.Fatalf("round %d: bad owner in child line %q", round, l)
			}
			acks.ack(rd, w, i, Owner{cid, ifname}, kind)
			if kind == "P" {
				puts++
			} else {
				dels++
			}
		}
		t.Logf("round %d: killed after %s, %d puts and %d deletes acknowledged", round, delay, puts, dels)
		if puts == 0 {
			t.Fatalf("round %d: child acknowledged nothing in %s", round, delay)
		}

		s, err := Open(ctx, path, Options{})
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		verifyConsistent(t, s)
		acks.verify(t, s, round)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// runCrashChild starts the child, kills it delay after it is ready and
// returns the complete acknowledgement lines it printed.
func runCrashChild(t *testing.T, path string, round int, delay time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashEnvPath+"="+path, crashEnvRound+"="+strconv.Itoa(round))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lineCh := make(chan string, 1024)
	go func() {
		defer close(lineCh)
		// ReadString keeps a partial last line separate: it comes back
		// with an error and no newline, and is dropped.
		br := bufio.NewReader(out)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			lineCh <- strings.TrimSuffix(l, "\n")
		}
	}()
	select {
	case l, ok := <-lineCh:
		if !ok || l != "READY" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: child did not start: %q", round, l)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("round %d: child not ready after 30s", round)
	}
	// The kill comes delay after the first acknowledgement, not after READY: on a loaded
	// machine the child may not have committed anything yet when a fixed delay runs out,
	// and a round that kills an idle child tests nothing.
	var lines []string
	select {
	case l, ok := <-lineCh:
		if ok && strings.HasPrefix(l, "ERR") {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: child: %s", round, l)
		}
		if ok {
			lines = append(lines, l)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("round %d: child acknowledged nothing in 30s", round)
	}
	timer := time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	for l := range lineCh {
		if strings.HasPrefix(l, "ERR") {
			timer.Stop()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("round %d: child: %s", round, l)
		}
		lines = append(lines, l)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child ended with %v, want killed by SIGKILL", round, err)
	}
	return lines
}

// verifyConsistent runs bbolt's page-level consistency check.
func verifyConsistent(t *testing.T, s *Store) {
	t.Helper()
	if err := s.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("bbolt consistency check: %v", err)
	}
}
