package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of allot's custom resources.
const GroupName = "allot.io"

// SchemeGroupVersion is group allot.io, version v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder registers this package's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns the group-qualified resource for a plural resource name.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion,
		&IPPool{}, &IPPoolList{},
		&AllotNode{}, &AllotNodeList{},
		&ClusterCIDRConfig{}, &ClusterCIDRConfigList{},
		&SharedIPPool{}, &SharedIPPoolList{},
		&AddressClaim{}, &AddressClaimList{},
		&AllotEndpoint{}, &AllotEndpointList{},
		&ReservedIP{}, &ReservedIPList{},
		&AllotSubnet{}, &AllotSubnetList{},
	)
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
