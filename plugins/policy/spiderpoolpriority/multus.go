package spiderpoolpriority

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Multus pod annotations: the additional networks of a pod, and the network that replaces
// the cluster default on eth0.
const (
	AnnoMultusNetworks       = "k8s.v1.cni.cncf.io/networks"
	AnnoMultusDefaultNetwork = "v1.multus-cni.io/default-network"
)

// multusNetwork works out which Multus network an interface belongs to from the pod's
// annotations, as Spiderpool does for spec.multusName when the runtime does not say: eth0 is
// the default network (when the pod overrides it), and the i-th entry of the networks
// annotation is the interface it names ("ns/name@if", or "interface" in the JSON form), else
// "net<i>" counting from 1 — Multus's own naming. "" when the annotations do not tell.
func multusNetwork(anno map[string]string, ifName string) string {
	if ifName == "eth0" {
		if def := strings.TrimSpace(anno[AnnoMultusDefaultNetwork]); def != "" {
			return def
		}
	}
	raw := strings.TrimSpace(anno[AnnoMultusNetworks])
	if raw == "" {
		return ""
	}
	type entry struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		Interface string `json:"interface"`
	}
	var list []entry
	if strings.HasPrefix(raw, "[") {
		if json.Unmarshal([]byte(raw), &list) != nil {
			return ""
		}
	} else {
		for _, item := range strings.Split(raw, ",") {
			item = strings.TrimSpace(item)
			name, iface, _ := strings.Cut(item, "@")
			e := entry{Name: name, Interface: iface}
			if ns, n, ok := strings.Cut(name, "/"); ok {
				e.Namespace, e.Name = ns, n
			}
			list = append(list, e)
		}
	}
	for i, e := range list {
		iface := e.Interface
		if iface == "" {
			iface = "net" + strconv.Itoa(i+1)
		}
		if iface != ifName || e.Name == "" {
			continue
		}
		if e.Namespace != "" {
			return e.Namespace + "/" + e.Name
		}
		return e.Name
	}
	return ""
}
