package eni

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Config is the engine's configuration. DefaultConfig gives the documented defaults.
type Config struct {
	// Params are the watermarks for nodes that do not carry their own.
	Params Params
	// FirstInterfaceIndex (spec.eni.first-interface-index): interfaces below this device index
	// are never used for pod addresses nor created. Default 0 (Cilium's default: eth0's
	// secondary addresses are used); 1 keeps eth0 out of it, as Cilium's ENI documentation
	// suggests.
	FirstInterfaceIndex int
	// ExcludeInterfaceTags (Cilium's --exclude-interface-tags): interfaces carrying all of
	// these tags are never used for pod addresses (Selector.ExcludeTags), e.g. ENIs another
	// tool attached for its own traffic.
	ExcludeInterfaceTags map[string]string
	// SubnetIDs and SubnetTags (spec.eni.subnet-ids, spec.eni.subnet-tags) narrow the
	// subnets new interfaces go to. Both set: a subnet must match both.
	SubnetIDs  []string
	SubnetTags map[string]string
	// SecurityGroups (spec.eni.security-groups) for new interfaces; empty lets the backend
	// apply its own rule (AWS: security-group tags, else eth0's groups).
	SecurityGroups []string
	// Description of new interfaces; "%s" is replaced by the node name.
	Description string
	// Tags set on new interfaces, besides allot.io/node = node name.
	Tags map[string]string
	// ClusterName, if set, tags every interface the engine creates with ClusterTag = it, so
	// that the garbage collection (GC) can find the cluster's leaked interfaces (Cilium tags
	// its ENIs io.cilium/cluster-name for the same reason).
	ClusterName string
	// PrefixDelegation (Cilium's --aws-enable-prefix-delegation, the AWS VPC CNI's
	// ENABLE_PREFIX_DELEGATION): each address slot of an interface takes an IPv4 /28 prefix
	// (16 addresses) instead of one address, on instances that can carry prefixes; the
	// watermarks still count addresses. Default false.
	PrefixDelegation bool
	// IPv6PrefixDelegation: every node gets one IPv6 /80 prefix on its first eligible
	// interface, from which its pods take IPv6 addresses (the AWS VPC CNI's IPv6 mode).
	IPv6PrefixDelegation bool
	// DeleteOnTermination (spec.eni.delete-on-termination), default true.
	DeleteOnTermination bool
	// Release enables releasing excess addresses (default true; Cilium's
	// --aws-release-excess-ips defaults to false).
	Release bool
	// ReleaseDelay is how long an address must be excess before it is marked for release
	// (Cilium's excess-ip-release-delay, 180 s).
	ReleaseDelay time.Duration
	// MinPassInterval: at most one pass per this interval (1 s: Cilium handles its allocation
	// queue "at most once per second").
	MinPassInterval time.Duration
	// ResyncInterval: a pass runs at least this often even without a trigger (1 min).
	ResyncInterval time.Duration
	// Workers is how many nodes a pass handles at once (in queue order).
	Workers int
	// MaxStepsPerNode bounds the cloud calls one node gets in one pass, so one node with a
	// huge need cannot starve the others of the client's rate budget.
	MaxStepsPerNode int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Params:              DefaultParams(),
		Description:         "allot: pod addresses of node %s",
		DeleteOnTermination: true,
		Release:             true,
		ReleaseDelay:        180 * time.Second,
		MinPassInterval:     time.Second,
		ResyncInterval:      time.Minute,
		Workers:             16,
		MaxStepsPerNode:     16,
	}
}

// Validate checks cfg; errors name the field.
func (c Config) Validate() error {
	var errs []error
	if err := c.Params.Validate("params"); err != nil {
		errs = append(errs, err)
	}
	if c.FirstInterfaceIndex < 0 {
		errs = append(errs, fmt.Errorf("first-interface-index: %d is negative", c.FirstInterfaceIndex))
	}
	if c.ReleaseDelay < 0 {
		errs = append(errs, fmt.Errorf("release-delay: %s is negative", c.ReleaseDelay))
	}
	if c.MinPassInterval < 0 {
		errs = append(errs, fmt.Errorf("min-pass-interval: %s is negative", c.MinPassInterval))
	}
	if c.ResyncInterval <= 0 {
		errs = append(errs, fmt.Errorf("resync-interval: %s must be positive", c.ResyncInterval))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers: %d must be at least 1", c.Workers))
	}
	if c.MaxStepsPerNode < 1 {
		errs = append(errs, fmt.Errorf("max-steps-per-node: %d must be at least 1", c.MaxStepsPerNode))
	}
	for _, id := range c.SubnetIDs {
		if id == "" {
			errs = append(errs, errors.New("subnet-ids: empty ID"))
		}
	}
	keys := make([]string, 0, len(c.SubnetTags))
	for k := range c.SubnetTags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" {
			errs = append(errs, errors.New("subnet-tags: empty key"))
		}
	}
	if _, ok := c.ExcludeInterfaceTags[""]; ok {
		errs = append(errs, errors.New("exclude-interface-tags: empty key"))
	}
	return errors.Join(errs...)
}

// Validate checks the watermarks; prefix names the enclosing field.
func (p Params) Validate(prefix string) error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"pre-allocate", p.PreAllocate}, {"min-allocate", p.MinAllocate}, {"max-allocate", p.MaxAllocate}, {"max-above-watermark", p.MaxAboveWatermark}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s.%s: %d is negative", prefix, f.name, f.v))
		}
	}
	if p.MaxAllocate > 0 && p.MinAllocate > p.MaxAllocate {
		errs = append(errs, fmt.Errorf("%s.min-allocate: %d is above max-allocate %d", prefix, p.MinAllocate, p.MaxAllocate))
	}
	return errors.Join(errs...)
}
