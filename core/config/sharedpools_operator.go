package config

import (
	"net"
	"net/url"
	"time"
)

// The operator's side of shared pools: cluster.sharedPools.gc and cluster.sharedPools.webhook
// (core/operator/shared_gc.go, webhook.go). Agent-side fields are in sharedpools.go.

// SharedPoolsGC configures the operator's garbage collector of AddressClaims and
// AllotEndpoints whose pod, node or StatefulSet ordinal is gone.
type SharedPoolsGC struct {
	// Grace is how long a claim must look stale, unchanged, before it is freed (default 30 s).
	Grace time.Duration `koanf:"grace"`
	// Interval is how often the collector scans (default 10 s).
	Interval time.Duration `koanf:"interval"`
	// StatelessTerminatingPodOnReadyNode and StatelessTerminatingPodOnNotReadyNode free the
	// addresses of a pod stuck Terminating past its grace period on a Ready / not Ready node
	// (Spiderpool's enableGCStatelessTerminatingPodOnReadyNode / ...OnNotReadyNode; default
	// true). StatefulSet and KubeVirt VM pods keep their addresses.
	StatelessTerminatingPodOnReadyNode    *bool `koanf:"statelessTerminatingPodOnReadyNode"`
	StatelessTerminatingPodOnNotReadyNode *bool `koanf:"statelessTerminatingPodOnNotReadyNode"`
}

// SharedPoolsWebhook configures the operator's admission webhook for SharedIPPool and
// ReservedIP (off by default: it needs a Service or URL the API server can reach).
type SharedPoolsWebhook struct {
	Enabled bool `koanf:"enabled"`
	// Address to listen on (default :9443).
	Address string `koanf:"address"`
	// CertDir holds tls.crt, tls.key and optionally ca.crt (cert-manager); empty: each
	// replica generates a CA and adds it to the webhook's caBundle when it registers.
	CertDir string `koanf:"certDir"`
	// Hosts of the generated serving certificate (default: the Service's DNS names).
	Hosts []string `koanf:"hosts"`
	// Register creates or updates the ValidatingWebhookConfiguration ConfigName (default
	// allot-shared-pools.allot.io) with the caBundle; else apply deploy/webhook.
	Register   bool   `koanf:"register"`
	ConfigName string `koanf:"configName"`
	// URL the API server calls, or Service in front of the operator replicas.
	URL     string                    `koanf:"url"`
	Service SharedPoolsWebhookService `koanf:"service"`
	// FailurePolicy: Fail (default: an unchecked pool change is refused) or Ignore.
	FailurePolicy string `koanf:"failurePolicy"`
	// TimeoutSeconds the API server waits for an answer (default 5).
	TimeoutSeconds int32 `koanf:"timeoutSeconds"`
}

// SharedPoolsWebhookService references the operator's Service.
type SharedPoolsWebhookService struct {
	Namespace string `koanf:"namespace"`
	Name      string `koanf:"name"`
	Port      int32  `koanf:"port"`
}

// validateSharedPoolsOperator fills the defaults of cluster.sharedPools.gc and .webhook and
// checks them; errors name the field.
func (c *Config) validateSharedPoolsOperator() []error {
	errs := problems{prefix: "cluster.sharedPools."}
	gc := &c.Cluster.SharedPools.GC
	if gc.Grace == 0 {
		gc.Grace = 30 * time.Second
	}
	if gc.Interval == 0 {
		gc.Interval = min(10*time.Second, max(gc.Grace/3, 100*time.Millisecond))
	}
	if gc.Grace < time.Second || gc.Grace > 24*time.Hour {
		errs.add("gc.grace", "%s must be between 1s and 24h (a pod's sandbox may take seconds to come back)", gc.Grace)
	}
	if gc.Interval < 100*time.Millisecond || gc.Interval > time.Hour {
		errs.add("gc.interval", "%s must be between 100ms and 1h", gc.Interval)
	}
	w := &c.Cluster.SharedPools.Webhook
	if !w.Enabled {
		return errs.errs
	}
	w.applyDefaults()
	errs.webhook(w, c.Mode)
	return errs.errs
}

func (w *SharedPoolsWebhook) applyDefaults() {
	if w.Address == "" {
		w.Address = ":9443"
	}
	if w.FailurePolicy == "" {
		w.FailurePolicy = "Fail"
	}
	if w.TimeoutSeconds == 0 {
		w.TimeoutSeconds = 5
	}
	if w.Service.Port == 0 {
		w.Service.Port = 443
	}
}

// webhook checks cluster.sharedPools.webhook; registering it (in operator mode) needs to
// know where the API server finds it.
func (errs *problems) webhook(w *SharedPoolsWebhook, mode string) {
	if _, _, err := net.SplitHostPort(w.Address); err != nil {
		errs.add("webhook.address", "%q is not host:port: %v", w.Address, err)
	}
	if w.FailurePolicy != "Fail" && w.FailurePolicy != "Ignore" {
		errs.add("webhook.failurePolicy", "%q must be Fail or Ignore", w.FailurePolicy)
	}
	if w.TimeoutSeconds < 1 || w.TimeoutSeconds > 30 {
		errs.add("webhook.timeoutSeconds", "%d must be between 1 and 30", w.TimeoutSeconds)
	}
	if w.Service.Port < 1 || w.Service.Port > 65535 {
		errs.add("webhook.service.port", "%d must be between 1 and 65535", w.Service.Port)
	}
	if w.URL != "" {
		if u, err := url.Parse(w.URL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs.add("webhook.url", "%q must be an https URL", w.URL)
		}
	}
	if (w.Service.Name == "") != (w.Service.Namespace == "") {
		errs.add("webhook.service", "set both name and namespace, or neither")
	}
	if w.Register && w.URL == "" && w.Service.Name == "" && mode == "operator" {
		errs.add("webhook.register", "needs webhook.url or webhook.service to tell the API server where the webhook is")
	}
	if w.URL != "" && w.Service.Name != "" {
		errs.add("webhook.url", "set url or service, not both")
	}
}
