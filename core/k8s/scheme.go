// Package k8s holds allot's shared Kubernetes glue: the API scheme with the built-in types and
// allot's custom resources, and small helpers the agent and operator share.
package k8s

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// NewScheme returns a scheme holding the client-go built-in types and allot.io/v1alpha1.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(allotv1.AddToScheme(s))
	return s
}
