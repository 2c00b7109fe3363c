package topo

import (
	"testing"

	"github.com/allot-ipam/allot/internal/testenv"
)

// Require ends a test that builds a topology when it cannot run: a skip under -short, as
// namespaces are slow to build, and internal/testenv's rule when the process lacks the
// privileges (a failure under CI and make test, a skip elsewhere).
func Require(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("short mode: builds network namespaces")
	}
	if why := CheckPrivileges(); why != "" {
		testenv.Missing(tb, why)
	}
}
