package chart

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	promql "github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// promqlParser is Prometheus' parser with its default options (no experimental syntax).
var promqlParser = promql.NewParser(promql.Options{})

// monitoringSet turns on everything monitoring.* renders.
var monitoringSet = []string{
	"monitoring.enabled=true", "monitoring.serviceMonitor.enabled=true",
	"monitoring.prometheusRule.enabled=true", "monitoring.dashboards.enabled=true",
}

var (
	gvkServiceMonitor = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}
	gvkPrometheusRule = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}
)

// The prometheus-operator objects, checked strictly against the fields of its v1 API
// reference the chart uses.
func init() {
	externalKinds[gvkServiceMonitor] = func(b []byte) error {
		var o struct {
			APIVersion string     `json:"apiVersion"`
			Kind       string     `json:"kind"`
			Metadata   metaSubset `json:"metadata"`
			Spec       struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				NamespaceSelector struct {
					MatchNames []string `json:"matchNames"`
				} `json:"namespaceSelector"`
				Endpoints []struct {
					Port        string `json:"port"`
					Path        string `json:"path"`
					Interval    string `json:"interval"`
					Relabelings []struct {
						SourceLabels []string `json:"sourceLabels"`
						TargetLabel  string   `json:"targetLabel"`
					} `json:"relabelings"`
				} `json:"endpoints"`
			} `json:"spec"`
		}
		if err := yaml.UnmarshalStrict(b, &o); err != nil {
			return err
		}
		if len(o.Spec.Selector.MatchLabels) == 0 || len(o.Spec.Endpoints) == 0 || o.Spec.Endpoints[0].Port == "" {
			return errors.New("spec.selector.matchLabels and spec.endpoints[].port are required")
		}
		return nil
	}
	externalKinds[gvkPrometheusRule] = func(b []byte) error {
		_, err := ruleGroups(b)
		return err
	}
}

