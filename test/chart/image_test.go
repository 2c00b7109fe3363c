package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestImageShipsInstallablePlugins: every CNI plugin values.schema.json lets
// cni.installPlugins name is built into the image (hack/build-image's cniPlugins), so
// install-cni never looks for a binary the image lacks (ptp for ENI mode's conflist).
func TestImageShipsInstallablePlugins(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			CNI struct {
				Properties struct {
					InstallPlugins struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"installPlugins"`
				} `json:"properties"`
			} `json:"cni"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	names := schema.Properties.CNI.Properties.InstallPlugins.Items.Enum
	if len(names) == 0 {
		t.Fatal("values.schema.json: cni.installPlugins has no enum")
	}
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "hack", "build-image", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^var cniPlugins = \[\]string\{(.*)\}$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("hack/build-image/main.go: no cniPlugins list")
	}
	built := map[string]bool{}
	for _, q := range regexp.MustCompile(`"[a-z]+/([a-z-]+)"`).FindAllSubmatch(m[1], -1) {
		built[string(q[1])] = true
	}
	for _, n := range names {
		if !built[n] {
			t.Errorf("cni.installPlugins accepts %q, which the image does not build (cniPlugins: %s)", n, m[1])
		}
	}
	if !built["ptp"] {
		t.Errorf("the image must ship ptp, ENI mode's interface plugin")
	}
}
