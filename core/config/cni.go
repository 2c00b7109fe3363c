package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	cniversion "github.com/containernetworking/cni/pkg/version"
)

// CNI is the agent's part in the node's CNI set-up when it runs as a DaemonSet: the network
// configuration it writes once it serves, and what it removes when it is uninstalled. All
// optional; an empty confDir writes nothing (the configuration is managed elsewhere).
type CNI struct {
	// ConfDir is the runtime's CNI configuration directory (the host's /etc/cni/net.d,
	// mounted). Empty: the agent writes no network configuration.
	ConfDir string `koanf:"confDir"`
	// ConfName is the file written in ConfDir. The runtime uses the lexically first file,
	// hence the default 05-allot.conflist; it must end in .conflist (a .conf file is read
	// as a single plugin's configuration, not a list).
	ConfName string `koanf:"confName"`
	// Conflist is the network configuration list, JSON (in YAML, a string: `conflist: |`).
	// It must name allot-cni as the ipam of one of its plugins.
	Conflist string `koanf:"conflist"`
	// BinDir is where `allotd install-cni` put allot-cni and the other plugins (the host's
	// /opt/cni/bin, mounted); they are removed on uninstall. Empty: no binary is removed.
	BinDir string `koanf:"binDir"`
	// SrcDir holds allot's copies of the plugins (in allot's image, /opt/allot/cni/bin):
	// a plugin in BinDir that no longer matches its copy was replaced by something else
	// and is kept on uninstall.
	SrcDir string `koanf:"srcDir"`
	// Uninstall says when a stopping agent removes the configuration, the binaries and its
	// datapath's rules: "auto" only when its DaemonSet is gone or being deleted (so a
	// rolling update or a node reboot keeps the node's pods working), "always" on every
	// stop, "never" never.
	Uninstall string `koanf:"uninstall"`
	// PodName and PodNamespace are the agent's own Pod, read at stop for uninstall auto
	// (default: $POD_NAME and $POD_NAMESPACE, from the downward API; the namespace falls
	// back to the service account's).
	PodName      string `koanf:"podName"`
	PodNamespace string `koanf:"podNamespace"`
}

// Uninstall policies.
const (
	UninstallAuto   = "auto"
	UninstallAlways = "always"
	UninstallNever  = "never"
)

// DefaultCNI is the cni section's defaults.
func DefaultCNI() CNI {
	return CNI{ConfName: "05-allot.conflist", SrcDir: "/opt/allot/cni/bin", Uninstall: UninstallAuto}
}

// allotCNIType is the plugin type of allot-cni in a network configuration.
const allotCNIType = "allot-cni"

// serviceAccountNamespace is where the kubelet puts the Pod's namespace for in-cluster
// clients.
var serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Enabled reports whether the agent writes a network configuration.
func (c CNI) Enabled() bool { return c.ConfDir != "" }

// validateCNI checks the cni section; errors name the field.
func (c *Config) validateCNI() []error {
	errs := problems{prefix: "cni."}
	n := &c.CNI
	n.applyDefaults()
	if c.Mode != "agent" {
		for _, f := range []struct{ name, v string }{{"confDir", n.ConfDir}, {"binDir", n.BinDir}, {"conflist", n.Conflist}} {
			if f.v != "" {
				errs.add(f.name, "only used in agent mode (mode is %q)", c.Mode)
			}
		}
		return errs.errs
	}
	n.applyPodIdentity()
	for _, f := range []struct{ name, v string }{{"confDir", n.ConfDir}, {"binDir", n.BinDir}, {"srcDir", n.SrcDir}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			errs.add(f.name, "%q must be an absolute path", f.v)
		}
	}
	switch {
	case n.ConfName != filepath.Base(n.ConfName) || strings.HasPrefix(n.ConfName, "."):
		errs.add("confName", "%q must be a plain file name (no directory, not hidden)", n.ConfName)
	case filepath.Ext(n.ConfName) != ".conflist":
		errs.add("confName", "%q must end in .conflist (the runtime reads a .conf or .json file as a single plugin's configuration)", n.ConfName)
	}
	if !slices.Contains([]string{UninstallAuto, UninstallAlways, UninstallNever}, n.Uninstall) {
		errs.add("uninstall", "%q is not auto, always or never", n.Uninstall)
	}
	if n.PodName != "" && (len(n.PodName) > 253 || !dns1123Subdomain.MatchString(n.PodName)) {
		errs.add("podName", "%q is not a valid Pod name", n.PodName)
	}
	if n.PodNamespace != "" && (len(n.PodNamespace) > 63 || !dns1123Subdomain.MatchString(n.PodNamespace)) {
		errs.add("podNamespace", "%q is not a valid namespace name", n.PodNamespace)
	}
	switch {
	case n.ConfDir != "" && strings.TrimSpace(n.Conflist) == "":
		errs.add("conflist", "required when cni.confDir is set (the network configuration list to write)")
	case n.Conflist != "":
		if err := ValidateConflist([]byte(n.Conflist)); err != nil {
			errs.add("conflist", "%v", err)
		} else if c.Cluster.ENI.Enabled() {
			for _, msg := range eniConflistMTU([]byte(n.Conflist), c.Cluster.ENI.ipv6()) {
				errs.add("conflist", "%s", msg)
			}
		}
	}
	return errs.errs
}

func (c *CNI) applyDefaults() {
	d := DefaultCNI()
	if c.ConfName == "" {
		c.ConfName = d.ConfName
	}
	if c.SrcDir == "" {
		c.SrcDir = d.SrcDir
	}
	if c.Uninstall == "" {
		c.Uninstall = d.Uninstall
	}
}

// applyPodIdentity fills the agent Pod's name and namespace from the downward API
// environment, the namespace failing that from the service account.
func (c *CNI) applyPodIdentity() {
	if c.PodName == "" {
		c.PodName = os.Getenv("POD_NAME")
	}
	if c.PodNamespace == "" {
		c.PodNamespace = os.Getenv("POD_NAMESPACE")
	}
	if c.PodNamespace == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			c.PodNamespace = strings.TrimSpace(string(b))
		}
	}
}

// ValidateConflist checks a network configuration list as the runtime will read it
// (libcni), and that allot-cni is the ipam of one of its plugins.
func ValidateConflist(b []byte) error {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		return err
	}
	v, _ := raw["cniVersion"].(string)
	if v == "" {
		return fmt.Errorf("cniVersion: must be set (without it libcni reads the list as version 0.1.0)")
	}
	if _, _, _, err := cniversion.ParseVersion(v); err != nil {
		return fmt.Errorf("cniVersion: %w", err)
	}
	if list.Name == "" {
		return fmt.Errorf("name: must not be empty (the CNI network name)")
	}
	if len(list.Plugins) == 0 {
		return fmt.Errorf("plugins: must list at least one plugin")
	}
	for i, p := range list.Plugins {
		if p.Network.Type == allotCNIType {
			return fmt.Errorf("plugins[%d].type: allot-cni is an IPAM plugin; use it as the ipam of an interface plugin (e.g. {\"type\": \"bridge\", \"ipam\": {\"type\": \"allot-cni\"}})", i)
		}
	}
	for _, p := range list.Plugins {
		if p.Network.IPAM.Type == allotCNIType {
			return nil
		}
	}
	return fmt.Errorf("plugins: no plugin has allot-cni as its ipam (\"ipam\": {\"type\": \"allot-cni\"})")
}
