package process

import (
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/allot-ipam/allot/sdk/pluginrpc"
)

// Defaults for zero Config fields.
const (
	DefaultTimeout        = 5 * time.Second
	DefaultStartTimeout   = 10 * time.Second
	DefaultHealthInterval = 5 * time.Second
	DefaultMinBackoff     = 200 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
)

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("process plugin: invalid config")

// Config describes one process plugin.
type Config struct {
	// Name identifies the plugin instance in allotd's configuration, logs and errors.
	Name string
	// Kind is the contract the plugin must speak.
	Kind pluginrpc.Kind
	// Path is the absolute path of the plugin binary.
	Path string
	// Args are passed to the binary.
	Args []string
	// SHA256 is the hex sha256 of the binary; a binary with another digest is refused.
	SHA256 string
	// Env is added to the plugin's environment ("KEY=value") and wins over allotd's own
	// variables. Unless it sets GOMAXPROCS, the plugin runs with GOMAXPROCS=1 (see env()).
	Env []string
	// CleanEnv starts the plugin with only Env (plus go-plugin's own variables) instead of
	// allotd's environment plus Env. Use it to keep allotd's secrets from plugins.
	CleanEnv bool
	// Timeout bounds each call (on top of the caller's context); a call running past it
	// gets the plugin killed and restarted, within a quarter of Timeout (at most 250 ms)
	// after it passed. Default 5s.
	Timeout time.Duration
	// StartTimeout bounds launching the process and the handshake. Default 10s.
	StartTimeout time.Duration
	// HealthInterval is how often the plugin's gRPC health service is checked. Default 5s.
	HealthInterval time.Duration
	// MinBackoff and MaxBackoff bound the delay between restarts (doubling from Min to Max;
	// back to Min once a process has stayed up for MaxBackoff). Defaults 200ms and 30s.
	MinBackoff, MaxBackoff time.Duration
}

func (c *Config) applyDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Timeout, DefaultTimeout)
	def(&c.StartTimeout, DefaultStartTimeout)
	def(&c.HealthInterval, DefaultHealthInterval)
	def(&c.MinBackoff, DefaultMinBackoff)
	def(&c.MaxBackoff, DefaultMaxBackoff)
}

// Validate checks c; every error wraps ErrInvalidConfig and names the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: plugin %q: %s: %s", ErrInvalidConfig, c.Name, field, fmt.Sprintf(format, args...)))
	}
	if c.Name == "" {
		bad("name", "empty")
	}
	if !c.Kind.Valid() {
		bad("kind", "%q is not one of pool-policy, cloud-backend, datapath", c.Kind)
	}
	if c.Path == "" {
		bad("path", "empty")
	} else if !filepath.IsAbs(c.Path) {
		bad("path", "%q is not absolute", c.Path)
	}
	if b, err := hex.DecodeString(c.SHA256); err != nil || len(b) != 32 {
		bad("sha256", "%q is not 64 hex digits (pin the binary: sha256sum %s)", c.SHA256, c.Path)
	}
	for i, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			bad(fmt.Sprintf("env[%d]", i), "%q is not KEY=value", e)
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"timeout", c.Timeout}, {"start_timeout", c.StartTimeout}, {"health_interval", c.HealthInterval}, {"min_backoff", c.MinBackoff}, {"max_backoff", c.MaxBackoff}} {
		if d.v < 0 {
			bad(d.field, "negative duration %s", d.v)
		}
	}
	if c.MinBackoff > 0 && c.MaxBackoff > 0 && c.MinBackoff > c.MaxBackoff {
		bad("min_backoff", "%s above max_backoff %s", c.MinBackoff, c.MaxBackoff)
	}
	return errors.Join(errs...)
}