// ruleGroups checks a PrometheusRule as `promtool check rules` checks a rule file (names,
// durations, templates, and every expression parsed by Prometheus' own parser) and returns
// its groups.
func ruleGroups(b []byte) (*rulefmt.RuleGroups, error) {
	var o struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   metaSubset      `json:"metadata"`
		Spec       json.RawMessage `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &o); err != nil {
		return nil, err
	}
	spec, err := yaml.JSONToYAML(o.Spec)
	if err != nil {
		return nil, err
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promqlParser, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, fmt.Errorf("spec: %w", errors.Join(errs...))
	}
	return groups, nil
}

// TestMonitoringRules: the PrometheusRule passes Prometheus' rule checks, alerts on what the
// operator of a cluster needs paging for, and uses only metrics allotd registers.
func TestMonitoringRules(t *testing.T) {
	docs := decodeStrict(t, template(t, valuesCase{name: "monitoring", set: monitoringSet}))
	var raw []byte
	for _, d := range docs {
		if d.gvk == gvkPrometheusRule {
			raw = d.raw
		}
	}
	if raw == nil {
		t.Fatal("no PrometheusRule rendered with monitoring.prometheusRule.enabled")
	}
	groups, err := ruleGroups(raw)
	if err != nil {
		t.Fatal(err)
	}
	known := registeredMetrics(t)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExprMetrics(t, "alert "+r.Alert, r.Expr, known)
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" || r.Labels["severity"] == "" {
				t.Errorf("alert %s: needs summary, description and a severity", r.Alert)
			}
		}
	}
	for _, want := range []string{"AllotPoolAlmostFull", "AllotSharedPoolAlmostFull", "AllotNodeRequestsPending", "AllotEC2Throttled", "AllotENIIPv6AcceptRA", "AllotStoreErrors"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing (have %v)", want, alerts)
		}
	}
	// The thresholds come from the values.
	custom := string(template(t, valuesCase{name: "thresholds", set: monitoringSet,
		values: "monitoring: {prometheusRule: {poolUsageThreshold: 0.75, pendingSeconds: 45}}\n"}))
	for _, want := range []string{") > 0.75\n", "> 45\n", "more than 75%"} {
		if !strings.Contains(custom, want) {
			t.Errorf("rendered rules lack %q with custom thresholds", want)
		}
	}
}

// TestMonitoringDashboard: the Grafana dashboard is valid JSON, its every query parses as
// PromQL and uses only metrics allotd registers, and the chart ships it in a ConfigMap
// Grafana's sidecar picks up.
func TestMonitoringDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(t), "files", "dashboards", "allot.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	known := registeredMetrics(t)
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			queries++
			// Grafana's variables, as Grafana substitutes them before Prometheus sees the query.
			expr := strings.ReplaceAll(tg.Expr, "$__rate_interval", "1m")
			checkExprMetrics(t, "panel "+p.Title, expr, known)
		}
	}
	if queries < 20 {
		t.Errorf("dashboard has %d queries; expected the pools, requests, store, operator and ENI rows", queries)
	}
	docs := decodeStrict(t, template(t, valuesCase{name: "monitoring", set: monitoringSet}))
	cm := find[*corev1.ConfigMap](t, docs, "allot-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" || cm.Data["allot.json"] != strings.TrimSuffix(string(b), "\n") {
		t.Errorf("dashboard ConfigMap: labels %v, data matches the file: %v", cm.Labels, cm.Data["allot.json"] == string(b))
	}
}

// checkExprMetrics parses expr as PromQL and fails for each metric it selects that allotd
// does not register (histogram series by their family name).
func checkExprMetrics(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	e, err := promqlParser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return
	}
	promql.Inspect(e, func(n promql.Node, _ []promql.Node) error {
		vs, ok := n.(*promql.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, cut := strings.CutSuffix(name, suf); cut && known[base] {
				name = base
			}
		}
		if !known[name] {
			t.Errorf("%s: metric %q is not registered by allotd", where, vs.Name)
		}
		return nil
	})
}

// registeredMetrics reads every metric name allotd's code defines: the Name (with Namespace
// and Subsystem) of each prometheus *Opts literal, the first argument of each
// prometheus.NewDesc, and the name argument of calls to a package's own metric helpers
// (a function whose *Opts literal takes its Name from a parameter), in the non-test Go files
// of core/ and plugins/. Read from the source rather than from a running daemon because no
// single daemon registers them all (ENI metrics exist only in ENI mode), and a vector without
// series is not exposed at all.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	root := repoRoot(t)
	for _, dir := range []string{"core", "plugins"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return err
			}
			return readPackageMetrics(p, names)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Sanity: the reader finds metrics of every kind of definition.
	for _, want := range []string{"allot_ipam_requests_waiting", "allot_operator_blocks_capacity", "allot_store_commits_total", "allot_aws_ec2_throttles_total"} {
		if !names[want] {
			t.Fatalf("registered metrics lack %s; the source reader is broken (found %d)", want, len(names))
		}
	}
	return names
}

// metricHelper is a function that builds a metric from an *Opts literal whose Name is its
// parameter number arg, under a fixed Namespace and Subsystem.
type metricHelper struct {
	ns, sub string
	arg     int
}

// readPackageMetrics adds the metric names the non-test files of one directory define.
func readPackageMetrics(dir string, names map[string]bool) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	helpers := map[string]metricHelper{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				findHelper(fd, helpers)
			}
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			addMetricName(n, helpers, names)
			return true
		})
	}
	return nil
}

// findHelper records fd in helpers when an *Opts literal in it takes Name from a parameter.
func findHelper(fd *ast.FuncDecl, helpers map[string]metricHelper) {
	params := map[string]int{}
	i := 0
	for _, f := range fd.Type.Params.List {
		for _, n := range f.Names {
			params[n.Name] = i
			i++
		}
	}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || !isOpts(lit) {
			return true
		}
		var h metricHelper
		nameParam := -1
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			switch k, _ := kv.Key.(*ast.Ident); {
			case k == nil:
			case k.Name == "Namespace":
				h.ns = stringLit(kv.Value)
			case k.Name == "Subsystem":
				h.sub = stringLit(kv.Value)
			case k.Name == "Name":
				if id, ok := kv.Value.(*ast.Ident); ok {
					if at, ok := params[id.Name]; ok {
						nameParam = at
					}
				}
			}
		}
		if nameParam >= 0 {
			h.arg = nameParam
			helpers[fd.Name.Name] = h
		}
		return true
	})
}

func isOpts(lit *ast.CompositeLit) bool {
	sel, ok := lit.Type.(*ast.SelectorExpr)
	return ok && strings.HasSuffix(sel.Sel.Name, "Opts")
}

// addMetricName adds the metric name n defines, if any.
func addMetricName(n ast.Node, helpers map[string]metricHelper, names map[string]bool) {
	switch n := n.(type) {
	case *ast.CompositeLit:
		if !isOpts(n) {
			return
		}
		parts := map[string]string{}
		for _, el := range n.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok {
					parts[k.Name] = stringLit(kv.Value)
				}
			}
		}
		if parts["Name"] != "" {
			names[joinName(parts["Namespace"], parts["Subsystem"], parts["Name"])] = true
		}
	case *ast.CallExpr:
		switch fn := n.Fun.(type) {
		case *ast.SelectorExpr:
			if fn.Sel.Name == "NewDesc" && len(n.Args) > 0 {
				if s := stringLit(n.Args[0]); s != "" {
					names[s] = true
				}
			}
		case *ast.Ident:
			if h, ok := helpers[fn.Name]; ok && h.arg < len(n.Args) {
				if s := stringLit(n.Args[h.arg]); s != "" {
					names[joinName(h.ns, h.sub, s)] = true
				}
			}
		}
	}
}

func stringLit(e ast.Expr) string {
	if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
		if s, err := strconv.Unquote(bl.Value); err == nil {
			return s
		}
	}
	return ""
}

// joinName is prometheus.BuildFQName.
func joinName(ns, sub, name string) string {
	var parts []string
	for _, p := range []string{ns, sub, name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "_")
}
