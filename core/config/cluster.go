package config

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

	// IPAM is where the agent's pools come from: "multi-pool" (the default, also written
	// ""): blocks of IPPools in its AllotNode; "kubernetes": the Node's spec.podCIDRs, as
	// Cilium's ipam: kubernetes, whoever assigns them (the operator from ClusterCIDRConfigs,
	// or kube-controller-manager), served as the pool "default". ENI mode (eni.backend) is
	// the third and excludes "kubernetes".
	IPAM string `koanf:"ipam"`

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
	// AutoDirectNodeRoutes installs, on this node, a route to every other node's blocks
	// (AllotNode blocks, or Node.spec.podCIDRs in ClusterCIDRConfig mode) via that node's
	// InternalIP, as Cilium's auto-direct-node-routes does: pod-to-pod traffic between
	// nodes on one L2 segment needs nothing else. Off by default (a cloud's or an overlay's
	// routing may already do it).
	AutoDirectNodeRoutes bool `koanf:"autoDirectNodeRoutes"`

	// --- operator ---

	// LeaderElection configures the operator's Lease.
	LeaderElection LeaderElection `koanf:"leaderElection"`
	// DisableMultiPool turns off the IPPool/AllotNode controller (on by default).
	DisableMultiPool bool `koanf:"disableMultiPool"`
	// AutoCreatePools are IPPools the operator creates when it starts leading, if absent
	// (Cilium's autoCreateCiliumPodIPPools; autopools.go).
	AutoCreatePools []AutoCreatePool `koanf:"autoCreatePools"`
	// ClusterCIDRConfig turns on the controller that writes Node.spec.podCIDRs from
	// ClusterCIDRConfigs (off by default).
	ClusterCIDRConfig bool `koanf:"clusterCIDRConfig"`
	// Workers is the number of concurrent reconciles per operator controller (0: default).
	Workers int `koanf:"workers"`

	// PodCIDRs is the cluster-wide pod CIDR (Google Distributed Cloud's
	// clusterNetwork.pods.cidrBlocks): every ClusterCIDRConfig CIDR of a family listed here
	// must lie inside one of these (the operator refuses and marks the others; they serve no
	// node). A family not listed is unconstrained ("flat" in Google Distributed Cloud's terms,
	// e.g. IPv4 island with IPv6 flat). In island mode these addresses are independent of the
	// node network and need not be routable outside the cluster: an agent adds them to its
	// datapath's non-masquerade destinations (native routing), so pod-to-pod traffic keeps its
	// source and everything leaving the cluster pod CIDR is masqueraded to the node's address.
	PodCIDRs []string `koanf:"podCIDRs"`

	// ENI turns on ENI mode (agent and operator) when eni.backend is set.
	ENI ClusterENI `koanf:"eni"`

	// SharedPools: CNI networks served from shared pools in agent mode (sharedpools.go).
	SharedPools SharedPools `koanf:"sharedPools"`
}

// Values of Cluster.IPAM.
const (
	IPAMMultiPool  = "multi-pool"
	IPAMKubernetes = "kubernetes"
)

