// Package config loads and validates allotd's configuration.
//
// Sources, later ones overriding earlier ones: built-in defaults, the YAML file, ALLOT_*
// environment variables, then command-line flags. Validation errors name the field in the
// file's own terms (e.g. `pools[1].cidrs[0]`), so an operator can go straight to the line.
package config

import (
	"time"
)

// Config is allotd's whole configuration.
type Config struct {
	// Mode is "standalone" (agent and pools in one process, state in a local store),
	// "agent" (one per node in a cluster) or "operator" (hands blocks to nodes; one leader).
	Mode string `koanf:"mode"`
	// Socket is the unix socket of the local API (allot-cni, allotctl).
	Socket string `koanf:"socket"`
	// SocketGroup, a group name or a numeric gid, lets that group's members use the local
	// API besides root: the socket file gets this group and mode 0660 (else 0600).
	SocketGroup string      `koanf:"socketGroup"`
	Store       StoreConfig `koanf:"store"`
	HTTP        HTTPConfig  `koanf:"http"`
	Log         LogConfig   `koanf:"log"`
	// API bounds the local API's concurrent work (api.go).
	API    API    `koanf:"api"`
	Pools  []Pool `koanf:"pools"`
	Policy Policy `koanf:"policy"`
	// Plugins are third-party plugins (process or WASM) that policy chains can name.
	Plugins []Plugin `koanf:"plugins"`
	// Datapath configures masquerading of pod traffic (datapath.go).
	Datapath Datapath `koanf:"datapath"`
	// Cloud configures pools filled by a cloud backend (cloud.go).
	Cloud Cloud `koanf:"cloud"`
	// Cluster configures the agent and operator modes (cluster.go).
	Cluster Cluster `koanf:"cluster"`
	// CNI is the agent's network configuration and uninstall (cni.go).
	CNI CNI `koanf:"cni"`

	// Warnings are problems that do not stop the daemon (e.g. an unknown ALLOT_ variable);
	// allotd logs them at start.
	Warnings []string `koanf:"-"`
}

// StoreConfig is the embedded store.
type StoreConfig struct {
	Path string `koanf:"path"`
	// NoSync skips fsync. For benchmarks and throwaway test rigs only: an acknowledged
	// allocation can be lost on power failure.
	NoSync bool `koanf:"noSync"`
	// OnCorruption is what allotd does when the store file is unusable (damaged,
	// truncated, foreign): "fail" exits with code 3 and the commands to run; "rebuild"
	// (agent mode only) moves the file aside, salvages what it can into a new one, holds
	// the addresses this node's pods show in the API server, and starts. Empty means
	// rebuild for an agent, fail otherwise: only an agent has another source of truth.
	OnCorruption string `koanf:"onCorruption"`
}

// What allotd does with an unusable store (store.onCorruption).
const (
	OnCorruptionFail    = "fail"
	OnCorruptionRebuild = "rebuild"
)

// StoreOnCorruption is store.onCorruption with its mode-dependent default applied.
func (c *Config) StoreOnCorruption() string {
	if c.Store.OnCorruption != "" {
		return c.Store.OnCorruption
	}
	if c.Mode == "agent" {
		return OnCorruptionRebuild
	}
	return OnCorruptionFail
}

// HTTPConfig is the health and metrics listener.
type HTTPConfig struct {
	// Address serves /healthz, /readyz and /metrics; empty disables it.
	Address string `koanf:"address"`
	// MetricsAddress serves /metrics alone, on any address (":9962" listens on every
	// one), for a Prometheus outside the node, as Cilium's prometheus.serveAddr; empty
	// disables it. Health stays on loopback: a probe answer says nothing worth exposing,
	// but kept off the network it cannot be scraped or abused either.
	MetricsAddress string `koanf:"metricsAddress"`
}

// LogConfig sets up log/slog.
type LogConfig struct {
	Level  string `koanf:"level"`
	Format string `koanf:"format"`
}

// Pool is one address pool.
type Pool struct {
	Name  string   `koanf:"name"`
	CIDRs []string `koanf:"cidrs"`
	// Exclude lists addresses, ranges ("a-b") or CIDRs never handed out.
	Exclude []string `koanf:"exclude"`
	// Gateway, if set, is given to pods in the CNI result and never handed out.
	Gateway string  `koanf:"gateway"`
	Routes  []Route `koanf:"routes"`
	// Default marks the pool as a default for its family when the CNI config names none.
	Default bool `koanf:"default"`
}

// Route is a route given to pods.
type Route struct {
	Dst string `koanf:"dst"`
	GW  string `koanf:"gw"`
}

// Policy says which pool policy chain decides, per CNI network.
type Policy struct {
	// Default applies to networks not listed in Networks.
	Default Chain `koanf:"default"`
	// Networks maps a CNI network name to its chain.
	Networks map[string]Chain `koanf:"networks"`
	// Timeout bounds one policy decision.
	Timeout time.Duration `koanf:"timeout"`
	// Config holds the configuration of built-in policies, by policy name, e.g.
	// {"cilium-annotations": {"key": "example.com/pool"}}.
	Config map[string]map[string]any `koanf:"config"`
}

// Chain is an ordered list of policies with fall-through: a policy that has no opinion
// passes the request to the next one.
type Chain struct {
	Policies []string `koanf:"chain"`
	// Fallback answers when a policy of the chain fails (crash, timeout, bad output).
	Fallback string `koanf:"fallback"`
}

// Plugin is a third-party plugin loaded at start.
type Plugin struct {
	Name string `koanf:"name"`
	// Kind is "pool-policy", "cloud-backend" or "datapath".
	Kind string `koanf:"kind"`
	// Transport is "process" (go-plugin) or "wasm" (pool policies only).
	Transport string `koanf:"transport"`
	Path      string `koanf:"path"`
	// SHA256 pins the plugin binary or module; a mismatch refuses to load it.
	SHA256  string         `koanf:"sha256"`
	Args    []string       `koanf:"args"`
	Env     []string       `koanf:"env"`
	Timeout time.Duration  `koanf:"timeout"`
	Config  map[string]any `koanf:"config"`
	// WASM only.
	Instances      int `koanf:"instances"`
	MemoryLimitMiB int `koanf:"memoryLimitMiB"`
}

// Defaults returns the configuration used for every key the sources leave unset.
func Defaults() Config {
	return Config{
		Mode:   "standalone",
		Socket: "/run/allot/allotd.sock",
		Store:  StoreConfig{Path: "/var/lib/allot/allot.db"},
		HTTP:   HTTPConfig{Address: "127.0.0.1:9464"},
		// Masquerading changes the node's firewall: opt in.
		Datapath: Datapath{Type: "none"},
		Log:      LogConfig{Level: "info", Format: "text"},
		API:      DefaultAPI(),
		CNI:      DefaultCNI(),
		Policy: Policy{
			Default: Chain{Policies: []string{"static"}},
			Timeout: 2 * time.Second,
		},
	}
}
