package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReservedIP lists addresses no shared pool ever hands out (Spiderpool's SpiderReservedIP):
// addresses used outside Kubernetes in an underlay subnet, for instance. Reserving an address
// a pod already holds does not take it from the pod; it is not handed out again once freed.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rip,categories=allot
// +kubebuilder:printcolumn:name="IPS",type=string,JSONPath=`.spec.ips`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type ReservedIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ReservedIPSpec `json:"spec"`
}

// ReservedIPSpec holds the reserved addresses.
type ReservedIPSpec struct {
	// IPs are single addresses ("172.18.0.1") or inclusive ranges
	// ("172.18.0.1-172.18.0.9") of either family.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=91
	IPs []string `json:"ips"`
}

// ReservedIPList is a list of ReservedIPs.
//
// +kubebuilder:object:root=true
type ReservedIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ReservedIP `json:"items"`
}
