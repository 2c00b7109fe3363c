package config

import (
	"fmt"
	"slices"
	"strings"
)

// SharedPools says which CNI networks the agent serves from shared pools (SharedIPPool,
// AddressClaim, AllotEndpoint; Spiderpool style) instead of the node's blocks.
type SharedPools struct {
	// Networks are CNI network names (the "name" of the network configuration). Their ADD,
	// DEL, CHECK and GC go to the shared-pool allocator, whose pool policy is
	// policy.networks.<name> when configured, else spiderpool-priority.
	Networks []string `koanf:"networks"`
	// KubevirtStaticIP gives a KubeVirt VM's virt-launcher pods the VM's addresses: they
	// belong to the VirtualMachine, outlive its pods (restart, live migration) and are freed
	// with it (Spiderpool's ipam.enableKubevirtStaticIP). nil means true.
	KubevirtStaticIP *bool `koanf:"kubevirtStaticIP"`

	// --- operator (sharedpools_operator.go) ---

	// GC configures the operator's garbage collector of claims and endpoints.
	GC SharedPoolsGC `koanf:"gc"`
	// Webhook configures the operator's admission webhook.
	Webhook SharedPoolsWebhook `koanf:"webhook"`
}

// SharedNetwork reports whether the CNI network is served from shared pools.
func (s SharedPools) SharedNetwork(name string) bool {
	return name != "" && slices.Contains(s.Networks, name)
}

// validateSharedPools checks cluster.sharedPools; errors name the field.
func (c *Config) validateSharedPools() []error {
	var errs []error
	seen := map[string]bool{}
	for i, n := range c.Cluster.SharedPools.Networks {
		f := fmt.Sprintf("cluster.sharedPools.networks[%d]", i)
		switch {
		case n == "":
			errs = append(errs, fmt.Errorf("%s: must not be empty (a CNI network name)", f))
		case len(n) > 253 || strings.ContainsAny(n, "/\\ \t\n\x00"):
			errs = append(errs, fmt.Errorf("%s: %q is not a valid CNI network name", f, n))
		case seen[n]:
			errs = append(errs, fmt.Errorf("%s: %q is listed twice", f, n))
		}
		seen[n] = true
	}
	return errs
}
