package config

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"time"
)

// Cluster configures the Kubernetes modes (agent, operator). Owned by the Kubernetes-mode
// work; standalone mode ignores it.
//
// Zero values are replaced by the defaults of DefaultCluster when the configuration is
// validated, so a file only names what it changes.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig; empty means in-cluster configuration.
	Kubeconfig string `koanf:"kubeconfig"`
	// NodeName is the node this agent serves (agent mode); defaults to $NODE_NAME.
	NodeName string `koanf:"nodeName"`

	// --- agent ---

	// PreAllocation maps a pool name to the number of addresses per family the agent keeps
	// ready on the node beyond those in use (Cilium's ipam-multi-pool-pre-allocation).
	// Pools not listed pre-allocate nothing. Default {default: 8}; as with Cilium's flag, a
	// map given replaces the default one (write `default: 8` in it to keep that entry).
	PreAllocation map[string]int `koanf:"preAllocation"`
	// RequestDebounce is how long the agent gathers changes before writing its AllotNode
	// (Cilium waits 15 s; an event-driven agent can answer demand at once).
	RequestDebounce time.Duration `koanf:"requestDebounce"`
	// PendingTimeout bounds how long a CNI ADD waits for a block when its pool has no free
	// address on the node. Keep it below the CNI plugin's timeout (30 s by default) so the
	// runtime gets a clear error rather than a timeout.
	PendingTimeout time.Duration `koanf:"pendingTimeout"`
	// ReleaseDelay is how long a block must stay unused and not needed before the agent
	// gives it back, so that a pod deleted and recreated does not make the block go and
	// come back.
	ReleaseDelay time.Duration `koanf:"releaseDelay"`
	// ReclaimGrace is how long an allocation's pod must have been gone (and the allocation
	// at least that old) before the agent frees its addresses without a CNI DEL.
	ReclaimGrace time.Duration `koanf:"reclaimGrace"`
	// ReclaimInterval is how often the agent looks for allocations of pods that no longer
	// exist (it also looks when a pod of the node is deleted).
	ReclaimInterval time.Duration `koanf:"reclaimInterval"`
	// Resync is how often the agent rewrites its AllotNode even without a change (a safety
	// net; writes are event-driven).
	Resync time.Duration `koanf:"resync"`

	// --- operator ---

	// LeaderElection configures the operator's Lease.
	LeaderElection LeaderElection `koanf:"leaderElection"`
	// DisableMultiPool turns off the IPPool/AllotNode controller (on by default).
	DisableMultiPool bool `koanf:"disableMultiPool"`
	// ClusterCIDRConfig turns on the controller that writes Node.spec.podCIDRs from
	// ClusterCIDRConfigs (off by default).
	ClusterCIDRConfig bool `koanf:"clusterCIDRConfig"`
	// Workers is the number of concurrent reconciles per operator controller (0: default).
	Workers int `koanf:"workers"`
}

// LeaderElection configures the operator's Lease-based leader election.
type LeaderElection struct {
	// Namespace and Name of the Lease.
	Namespace string `koanf:"namespace"`
	Name      string `koanf:"name"`
	// Identity of this replica; defaults to the host name plus a random suffix.
	Identity      string        `koanf:"identity"`
	LeaseDuration time.Duration `koanf:"leaseDuration"`
	RenewDeadline time.Duration `koanf:"renewDeadline"`
	RetryPeriod   time.Duration `koanf:"retryPeriod"`
}

// DefaultCluster is the cluster section's defaults.
func DefaultCluster() Cluster {
	return Cluster{
		PreAllocation:   map[string]int{"default": 8},
		RequestDebounce: 100 * time.Millisecond,
		PendingTimeout:  25 * time.Second,
		ReleaseDelay:    10 * time.Second,
		ReclaimGrace:    30 * time.Second,
		ReclaimInterval: time.Minute,
		Resync:          5 * time.Minute,
		LeaderElection: LeaderElection{
			Namespace:     "kube-system",
			Name:          "allot-operator",
			LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second,
			RetryPeriod:   2 * time.Second,
		},
	}
}

