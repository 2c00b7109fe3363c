// Package k8s holds allot's shared Kubernetes glue: the API scheme with the built-in types and
// allot's custom resources, and small helpers the agent and operator share.
package k8s

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// NewScheme returns a new scheme holding the client-go built-in types and allot.io/v1alpha1,
// for callers that add types of their own; the others share Scheme.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(allotv1.AddToScheme(s))
	return s
}

// Scheme is the process's scheme of NewScheme's types, built once on first use and never
// changed after (a runtime.Scheme is safe for concurrent reads, as client-go's process-wide
// scheme.Scheme is). Building one registers several hundred types through reflection, a
// cost every client paid again: the scale test's thousands of in-process agents spent a
// tenth of their CPU on it. Callers must not add types to it: use NewScheme.
var Scheme = sync.OnceValue(NewScheme)
