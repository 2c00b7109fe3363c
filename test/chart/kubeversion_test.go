package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// servedSince is the Kubernetes minor version (1.x) from which each built-in kind the chart
// renders is served at the API version it uses, from the Kubernetes deprecated API migration
// guide (https://kubernetes.io/docs/reference/using-api/deprecation-guide/) and the release
// notes of each graduation. A kind missing here fails TestChartTemplate: add it with its minor.
var servedSince = map[schema.GroupVersionKind]int{
	{Version: "v1", Kind: "ConfigMap"}:                                                             0,
	{Version: "v1", Kind: "Secret"}:                                                                0,
	{Version: "v1", Kind: "Service"}:                                                               0,
	{Version: "v1", Kind: "ServiceAccount"}:                                                        0,
	{Group: "apps", Version: "v1", Kind: "DaemonSet"}:                                              9,
	{Group: "apps", Version: "v1", Kind: "Deployment"}:                                             9,
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}:                       8,
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}:                8,
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}:                              8,
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"}:                       8,
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}:                                  21,
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"}: 16,
	// KEP-3488 (CEL admission control), GA in 1.30: this is what sets the chart's floor.
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}:        30,
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"}: 30,
	// KEP-1040 (API Priority and Fairness), GA in 1.29 (v1beta3: 1.26 to 1.31).
	{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Kind: "FlowSchema"}: 29,
}

// crdGroups are the groups of custom resources the chart renders: served by their CRDs, not by
// a Kubernetes version.
var crdGroups = map[string]bool{"allot.io": true, "cert-manager.io": true, "monitoring.coreos.com": true}

// kubeFloor is the lowest Kubernetes minor (1.x) Chart.yaml's kubeVersion admits; the chart
// writes it ">=1.N.0-0" (the -0 admits providers' pre-release suffixes, as v1.30.2-eks-1552ad0).
func kubeFloor(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		KubeVersion string `json:"kubeVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^>=1\.([0-9]+)\.0-0$`).FindStringSubmatch(c.KubeVersion)
	if m == nil {
		t.Fatalf("Chart.yaml kubeVersion %q: want >=1.N.0-0", c.KubeVersion)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// kubeVersionArgs render as for the oldest Kubernetes the chart admits.
func kubeVersionArgs(t testing.TB) []string {
	return []string{"--kube-version", "1." + strconv.Itoa(kubeFloor(t)) + ".0"}
}

// checkServedAtFloor: every built-in object is at an API version the oldest Kubernetes the
// chart admits serves, so no install the chart accepts fails on a missing kind. Helm's
// client-only rendering (helm template, and Argo CD's) always claims every API version its own
// client-go knows, whatever --api-versions and --kube-version say, so a
// .Capabilities.APIVersions switch would not be seen there: the floor is what keeps the
// versions honest.
func checkServedAtFloor(t *testing.T, docs []doc) {
	t.Helper()
	floor := kubeFloor(t)
	for _, d := range docs {
		if crdGroups[d.gvk.Group] {
			continue
		}
		since, ok := servedSince[d.gvk]
		if !ok {
			t.Errorf("%s %s: %s not in servedSince (kubeversion_test.go): add the Kubernetes minor that serves it", d.gvk.Kind, d.name, d.gvk.GroupVersion())
			continue
		}
		if since > floor {
			t.Errorf("%s %s: %s is served from Kubernetes 1.%d, but Chart.yaml admits 1.%d", d.gvk.Kind, d.name, d.gvk.GroupVersion(), since, floor)
		}
	}
}

// TestChartRefusesOlderKubernetes: below its floor the chart is refused before anything is
// installed, with Helm's message naming kubeVersion, whatever apiPriorityAndFairness says.
func TestChartRefusesOlderKubernetes(t *testing.T) {
	older := "1." + strconv.Itoa(kubeFloor(t)-1) + ".9"
	for _, c := range []valuesCase{{name: "defaults"}, {name: "no-flowschema", set: []string{"apiPriorityAndFairness.enabled=false"}}} {
		args := append([]string{"template", ReleaseName, chartDir(t), "--namespace", Namespace, "--kube-version", older}, c.args(t)...)
		_, err := tryHelm(t, nil, args...)
		if err == nil || !strings.Contains(err.Error(), "requires kubeVersion") {
			t.Errorf("%s at Kubernetes %s: %v, want Helm's refusal naming kubeVersion", c.name, older, err)
		}
	}
}
