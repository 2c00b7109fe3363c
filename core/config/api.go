package config

import (
	"fmt"
	"time"
)

// API bounds the work of the local API (admission control): at most MaxInFlight requests
// run at once over every connection; up to MaxQueued more wait, each at most QueueWait, for
// a slot; the rest are refused at once with "allotd busy: N requests in flight, retry"
// (allot-cni: CNI error 11, try again later). The wait is kept well under the CNI timeout so
// a refused runtime still has time to retry.
type API struct {
	MaxInFlight int           `koanf:"maxInFlight"`
	MaxQueued   int           `koanf:"maxQueued"`
	QueueWait   time.Duration `koanf:"queueWait"`
}

// DefaultAPI is the api section's defaults (the same as core/api/server.DefaultLimits).
func DefaultAPI() API {
	return API{MaxInFlight: 128, MaxQueued: 1024, QueueWait: 2 * time.Second}
}

// validateAPI checks the api section; errors name the field.
func (c *Config) validateAPI() []error {
	var errs []error
	a := c.API
	if a.MaxInFlight < 1 || a.MaxInFlight > 1<<16 {
		errs = append(errs, fmt.Errorf("api.maxInFlight: %d must be between 1 and 65536", a.MaxInFlight))
	}
	if a.MaxQueued < 0 || a.MaxQueued > 1<<20 {
		errs = append(errs, fmt.Errorf("api.maxQueued: %d must be between 0 and 1048576", a.MaxQueued))
	}
	// A wait as long as the CNI timeout (30 s by default) would turn a clear refusal back
	// into a timeout.
	if a.QueueWait < 0 || a.QueueWait > 20*time.Second {
		errs = append(errs, fmt.Errorf("api.queueWait: %s must be between 0 and 20s (keep it well under the CNI timeout)", a.QueueWait))
	}
	return errs
}