// ClusterENI configures ENI mode: the operator's ENI engine hands a cloud backend's
// addresses to nodes (AllotNode spec.ipam.pool) and the agents serve them to pods. Unset
// fields take the defaults of core/eni.DefaultConfig (Cilium's): pre-allocate 8,
// min-allocate 0, max-allocate 0 (no cap), max-above-watermark 0, first interface index 0,
// delete-on-termination true, release true, release delay 180 s, at most one pass per
// second, a pass at least every minute, 16 workers, 16 cloud calls per node and pass.
type ClusterENI struct {
	// Backend names the cloud backend: a built-in one (aws-eni, configured in
	// cloud.backends.aws-eni) or a cloud-backend plugin of plugins. Empty: ENI mode is off.
	Backend string `koanf:"backend"`

	// --- operator: the engine (eni.Config) ---

	PreAllocate       *int `koanf:"preAllocate"`
	MinAllocate       int  `koanf:"minAllocate"`
	MaxAllocate       int  `koanf:"maxAllocate"`
	MaxAboveWatermark int  `koanf:"maxAboveWatermark"`
	// FirstInterfaceIndex: interfaces below it are never used nor created (1 keeps eth0's
	// secondary addresses out).
	FirstInterfaceIndex int               `koanf:"firstInterfaceIndex"`
	SubnetIDs           []string          `koanf:"subnetIDs"`
	SubnetTags          map[string]string `koanf:"subnetTags"`
	SecurityGroups      []string          `koanf:"securityGroups"`
	// ExcludeInterfaceTags: interfaces carrying all of these tags never serve pods (Cilium's
	// --exclude-interface-tags).
	ExcludeInterfaceTags map[string]string `koanf:"excludeInterfaceTags"`
	// ClusterName tags every ENI the operator creates (allot.io/cluster-name) and turns on
	// the garbage collection of the cluster's leaked ENIs: detached ones carrying that tag
	// (and GCTags) for a whole GCInterval (default 5m; negative: off), as Cilium's ENI
	// garbage collection.
	ClusterName string            `koanf:"clusterName"`
	GCInterval  time.Duration     `koanf:"gcInterval"`
	GCTags      map[string]string `koanf:"gcTags"`
	// NodeConfigs are named per-node settings (subnets, security groups) that a node uses
	// when its label NodeConfigLabel names one: the AWS VPC CNI's ENIConfig selected by a
	// node label. A node's own spec.eni fields win over them.
	NodeConfigs map[string]ENINodeConfig `koanf:"nodeConfigs"`
	// NodeConfigLabel is the node label naming a node's entry of NodeConfigs (default
	// allot.io/eni-config; topology.kubernetes.io/zone gives one entry per zone).
	NodeConfigLabel string `koanf:"nodeConfigLabel"`
	// Description of new interfaces ("%s": the node name) and their Tags.
	Description         string            `koanf:"description"`
	Tags                map[string]string `koanf:"tags"`
	DeleteOnTermination *bool             `koanf:"deleteOnTermination"`
	// PrefixDelegation: each address slot of an ENI takes an IPv4 /28 prefix (16 addresses)
	// instead of one address (Cilium's --aws-enable-prefix-delegation, the AWS VPC CNI's
	// ENABLE_PREFIX_DELEGATION); nodes whose instance cannot carry prefixes (not Nitro) or
	// whose subnet has no free /28 get secondary addresses. IPv6PrefixDelegation gives
	// every node one IPv6 /80 from which its pods get IPv6 addresses.
	PrefixDelegation     bool `koanf:"prefixDelegation"`
	IPv6PrefixDelegation bool `koanf:"ipv6PrefixDelegation"`
	// Release excess addresses (through the handshake with the agent), after ReleaseDelay.
	Release         *bool         `koanf:"release"`
	ReleaseDelay    time.Duration `koanf:"releaseDelay"`
	MinPassInterval time.Duration `koanf:"minPassInterval"`
	ResyncInterval  time.Duration `koanf:"resyncInterval"`
	Workers         int           `koanf:"workers"`
	MaxStepsPerNode int           `koanf:"maxStepsPerNode"`

	// --- agent ---

	// Pool is the local pool the node's cloud addresses form (default "default", the pool
	// the cilium-annotations policy picks when a pod names none).
	Pool string `koanf:"pool"`
	// HostRoutes presents addresses to pods as /32 (/128) without gateway instead of with
	// their subnet's prefix length and router.
	HostRoutes bool `koanf:"hostRoutes"`
	// HostRouting sets up the host as the AWS VPC CNI does (core/enihost): a route to each
	// pod's host-side veth, a routing table per secondary ENI and per-pod rules so that a
	// pod's traffic leaves through the ENI holding its address. Default true; false leaves
	// routing to the interface plugin.
	HostRouting *bool `koanf:"hostRouting"`
	// MTU, if set, is the MTU host routing gives the secondary ENIs' links as it brings them
	// up, as the AWS VPC CNI sets AWS_VPC_ENI_MTU on them: the pods' veths carry it (the
	// chart's eni.mtu, 9001), and an ENI link left at 1500 by the OS would cut their
	// packets down. 0 leaves the links as they are.
	MTU int `koanf:"mtu"`
	// NetnsDirs are where the container runtime keeps pods' network namespaces, searched for
	// each pod's veth (default /var/run/netns).
	NetnsDirs []string `koanf:"netnsDirs"`
	// Node is what the agent writes in its AllotNode's spec.eni: the instance (default:
	// from the Node's spec.providerID), its type and zone (default: the Node's labels), and
	// per-node overrides of the operator's settings above.
	Node ENINode `koanf:"node"`
}

