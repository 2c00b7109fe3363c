package chart

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/allot-ipam/allot/internal/testenv"
)

// kubeSystemServiceAccountsPrecedence is the matchingPrecedence of the built-in FlowSchema
// kube-system-service-accounts (k8s.io/apiserver's bootstrap configuration), which the
// operator's requests would otherwise match, in one flow with every agent of its namespace.
const kubeSystemServiceAccountsPrecedence = 900

// checkFlowSchema: with the operator and apiPriorityAndFairness.enabled, a FlowSchema matches
// the operator's ServiceAccount in the release namespace before kube-system-service-accounts
// does, for every request, at workload-high with a flow per user; agents are not in it.
func checkFlowSchema(t *testing.T, docs []doc, v values) {
	t.Helper()
	fs, ok := lookup[*flowcontrolv1.FlowSchema](docs, "allot-operator")
	if want := v.Operator.Enabled && v.APF.Enabled; ok != want {
		t.Fatalf("FlowSchema allot-operator rendered %v, want %v", ok, want)
	}
	if !ok {
		return
	}
	s := fs.Spec
	if s.MatchingPrecedence <= 0 || s.MatchingPrecedence >= kubeSystemServiceAccountsPrecedence {
		t.Errorf("FlowSchema matchingPrecedence %d: must be in (0, %d) to match before kube-system-service-accounts",
			s.MatchingPrecedence, kubeSystemServiceAccountsPrecedence)
	}
	if s.PriorityLevelConfiguration.Name != "workload-high" {
		t.Errorf("FlowSchema priority level %q, want workload-high", s.PriorityLevelConfiguration.Name)
	}
	if s.DistinguisherMethod == nil || s.DistinguisherMethod.Type != flowcontrolv1.FlowDistinguisherMethodByUserType {
		t.Errorf("FlowSchema distinguisherMethod %+v, want ByUser", s.DistinguisherMethod)
	}
	if len(s.Rules) != 1 {
		t.Fatalf("FlowSchema: %d rules, want 1", len(s.Rules))
	}
	r := s.Rules[0]
	if len(r.Subjects) != 1 || r.Subjects[0].Kind != flowcontrolv1.SubjectKindServiceAccount || r.Subjects[0].ServiceAccount == nil ||
		r.Subjects[0].ServiceAccount.Name != "allot-operator" || r.Subjects[0].ServiceAccount.Namespace != Namespace {
		t.Errorf("FlowSchema subjects %+v: want the ServiceAccount allot-operator in %s alone", r.Subjects, Namespace)
	}
	find[*corev1.ServiceAccount](t, docs, "allot-operator")
	all := []string{flowcontrolv1.VerbAll}
	if len(r.ResourceRules) != 1 || !slices.Equal(r.ResourceRules[0].Verbs, all) || !slices.Equal(r.ResourceRules[0].APIGroups, all) ||
		!slices.Equal(r.ResourceRules[0].Resources, all) || !slices.Equal(r.ResourceRules[0].Namespaces, all) || !r.ResourceRules[0].ClusterScope {
		t.Errorf("FlowSchema resourceRules %+v: want every request", r.ResourceRules)
	}
	if len(r.NonResourceRules) != 1 || !slices.Equal(r.NonResourceRules[0].NonResourceURLs, all) {
		t.Errorf("FlowSchema nonResourceRules %+v: want every URL (discovery, /version)", r.NonResourceRules)
	}
}

// checkFlowSchemaLive: the API server classifies the operator's requests (impersonated) under
// the chart's FlowSchema, as its response header X-Kubernetes-PF-FlowSchema-UID says, once its
// APF controller has seen the object.
func checkFlowSchemaLive(t *testing.T, c client.Client, cfg *rest.Config) {
	t.Helper()
	var fs flowcontrolv1.FlowSchema
	if err := c.Get(context.Background(), client.ObjectKey{Name: "allot-operator"}, &fs); err != nil {
		t.Fatal(err)
	}
	imp := rest.CopyConfig(cfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + Namespace + ":allot-operator"}
	hc, err := rest.HTTPClientFor(imp)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the operator's requests classified under FlowSchema allot-operator", func() (bool, string) {
		resp, err := hc.Get(strings.TrimSuffix(imp.Host, "/") + "/version")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		got := resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")
		return got == string(fs.UID), "FlowSchema UID " + got + ", want " + string(fs.UID)
	})
}
