package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
)

// Namespace is where the examples install allot.
const Namespace = "kube-system"

// ReleaseName is the Helm release of the tests and of deploy/manifests/allot.yaml.
const ReleaseName = "allot"

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// repoRoot is the directory holding the module's go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for d := wd; ; d = filepath.Dir(d) {
			_, errMod := os.Stat(filepath.Join(d, "go.mod"))
			_, errChart := os.Stat(filepath.Join(d, "deploy", "helm", "allot", "Chart.yaml"))
			if errMod == nil && errChart == nil {
				rootDir = d
				return
			}
			if filepath.Dir(d) == d {
				rootErr = fmt.Errorf("no deploy/helm/allot/Chart.yaml above %s", wd)
				return
			}
		}
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return rootDir
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "deploy", "helm", "allot") }

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm returns the pinned helm binary: $ALLOT_HELM, else hack/install-helm.sh's (which builds
// it on first use, a few minutes). Under -short an uninstalled helm skips the test.
func helm(t testing.TB) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("ALLOT_HELM"); p != "" {
			helmPath = p
			return
		}
		script := filepath.Join(repoRoot(t), "hack", "install-helm.sh")
		if testing.Short() {
			// Only a helm already installed: the script would build it.
			p, err := installedHelm(script)
			if err != nil {
				helmErr = err
				return
			}
			if _, err := os.Stat(p); err != nil {
				helmErr = errSkip
				return
			}
			helmPath = p
			return
		}
		cmd := exec.Command("bash", script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmErr = fmt.Errorf("%s: %w\n%s", script, err, stderr.String())
			return
		}
		helmPath = strings.TrimSpace(string(out))
	})
	if errors.Is(helmErr, errSkip) {
		t.Skip("short mode: helm is not installed (make helm)")
	}
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

var errSkip = errors.New("skip")

// installedHelm is where the script installs helm: $ALLOT_CACHE/helm-<its HELM_VERSION>/helm.
func installedHelm(script string) (string, error) {
	b, err := os.ReadFile(script)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`HELM_VERSION=\$\{HELM_VERSION:-(v[0-9.]+)\}`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s: no HELM_VERSION default", script)
	}
	cache := os.Getenv("ALLOT_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache", "allot")
	}
	return filepath.Join(cache, "helm-"+string(m[1]), "helm"), nil
}

// runHelm runs helm with args and returns its standard output; a failure fails the test
// with helm's standard error.
func runHelm(t testing.TB, env []string, args ...string) []byte {
	t.Helper()
	out, err := tryHelm(t, env, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func tryHelm(t testing.TB, env []string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	cmd.Dir = repoRoot(t)
	// A private helm home: no repositories, plugins or caches of the user leak in.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w\n%s%s", err, stderr.String(), out)
	}
	return out, nil
}

// valuesCase is one set of values the chart is checked with: an example file and/or --set
// flags.
type valuesCase struct {
	name string
	file string // relative to the chart's examples/; "" for the defaults
	set  []string
	// values is YAML given as one more -f file (for values --set cannot express).
	values string
}

func (c valuesCase) args(t testing.TB) []string {
	var a []string
	if c.file != "" {
		a = append(a, "-f", filepath.Join(chartDir(t), "examples", c.file))
	}
	for _, s := range c.set {
		a = append(a, "--set", s)
	}
	if c.values != "" {
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, []byte(c.values), 0o644); err != nil {
			t.Fatal(err)
		}
		a = append(a, "-f", p)
	}
	return a
}

// exampleCases are the default values and every file of examples/.
func exampleCases(t testing.TB) []valuesCase {
	files, err := filepath.Glob(filepath.Join(chartDir(t), "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []valuesCase{{name: "defaults"}}
	for _, f := range files {
		cases = append(cases, valuesCase{name: strings.TrimSuffix(filepath.Base(f), ".yaml"), file: filepath.Base(f)})
	}
	if len(cases) < 6 {
		t.Fatalf("expected the five examples (one per mode, and ebpf) in examples/, found %d files", len(files))
	}
	return cases
}

// template renders the chart as `helm template` does for the release ReleaseName in Namespace.
func template(t testing.TB, c valuesCase, extra ...string) []byte {
	t.Helper()
	args := append([]string{"template", ReleaseName, chartDir(t), "--namespace", Namespace}, c.args(t)...)
	return runHelm(t, nil, append(args, extra...)...)
}

// doc is one rendered document: its raw YAML and what it decodes to.
type doc struct {
	raw  []byte
	obj  runtime.Object // typed (strict)
	gvk  schema.GroupVersionKind
	name string
	ns   string
}

// splitYAML splits a multi-document stream, dropping empty documents.
func splitYAML(b []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(d))) == 0 {
			continue
		}
		out = append(out, d)
	}
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

var (
	strictOnce   sync.Once
	strictScheme *runtime.Scheme
	strictCodecs serializer.CodecFactory
)