// ENINodeConfig is one entry of cluster.eni.nodeConfigs.
type ENINodeConfig struct {
	SubnetIDs         []string          `koanf:"subnetIDs"`
	SubnetTags        map[string]string `koanf:"subnetTags"`
	SecurityGroups    []string          `koanf:"securityGroups"`
	SecurityGroupTags map[string]string `koanf:"securityGroupTags"`
}

// ENINode is the agent's spec.eni.
type ENINode struct {
	InstanceID          string            `koanf:"instanceID"`
	InstanceType        string            `koanf:"instanceType"`
	Zone                string            `koanf:"zone"`
	PreAllocate         *int              `koanf:"preAllocate"`
	MinAllocate         *int              `koanf:"minAllocate"`
	MaxAllocate         *int              `koanf:"maxAllocate"`
	MaxAboveWatermark   *int              `koanf:"maxAboveWatermark"`
	FirstInterfaceIndex *int              `koanf:"firstInterfaceIndex"`
	SubnetIDs           []string          `koanf:"subnetIDs"`
	SubnetTags          map[string]string `koanf:"subnetTags"`
	SecurityGroups      []string          `koanf:"securityGroups"`
	SecurityGroupTags   map[string]string `koanf:"securityGroupTags"`
	// PrefixDelegation and IPv6PrefixDelegation override cluster.eni's for this node.
	PrefixDelegation     *bool `koanf:"prefixDelegation"`
	IPv6PrefixDelegation *bool `koanf:"ipv6PrefixDelegation"`
}

// Enabled reports whether ENI mode is on.
func (e ClusterENI) Enabled() bool { return e.Backend != "" }

// HostRoutingEnabled reports whether the agent sets up ENI host routing (on by default in
// ENI mode).
func (e ClusterENI) HostRoutingEnabled() bool {
	return e.Enabled() && (e.HostRouting == nil || *e.HostRouting)
}

// validateENI checks cluster.eni; errors name the field.
func (c *Config) validateENI() []error {
	e := &c.Cluster.ENI
	if !e.Enabled() {
		return nil
	}
	errs := problems{prefix: "cluster.eni."}
	errs.eniBounds(e)
	errs.eniNodeConfigs(e.NodeConfigs)
	if e.GCInterval > 24*time.Hour {
		errs.add("gcInterval", "%s must be at most 24h (negative turns the garbage collection off)", e.GCInterval)
	}
	if len(e.ClusterName) > 256 {
		errs.add("clusterName", "%d characters: an EC2 tag value has at most 256", len(e.ClusterName))
	}
	for i, d := range e.NetnsDirs {
		if !filepath.IsAbs(d) {
			errs.add(fmt.Sprintf("netnsDirs[%d]", i), "%q is not an absolute path", d)
		}
	}
	errs.eniSelectors(e)
	if e.PrefixDelegation && e.MaxAllocate%16 != 0 {
		errs.add("maxAllocate", "%d is not a multiple of 16: with prefixDelegation a node holds whole /28 prefixes", e.MaxAllocate)
	}
	if e.Pool != "" && (len(e.Pool) > 253 || !dns1123Subdomain.MatchString(e.Pool)) {
		errs.add("pool", "%q is not a valid pool name", e.Pool)
	}
	if e.MTU != 0 {
		if err := ValidateENIMTU(e.MTU, e.ipv6()); err != nil {
			errs.add("mtu", "%v", err)
		}
	}
	if i := slices.IndexFunc(c.Plugins, func(p Plugin) bool { return p.Name == e.Backend }); i >= 0 && c.Plugins[i].Kind != "cloud-backend" {
		errs.add("backend", "plugin %q is a %s, not a cloud-backend", e.Backend, c.Plugins[i].Kind)
	}
	return errs.errs
}

