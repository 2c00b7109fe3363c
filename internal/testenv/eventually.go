package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Poll backoff: the first checks come quickly (most conditions hold within milliseconds),
// later ones at most every maxPollGap so a slow condition does not load a shared machine.
const (
	firstPollGap = 5 * time.Millisecond
	maxPollGap   = 200 * time.Millisecond
)

// Eventually waits up to timeout for cond to hold, checking it with a short backoff, and
// fails tb naming what it waited for and cond's last reason otherwise. It is the one wait
// for tests on real processes, kernels and API servers; in-process code with timers is
// tested under testing/synctest instead, where time is simulated and nothing polls.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Poll(ctx, cond); err != nil {
		tb.Fatalf("waited %v for %s: %v", timeout, what, err)
	}
}

// Poll checks cond with a short backoff until it holds (nil) or ctx ends: then the error
// carries cond's last reason. It is Eventually for helpers that return an error.
func Poll(ctx context.Context, cond func() (ok bool, why string)) error {
	gap := firstPollGap
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if why == "" {
				why = "condition false"
			}
			return fmt.Errorf("%w; last: %s", context.Cause(ctx), why)
		case <-time.After(gap):
		}
		gap = min(2*gap, maxPollGap)
	}
}

// Cond adapts a condition without a reason to Eventually and Poll.
func Cond(f func() bool) func() (bool, string) {
	return func() (bool, string) { return f(), "" }
}

// CondErr adapts a condition that reports what is still wrong as an error.
func CondErr(f func() error) func() (bool, string) {
	return func() (bool, string) {
		if err := f(); err != nil {
			return false, err.Error()
		}
		return true, ""
	}
}
