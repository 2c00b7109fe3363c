package config

// Cluster configures the Kubernetes modes (agent, operator). Owned by the Kubernetes-mode
// work; standalone mode ignores it.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig; empty means in-cluster configuration.
	Kubeconfig string `koanf:"kubeconfig"`
	// NodeName is the node this agent serves (agent mode); defaults to $NODE_NAME.
	NodeName string `koanf:"nodeName"`
}

// validateCluster checks the cluster section for the agent and operator modes.
func (c *Config) validateCluster() []error {
	return nil
}
