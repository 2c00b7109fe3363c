package daemon

import (
	"os"
	"runtime/debug"
)

// tuneGC makes the collector less eager unless the operator set GOGC or GOMEMLIMIT. allotd's
// live heap is a few MiB, so the default GOGC=100 collects every few MiB of allocation, and
// per-request garbage (HTTP, JSON, the store's transaction) made the collector a quarter of
// the CPU per allocation under load (BenchmarkAPIAllocate: 258 -> 183 µs of CPU per request
// at GOGC=400). The memory limit keeps a burst from growing the heap without bound.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(512 << 20)
	}
}
