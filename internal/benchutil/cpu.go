// Package benchutil has helpers for benchmarks that must stay meaningful on a shared,
// loaded machine: CPU time per operation does not grow when other processes take the CPU,
// where wall-clock time does.
package benchutil

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime returns the user+system CPU time this process has used.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Meter reports "cpu-µs/op" and "ops/s" for the benchmark when stopped.
type Meter struct {
	b     *testing.B
	cpu   time.Duration
	start time.Time
}

// Start begins measuring; call right before the measured loop.
func Start(b *testing.B) *Meter {
	b.ResetTimer()
	return &Meter{b: b, cpu: CPUTime(), start: time.Now()}
}

// Stop ends measuring and reports the metrics under the given unit name for throughput
// (e.g. "allocs/s").
func (m *Meter) Stop(rateUnit string) {
	m.b.StopTimer()
	wall := time.Since(m.start)
	cpu := CPUTime() - m.cpu
	if m.b.N > 0 {
		m.b.ReportMetric(float64(cpu.Microseconds())/float64(m.b.N), "cpu-µs/op")
		m.b.ReportMetric(float64(m.b.N)/wall.Seconds(), rateUnit)
	}
}
