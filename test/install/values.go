package install

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/allot-ipam/allot/test/realnode"
	"sigs.k8s.io/yaml"
)

// Pod ranges of the chart values the tests and `make cluster` install with.
const (
	PodCIDR4 = "10.244.0.0/16"
	PodCIDR6 = "fd00:10:244::/56"
)

// Values are the chart values that install allot on a realnode cluster from an image loaded
// into its containerd (ref: registry/repository:tag): the API server on loopback (no
// kube-proxy routes the service VIP), the node's CNI directories, one dual-stack pool, the
// iptables datapath with only the pod ranges exempt from masquerade.
func Values(c *realnode.Cluster, ref string) ([]byte, error) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return nil, fmt.Errorf("image reference %q has no tag", ref)
	}
	v := map[string]any{
		"image":          map[string]any{"repository": ref[:i], "tag": ref[i+1:], "pullPolicy": "Never"},
		"k8sServiceHost": "127.0.0.1",
		"k8sServicePort": fmt.Sprint(c.APIServerPort),
		"log":            map[string]any{"level": "debug", "format": "text"},
		"cni":            map[string]any{"hostConfDir": c.CNIConfDir, "hostBinDir": c.CNIBinDir},
		"operator":       map[string]any{"replicas": 1},
		"datapath":       map[string]any{"type": "iptables"},
		"ipMasqAgent": map[string]any{"config": map[string]any{
			// Only the pod ranges are exempt: everything else leaves with the node's address.
			"nonMasqueradeCIDRs": []string{PodCIDR4, PodCIDR6},
			"masqLinkLocal":      false,
			"resyncInterval":     "10s",
		}},
		"pools": []any{map[string]any{
			"name": "default",
			"ipv4": map[string]any{"cidrs": []string{PodCIDR4}, "maskSize": 24},
			"ipv6": map[string]any{"cidrs": []string{PodCIDR6}, "maskSize": 64},
		}},
	}
	return yaml.Marshal(v)
}

// ImageRef reads the reference an image tar (make image) registers in containerd: its
// index.json's io.containerd.image.name annotation.
func ImageRef(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("image tar: %w (make image builds it)", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("image tar %s: no index.json", path)
		}
		if err != nil {
			return "", fmt.Errorf("image tar %s: %w", path, err)
		}
		if filepath.Clean(h.Name) != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return "", fmt.Errorf("image tar %s: index.json: %w", path, err)
		}
		for _, m := range idx.Manifests {
			if r := m.Annotations["io.containerd.image.name"]; r != "" {
				return r, nil
			}
		}
		return "", fmt.Errorf("image tar %s: index.json names no image (io.containerd.image.name)", path)
	}
}