// decodeStrict decodes every document into its Go type with strict field checking (an unknown
// or duplicated field is an error): client-go's built-in types, apiextensions and allot.io.
// cert-manager's kinds, which this module has no types for, get the strict check of the
// fields the chart writes (externalKinds).
func decodeStrict(t testing.TB, rendered []byte) []doc {
	t.Helper()
	strictOnce.Do(func() {
		strictScheme = allotk8s.NewScheme()
		if err := apiextensionsv1.AddToScheme(strictScheme); err != nil {
			panic(err)
		}
		strictCodecs = serializer.NewCodecFactory(strictScheme, serializer.EnableStrict)
	})
	raws, err := splitYAML(rendered)
	if err != nil {
		t.Fatalf("splitting the rendered documents: %v", err)
	}
	var docs []doc
	for i, raw := range raws {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(raw, &meta); err != nil {
			t.Fatalf("document %d is not YAML: %v\n%s", i, err, raw)
		}
		if meta.APIVersion == "" || meta.Kind == "" || meta.Metadata.Name == "" {
			t.Fatalf("document %d lacks apiVersion, kind or metadata.name:\n%s", i, raw)
		}
		gv, err := schema.ParseGroupVersion(meta.APIVersion)
		if err != nil {
			t.Fatalf("document %d: apiVersion %q: %v", i, meta.APIVersion, err)
		}
		gvk := gv.WithKind(meta.Kind)
		d := doc{raw: raw, gvk: gvk, name: meta.Metadata.Name, ns: meta.Metadata.Namespace}
		if check, ok := externalKinds[gvk]; ok {
			if err := check(raw); err != nil {
				t.Fatalf("%s %s: %v", gvk.Kind, d.name, err)
			}
			docs = append(docs, d)
			continue
		}
		obj, got, err := strictCodecs.UniversalDeserializer().Decode(raw, nil, nil)
		if err != nil {
			t.Fatalf("%s %s: strict decoding: %v\n%s", gvk.Kind, d.name, err, raw)
		}
		if *got != gvk {
			t.Fatalf("%s %s decoded as %s", gvk.Kind, d.name, got)
		}
		d.obj = obj
		docs = append(docs, d)
	}
	return docs
}

// externalKinds check objects of CRDs the chart does not own (cert-manager, prometheus-operator)
// strictly against the subset it uses; for cert-manager.io/v1
// the chart uses (field names as in cert-manager's API reference).
var externalKinds = map[schema.GroupVersionKind]func([]byte) error{
	{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}: func(b []byte) error {
		var o struct {
			APIVersion string     `json:"apiVersion"`
			Kind       string     `json:"kind"`
			Metadata   metaSubset `json:"metadata"`
			Spec       struct {
				SelfSigned *struct{} `json:"selfSigned"`
			} `json:"spec"`
		}
		if err := yaml.UnmarshalStrict(b, &o); err != nil {
			return err
		}
		if o.Spec.SelfSigned == nil {
			return errors.New("spec.selfSigned missing")
		}
		return nil
	},
	{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}: func(b []byte) error {
		var o struct {
			APIVersion string     `json:"apiVersion"`
			Kind       string     `json:"kind"`
			Metadata   metaSubset `json:"metadata"`
			Spec       struct {
				SecretName string   `json:"secretName"`
				CommonName string   `json:"commonName"`
				DNSNames   []string `json:"dnsNames"`
				IssuerRef  struct {
					Name  string `json:"name"`
					Kind  string `json:"kind"`
					Group string `json:"group"`
				} `json:"issuerRef"`
			} `json:"spec"`
		}
		if err := yaml.UnmarshalStrict(b, &o); err != nil {
			return err
		}
		if o.Spec.SecretName == "" || o.Spec.IssuerRef.Name == "" || len(o.Spec.DNSNames) == 0 {
			return errors.New("spec.secretName, spec.issuerRef.name and spec.dnsNames are required")
		}
		return nil
	},
}

type metaSubset struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// find returns the typed object of kind and name, failing the test when it is absent.
func find[T client.Object](t testing.TB, docs []doc, name string) T {
	t.Helper()
	for _, d := range docs {
		if o, ok := d.obj.(T); ok && d.name == name {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T named %q in the rendered chart", zero, name)
	return zero
}

// lookup is find that reports absence instead of failing.
func lookup[T client.Object](docs []doc, name string) (T, bool) {
	for _, d := range docs {
		if o, ok := d.obj.(T); ok && d.name == name {
			return o, true
		}
	}
	var zero T
	return zero, false
}

// yamlToUnstructured decodes one YAML document into u.
func yamlToUnstructured(b []byte, u *unstructured.Unstructured) error {
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return err
	}
	u.Object = m
	if u.GetKind() == "" || u.GetAPIVersion() == "" {
		return errors.New("no apiVersion or kind")
	}
	return nil
}