// eniBounds checks the numbers and durations of cluster.eni against their ranges.
func (errs *problems) eniBounds(e *ClusterENI) {
	const maxAddrs = 4096
	ints := []struct {
		field  string
		v      *int
		lo, hi int
	}{
		{"preAllocate", e.PreAllocate, 0, maxAddrs},
		{"minAllocate", &e.MinAllocate, 0, maxAddrs},
		{"maxAllocate", &e.MaxAllocate, 0, maxAddrs},
		{"maxAboveWatermark", &e.MaxAboveWatermark, 0, maxAddrs},
		{"firstInterfaceIndex", &e.FirstInterfaceIndex, 0, 64},
		{"workers", &e.Workers, 0, 1024},
		{"maxStepsPerNode", &e.MaxStepsPerNode, 0, 1024},
		{"node.preAllocate", e.Node.PreAllocate, 0, maxAddrs},
		{"node.minAllocate", e.Node.MinAllocate, 0, maxAddrs},
		{"node.maxAllocate", e.Node.MaxAllocate, 0, maxAddrs},
		{"node.maxAboveWatermark", e.Node.MaxAboveWatermark, 0, maxAddrs},
		{"node.firstInterfaceIndex", e.Node.FirstInterfaceIndex, 0, 64},
	}
	for _, f := range ints {
		if f.v != nil && (*f.v < f.lo || *f.v > f.hi) {
			errs.add(f.field, "%d must be between %d and %d", *f.v, f.lo, f.hi)
		}
	}
	if e.MaxAllocate > 0 && e.MinAllocate > e.MaxAllocate {
		errs.add("minAllocate", "%d is above maxAllocate %d", e.MinAllocate, e.MaxAllocate)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"releaseDelay", e.ReleaseDelay}, {"minPassInterval", e.MinPassInterval}, {"resyncInterval", e.ResyncInterval}} {
		if d.v < 0 || d.v > 24*time.Hour {
			errs.add(d.field, "%s must be between 0 and 24h", d.v)
		}
	}
}

// eniNodeConfigs checks cluster.eni.nodeConfigs, in name order.
func (errs *problems) eniNodeConfigs(configs map[string]ENINodeConfig) {
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		nc := configs[name]
		f := "nodeConfigs." + name
		if name == "" || len(name) > 63 {
			errs.add(f, "the name must be a label value (1 to 63 characters)")
		}
		for i, id := range append(slices.Clone(nc.SubnetIDs), nc.SecurityGroups...) {
			if id == "" {
				errs.add(fmt.Sprintf("%s: ID %d", f, i), "empty")
			}
		}
		for _, m := range []map[string]string{nc.SubnetTags, nc.SecurityGroupTags} {
			if _, ok := m[""]; ok {
				errs.add(f, "empty tag key")
			}
		}
	}
}

// eniSelectors checks the subnet IDs and the tag maps of cluster.eni: none may be empty.
func (errs *problems) eniSelectors(e *ClusterENI) {
	for i, id := range append(slices.Clone(e.SubnetIDs), e.Node.SubnetIDs...) {
		if id == "" {
			errs.add(fmt.Sprintf("subnetIDs[%d]", i), "empty")
		}
	}
	for _, m := range []struct {
		field string
		tags  map[string]string
	}{{"subnetTags", e.SubnetTags}, {"tags", e.Tags}, {"node.subnetTags", e.Node.SubnetTags}, {"excludeInterfaceTags", e.ExcludeInterfaceTags},
		{"node.securityGroupTags", e.Node.SecurityGroupTags}} {
		for k := range m.tags {
			if k == "" {
				errs.add(m.field, "empty key")
			}
		}
	}
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
	errs := problems{prefix: "cluster."}
	cl := &c.Cluster
	cl.applyDefaults()
	if c.Mode == "agent" && cl.NodeName == "" {
		cl.NodeName = os.Getenv("NODE_NAME")
	}
	if cl.Kubeconfig != "" {
		if _, err := os.Stat(cl.Kubeconfig); err != nil && (c.Mode == "agent" || c.Mode == "operator") {
			errs.add("kubeconfig", "%v", err)
		}
	}
	if c.Mode == "agent" {
		errs.nodeName(cl.NodeName)
	}
	errs.preAllocation(cl.PreAllocation)
	errs.clusterDurations(cl)
	if _, err := cl.PodCIDRPrefixes(); err != nil {
		errs.errs = append(errs.errs, err)
	}
	switch cl.IPAM {
	case "", IPAMMultiPool:
	case IPAMKubernetes:
		if cl.ENI.Enabled() {
			errs.add("ipam", "%q cannot be combined with ENI mode (eni.backend %q): the node's addresses come from one or the other", cl.IPAM, cl.ENI.Backend)
		}
	default:
		errs.add("ipam", "%q is not one of %q, %q", cl.IPAM, IPAMMultiPool, IPAMKubernetes)
	}
	errs.errs = append(errs.errs, c.validateENI()...)
	errs.errs = append(errs.errs, c.validateAutoCreatePools()...)
	errs.errs = append(errs.errs, c.validateSharedPools()...)
	errs.errs = append(errs.errs, c.validateSharedPoolsOperator()...)
	if cl.Workers < 0 || cl.Workers > 256 {
		errs.add("workers", "%d must be between 0 and 256", cl.Workers)
	}
	if c.Mode == "operator" && cl.DisableMultiPool && !cl.ClusterCIDRConfig && !cl.ENI.Enabled() {
		errs.add("disableMultiPool", "with clusterCIDRConfig off too, the operator has nothing to do")
	}
	if c.Mode == "operator" {
		errs.leaderElection(cl.LeaderElection)
	}
	return errs.errs
}

