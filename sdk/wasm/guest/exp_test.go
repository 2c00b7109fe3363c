package guest

import (
	"syscall"
	"testing"
	"time"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkExpCPU(b *testing.B) {
	c0 := cpuNow()
	b.Run("x", BenchmarkHandlePodPools)
	_ = c0
}
