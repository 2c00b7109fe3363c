package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-ipam/allot/core/config"
)

// TestRenderedConfigsLoad runs allotd's own configuration loader (the code `allotd --config`
// runs first) on the agent's and the operator's file of every case, with the environment the
// pods give it: a key allotd does not know, or a value it refuses, fails here rather than in a
// crash-looping pod.
func TestRenderedConfigsLoad(t *testing.T) {
	t.Setenv("NODE_NAME", "node-1")
	t.Setenv("POD_NAME", "allot-agent-x1")
	t.Setenv("POD_NAMESPACE", Namespace)
	for _, c := range allCases(t) {
		t.Run(c.name, func(t *testing.T) {
			docs := decodeStrict(t, template(t, c))
			n := 0
			for _, name := range []string{"allot-agent-config", "allot-operator-config"} {
				cm, ok := lookup[*corev1.ConfigMap](docs, name)
				if !ok {
					continue
				}
				n++
				body := cm.Data["allotd.yaml"]
				p := filepath.Join(t.TempDir(), "allotd.yaml")
				if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				cfg, err := config.Load(p, nil)
				if err != nil {
					t.Errorf("%s: allotd refuses it: %v\n%s", name, err, body)
					continue
				}
				want := strings.TrimSuffix(strings.TrimPrefix(name, "allot-"), "-config")
				if cfg.Mode != want {
					t.Errorf("%s: mode %s", name, cfg.Mode)
				}
			}
			if n == 0 {
				t.Fatal("no allotd configuration rendered")
			}
		})
	}
}

// TestRenderedConfigsLoadRefusesTypos: the check above is allotd's loader, which refuses what
// the values schema cannot know (extraConfig is free-form).
func TestRenderedConfigsLoadRefusesTypos(t *testing.T) {
	t.Setenv("NODE_NAME", "node-1")
	for _, set := range []string{"agent.extraConfig.cluster.preAllocatoin.default=8", "operator.extraConfig.cluster.workers=-1"} {
		docs := decodeStrict(t, template(t, valuesCase{set: []string{set}}))
		name := "allot-" + strings.SplitN(set, ".", 2)[0] + "-config"
		cm := find[*corev1.ConfigMap](t, docs, name)
		body := cm.Data["allotd.yaml"]
		p := filepath.Join(t.TempDir(), "allotd.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load(p, nil); err == nil {
			t.Errorf("--set %s: allotd accepted %s:\n%s", set, name, body)
		}
	}
}
