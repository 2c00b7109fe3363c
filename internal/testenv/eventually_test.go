package testenv_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/allot-ipam/allot/internal/testenv"
)

// Poll's backoff runs on simulated time: the condition holds on its fourth check, after
// gaps of 5, 10 and 20 ms.
func TestPollBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var calls []time.Duration
		err := testenv.Poll(t.Context(), func() (bool, string) {
			calls = append(calls, time.Since(start))
			return len(calls) == 4, "not yet"
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []time.Duration{0, 5 * time.Millisecond, 15 * time.Millisecond, 35 * time.Millisecond}
		if len(calls) != len(want) {
			t.Fatalf("calls at %v, want %v", calls, want)
		}
		for i := range want {
			if calls[i] != want[i] {
				t.Fatalf("calls at %v, want %v", calls, want)
			}
		}
	})
}

// A condition that never holds ends with the context's error and its last reason; the
// gaps never exceed the cap, so a minute of waiting is a bounded number of checks.
func TestPollTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		n := 0
		err := testenv.Poll(ctx, func() (bool, string) { n++; return false, "still 3 pods" })
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still 3 pods") {
			t.Fatalf("err %v, want the deadline and the last reason", err)
		}
		if n < 290 || n > 310 {
			t.Fatalf("%d checks in a minute, want about 300 (200 ms apart)", n)
		}
	})
}

func TestCondErr(t *testing.T) {
	if ok, why := testenv.CondErr(func() error { return errors.New("no lease") })(); ok || why != "no lease" {
		t.Fatalf("CondErr = %v, %q", ok, why)
	}
	if ok, _ := testenv.Cond(func() bool { return true })(); !ok {
		t.Fatal("Cond(true) = false")
	}
}
