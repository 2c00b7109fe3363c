package k8s

import (
	"fmt"
	"sync"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Kinds whose REST mapping is known without asking the API server, and whether they are
// namespaced. allot.io's scopes are those of deploy/crds (the +kubebuilder:resource markers
// of core/k8s/apis); a test checks them against the generated CRDs.
var staticKinds = []struct {
	gvk        schema.GroupVersionKind
	namespaced bool
}{
	{corev1.SchemeGroupVersion.WithKind("Pod"), true},
	{corev1.SchemeGroupVersion.WithKind("Node"), false},
	{corev1.SchemeGroupVersion.WithKind("Namespace"), false},
	{corev1.SchemeGroupVersion.WithKind("Event"), true},
	{appsv1.SchemeGroupVersion.WithKind("DaemonSet"), true},
	{appsv1.SchemeGroupVersion.WithKind("Deployment"), true},
	{appsv1.SchemeGroupVersion.WithKind("ReplicaSet"), true},
	{appsv1.SchemeGroupVersion.WithKind("StatefulSet"), true},
	{batchv1.SchemeGroupVersion.WithKind("Job"), true},
	{coordinationv1.SchemeGroupVersion.WithKind("Lease"), true},
	{allotv1.SchemeGroupVersion.WithKind("AllotNode"), false},
	{allotv1.SchemeGroupVersion.WithKind("IPPool"), false},
	{allotv1.SchemeGroupVersion.WithKind("ClusterCIDRConfig"), false},
	{allotv1.SchemeGroupVersion.WithKind("SharedIPPool"), false},
	{allotv1.SchemeGroupVersion.WithKind("ReservedIP"), false},
	{allotv1.SchemeGroupVersion.WithKind("AddressClaim"), false},
	{allotv1.SchemeGroupVersion.WithKind("AllotEndpoint"), true},
	{allotv1.SchemeGroupVersion.WithKind("AllotSubnet"), false},
}

// RESTMapper is the RESTMapper of allot's components (agent, node routes, operator): the
// kinds they use are mapped statically, so building a client or an informer cache never asks
// the API server. controller-runtime's default mapper runs discovery for every kind the cache is
// told about when the cache is built (to learn whether it is namespaced), which fails while
// the API server is unreachable, and the agent must start then and serve from its node
// store; an operator that lost its Lease in an outage builds its next term's cache the
// same way, and would otherwise wait out a retry after the API server is back. Any other kind falls back to controller-runtime's lazy discovery mapper.
func RESTMapper(cfg *rest.Config) (meta.RESTMapper, error) {
	static := staticMapper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8s: HTTP client: %w", err)
	}
	lazy, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("k8s: discovery mapper: %w", err)
	}
	return staticFirst{static: static, fallback: lazy}, nil
}

// staticMapper maps staticKinds. Built once per process and only read after (every mapper
// of the process shares it): its maps took ~18 KiB of each of the scale test's agents.
var staticMapper = sync.OnceValue(func() meta.RESTMapper {
	static := meta.NewDefaultRESTMapper(nil)
	for _, k := range staticKinds {
		scope := meta.RESTScopeRoot
		if k.namespaced {
			scope = meta.RESTScopeNamespace
		}
		static.Add(k.gvk, scope)
	}
	return static
})

// staticFirst answers from static and asks fallback only for what static does not know, so
// a known kind never waits on discovery (meta.MultiRESTMapper asks every mapper, every time).
type staticFirst struct {
	static, fallback meta.RESTMapper
}

func (m staticFirst) KindFor(r schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	k, err := m.static.KindFor(r)
	if meta.IsNoMatchError(err) {
		return m.fallback.KindFor(r)
	}
	return k, err
}

func (m staticFirst) KindsFor(r schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	k, err := m.static.KindsFor(r)
	if meta.IsNoMatchError(err) {
		return m.fallback.KindsFor(r)
	}
	return k, err
}

func (m staticFirst) ResourceFor(r schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	out, err := m.static.ResourceFor(r)
	if meta.IsNoMatchError(err) {
		return m.fallback.ResourceFor(r)
	}
	return out, err
}

func (m staticFirst) ResourcesFor(r schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	out, err := m.static.ResourcesFor(r)
	if meta.IsNoMatchError(err) {
		return m.fallback.ResourcesFor(r)
	}
	return out, err
}

func (m staticFirst) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	out, err := m.static.RESTMapping(gk, versions...)
	if meta.IsNoMatchError(err) {
		return m.fallback.RESTMapping(gk, versions...)
	}
	return out, err
}

func (m staticFirst) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	out, err := m.static.RESTMappings(gk, versions...)
	if meta.IsNoMatchError(err) || (err == nil && len(out) == 0) {
		return m.fallback.RESTMappings(gk, versions...)
	}
	return out, err
}

func (m staticFirst) ResourceSingularizer(resource string) (string, error) {
	out, err := m.static.ResourceSingularizer(resource)
	if err != nil {
		return m.fallback.ResourceSingularizer(resource)
	}
	return out, nil
}
