package k8s

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// TestRESTMapperOffline: every kind of the static table maps, with the scope of its
// generated CRD, against an address where nothing listens (no discovery is attempted).
func TestRESTMapperOffline(t *testing.T) {
	m, err := RESTMapper(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	crdScope := map[string]string{}
	files, err := filepath.Glob("../../deploy/crds/allot.io_*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs under deploy/crds: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Scope string `json:"scope"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		crdScope[crd.Spec.Names.Kind] = crd.Spec.Scope
	}
	for _, k := range staticKinds {
		mp, err := m.RESTMapping(k.gvk.GroupKind(), k.gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", k.gvk, err)
		}
		if got := mp.Scope.Name() == meta.RESTScopeNameNamespace; got != k.namespaced {
			t.Errorf("%s: namespaced %v, want %v", k.gvk, got, k.namespaced)
		}
		if k.gvk.Group != "allot.io" {
			continue
		}
		want, ok := crdScope[k.gvk.Kind]
		if !ok {
			t.Errorf("%s: no CRD in deploy/crds", k.gvk.Kind)
			continue
		}
		if (want == "Namespaced") != k.namespaced {
			t.Errorf("%s: static scope namespaced=%v, CRD says %s", k.gvk.Kind, k.namespaced, want)
		}
		delete(crdScope, k.gvk.Kind)
	}
	for kind := range crdScope {
		t.Errorf("CRD kind %s has no static mapping (add it to staticKinds)", kind)
	}
}