func (errs *problems) nodeName(name string) {
	switch {
	case name == "":
		errs.add("nodeName", "must be set in agent mode (or the NODE_NAME environment variable, e.g. from the downward API spec.nodeName)")
	case len(name) > 253 || !dns1123Subdomain.MatchString(name):
		errs.add("nodeName", "%q is not a valid Kubernetes node name", name)
	}
}

// preAllocation checks cluster.preAllocation, in pool name order.
func (errs *problems) preAllocation(pre map[string]int) {
	for _, p := range slices.Sorted(maps.Keys(pre)) {
		f := "preAllocation." + p
		if len(p) > 253 || !dns1123Subdomain.MatchString(p) {
			errs.add(f, "%q is not a valid pool name", p)
		}
		if n := pre[p]; n < 0 || n > 1<<20 {
			errs.add(f, "%d must be between 0 and 1048576", n)
		}
	}
}

func (errs *problems) clusterDurations(cl *Cluster) {
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
			errs.add(p.field, "%s must be between 0 and %s", p.v, p.max)
		}
	}
}

func (errs *problems) leaderElection(le LeaderElection) {
	if !dns1123Subdomain.MatchString(le.Namespace) {
		errs.add("leaderElection.namespace", "%q is not a valid namespace name", le.Namespace)
	}
	if !dns1123Subdomain.MatchString(le.Name) {
		errs.add("leaderElection.name", "%q is not a valid Lease name", le.Name)
	}
	if le.RenewDeadline >= le.LeaseDuration {
		errs.add("leaderElection.renewDeadline", "%s must be shorter than leaseDuration %s", le.RenewDeadline, le.LeaseDuration)
	}
	if le.RetryPeriod >= le.RenewDeadline {
		errs.add("leaderElection.retryPeriod", "%s must be shorter than renewDeadline %s", le.RetryPeriod, le.RenewDeadline)
	}
}

// PodCIDRPrefixes parses cluster.podCIDRs: CIDRs without host bits, none overlapping another.
// Errors name the entry (cluster.podCIDRs[1]).
func (cl *Cluster) PodCIDRPrefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cl.PodCIDRs))
	for i, s := range cl.PodCIDRs {
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			return nil, fmt.Errorf("cluster.podCIDRs[%d]: %q is not a CIDR such as 10.244.0.0/16: %w", i, s, err)
		case p.Addr().Is4In6() || p.Addr().Zone() != "":
			return nil, fmt.Errorf("cluster.podCIDRs[%d]: %q must be a plain IPv4 or IPv6 CIDR", i, s)
		case p.Masked() != p:
			return nil, fmt.Errorf("cluster.podCIDRs[%d]: %s has host bits set (did you mean %s?)", i, p, p.Masked())
		}
		for j, q := range out {
			if q.Overlaps(p) {
				return nil, fmt.Errorf("cluster.podCIDRs[%d]: %s overlaps cluster.podCIDRs[%d] %s", i, p, j, q)
			}
		}
		out = append(out, p)
	}
	return out, nil
}
