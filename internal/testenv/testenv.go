// Package testenv is the one rule for a test whose environment lacks something it needs
// (root, a program, a kernel feature, prebuilt binaries). Under `go test -short`, the quick
// loop, it skips. Under CI (CI=true) or with ALLOT_NO_SKIP=1 (make test sets it) it fails
// with the reason: there a skip would let a run pass that never ran part of the suite.
// Elsewhere it skips with the reason, so a developer without root still gets the rest.
package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// NoSkipEnv names the variable that makes a missing requirement fail outside CI.
const NoSkipEnv = "ALLOT_NO_SKIP"

// Strict reports whether a test that cannot run must fail: CI or NoSkipEnv set to true.
func Strict() bool {
	return isTrue(os.Getenv("CI")) || isTrue(os.Getenv(NoSkipEnv))
}

func isTrue(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// Missing ends tb because its environment lacks what reason describes: a skip under -short
// or outside Strict, a failure otherwise.
func Missing(tb testing.TB, reason string) {
	tb.Helper()
	if Strict() && !testing.Short() {
		tb.Fatalf("cannot run: %s (CI or %s=1: not skipped)", reason, NoSkipEnv)
	}
	tb.Skip(reason)
}

// Need ends tb with Missing(reason) unless ok.
func Need(tb testing.TB, ok bool, reason string) {
	tb.Helper()
	if !ok {
		Missing(tb, reason)
	}
}

// RequireRoot ends tb with Missing unless the process runs as root; why says what needs it.
func RequireRoot(tb testing.TB, why string) {
	tb.Helper()
	Need(tb, os.Geteuid() == 0, "needs root: "+why)
}

// RequireBinary returns the path of program name on PATH, or ends tb with Missing; from
// says where it comes from (a Debian package, a make target).
func RequireBinary(tb testing.TB, name, from string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(tb, "needs "+name+" on PATH ("+from+")")
	}
	return p
}
