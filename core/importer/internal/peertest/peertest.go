// Package peertest helps the importers' tests: peer objects from YAML, and checks of a
// result's warnings.
package peertest

import (
	"os"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/importer/mapping"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Objects decodes "---"-separated YAML documents.
func Objects(t testing.TB, docs string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range strings.Split(docs, "\n---\n") {
		if strings.TrimSpace(d) == "" {
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("test input: %v\n%s", err, d)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// File reads a file of testdata as peer objects.
func File(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Objects(t, string(b))
}

// Warnings checks that every warning contains one of want, in order, and that there are
// no others.
func Warnings(t testing.TB, got []mapping.Warning, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("warnings: got %d, want %d:\n%s", len(got), len(want), list(got))
	}
	for i, w := range want {
		if !strings.Contains(got[i].String(), w) {
			t.Errorf("warning %d: %q does not contain %q", i, got[i].String(), w)
		}
	}
}

func list(ws []mapping.Warning) string {
	var b strings.Builder
	for _, w := range ws {
		b.WriteString("  " + w.String() + "\n")
	}
	return b.String()
}

// Error checks that err is non-nil and contains want (the object and the field).
func Error(t testing.TB, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

// Find returns the object of kind and name in objs, typed as T.
func Find[T client.Object](t testing.TB, objs []client.Object, name string) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.(T); ok && o.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T %q among %d objects", zero, name, len(objs))
	return zero
}