// dns1123Subdomain is a Kubernetes object name (Node, IPPool, Lease namespace).
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func (cl *Cluster) applyDefaults() {
	d := DefaultCluster()
	if cl.PreAllocation == nil {
		cl.PreAllocation = d.PreAllocation
	}
	for _, f := range []struct{ v, d *time.Duration }{
		{&cl.RequestDebounce, &d.RequestDebounce},
		{&cl.PendingTimeout, &d.PendingTimeout},
		{&cl.ReleaseDelay, &d.ReleaseDelay},
		{&cl.ReclaimGrace, &d.ReclaimGrace},
		{&cl.ReclaimInterval, &d.ReclaimInterval},
		{&cl.Resync, &d.Resync},
		{&cl.LeaderElection.LeaseDuration, &d.LeaderElection.LeaseDuration},
		{&cl.LeaderElection.RenewDeadline, &d.LeaderElection.RenewDeadline},
		{&cl.LeaderElection.RetryPeriod, &d.LeaderElection.RetryPeriod},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if cl.LeaderElection.Namespace == "" {
		cl.LeaderElection.Namespace = d.LeaderElection.Namespace
	}
	if cl.LeaderElection.Name == "" {
		cl.LeaderElection.Name = d.LeaderElection.Name
	}
}

// validateCluster fills the cluster section's defaults and checks it for the agent and
// operator modes. Errors name the field (cluster.xxx).
func (c *Config) validateCluster() []error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("cluster.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	cl := &c.Cluster
	cl.applyDefaults()
	if c.Mode == "agent" && cl.NodeName == "" {
		cl.NodeName = os.Getenv("NODE_NAME")
	}
	if cl.Kubeconfig != "" {
		if _, err := os.Stat(cl.Kubeconfig); err != nil && (c.Mode == "agent" || c.Mode == "operator") {
			add("kubeconfig", "%v", err)
		}
	}
	if c.Mode == "agent" {
		switch {
		case cl.NodeName == "":
			add("nodeName", "must be set in agent mode (or the NODE_NAME environment variable, e.g. from the downward API spec.nodeName)")
		case len(cl.NodeName) > 253 || !dns1123Subdomain.MatchString(cl.NodeName):
			add("nodeName", "%q is not a valid Kubernetes node name", cl.NodeName)
		}
	}
	pools := make([]string, 0, len(cl.PreAllocation))
	for p := range cl.PreAllocation {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	for _, p := range pools {
		f := "preAllocation." + p
		if len(p) > 253 || !dns1123Subdomain.MatchString(p) {
			add(f, "%q is not a valid pool name", p)
		}
		if n := cl.PreAllocation[p]; n < 0 || n > 1<<20 {
			add(f, "%d must be between 0 and 1048576", n)
		}
	}
	positive := []struct {
		field string
		v     time.Duration
		max   time.Duration
	}{
		{"requestDebounce", cl.RequestDebounce, time.Minute},
		{"pendingTimeout", cl.PendingTimeout, 10 * time.Minute},
		{"releaseDelay", cl.ReleaseDelay, 24 * time.Hour},
		{"reclaimGrace", cl.ReclaimGrace, 24 * time.Hour},
		{"reclaimInterval", cl.ReclaimInterval, 24 * time.Hour},
		{"resync", cl.Resync, 24 * time.Hour},
		{"leaderElection.leaseDuration", cl.LeaderElection.LeaseDuration, time.Hour},
		{"leaderElection.renewDeadline", cl.LeaderElection.RenewDeadline, time.Hour},
		{"leaderElection.retryPeriod", cl.LeaderElection.RetryPeriod, time.Hour},
	}
	for _, p := range positive {
		if p.v < 0 || p.v > p.max {
			add(p.field, "%s must be between 0 and %s", p.v, p.max)
		}
	}
	if cl.Workers < 0 || cl.Workers > 256 {
		add("workers", "%d must be between 0 and 256", cl.Workers)
	}
	if c.Mode == "operator" && cl.DisableMultiPool && !cl.ClusterCIDRConfig {
		add("disableMultiPool", "with clusterCIDRConfig off too, the operator has nothing to do")
	}
	le := cl.LeaderElection
	if c.Mode == "operator" {
		if !dns1123Subdomain.MatchString(le.Namespace) {
			add("leaderElection.namespace", "%q is not a valid namespace name", le.Namespace)
		}
		if !dns1123Subdomain.MatchString(le.Name) {
			add("leaderElection.name", "%q is not a valid Lease name", le.Name)
		}
		if le.RenewDeadline >= le.LeaseDuration {
			add("leaderElection.renewDeadline", "%s must be shorter than leaseDuration %s", le.RenewDeadline, le.LeaseDuration)
		}
		if le.RetryPeriod >= le.RenewDeadline {
			add("leaderElection.retryPeriod", "%s must be shorter than renewDeadline %s", le.RetryPeriod, le.RenewDeadline)
		}
	}
	return errs
}
