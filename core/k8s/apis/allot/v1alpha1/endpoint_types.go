package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AllotEndpoint is the per-pod record of addresses from shared pools (Spiderpool's
// SpiderEndpoint): one entry per interface with its addresses, pools, gateway and routes. It
// lives in the pod's namespace under the pod's name. For a StatefulSet pod it outlives the
// pod, so the recreated pod gets the same addresses; for other pods it goes with the pod.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=aep,categories=allot
// +kubebuilder:printcolumn:name="INTERFACE",type=string,JSONPath=`.spec.interfaces[0].interface`
// +kubebuilder:printcolumn:name="IPV4",type=string,JSONPath=`.spec.interfaces[0].ips[?(@.family=="ipv4")].address`
// +kubebuilder:printcolumn:name="IPV6",type=string,JSONPath=`.spec.interfaces[0].ips[?(@.family=="ipv6")].address`
// +kubebuilder:printcolumn:name="NODE",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="STATEFULSET",type=string,JSONPath=`.spec.statefulSet`,priority=1
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type AllotEndpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AllotEndpointSpec `json:"spec"`
}

// AllotEndpointSpec is what the pod holds.
type AllotEndpointSpec struct {
	// PodUID is the UID of the pod that holds the addresses now.
	// +kubebuilder:validation:MaxLength=64
	PodUID string `json:"podUID"`
	// Node is the node the pod runs on.
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// StatefulSet names the pod's StatefulSet, when it has one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StatefulSet string `json:"statefulSet,omitempty"`
	// VirtualMachine names the KubeVirt VirtualMachine whose addresses these are; the
	// endpoint is then named after the VM, not the pod, and outlives the VM's pods.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	VirtualMachine string `json:"virtualMachine,omitempty"`
	// Interfaces are the pod's interfaces with shared-pool addresses.
	// +optional
	// +listType=map
	// +listMapKey=interface
	// +kubebuilder:validation:MaxItems=16
	Interfaces []EndpointInterface `json:"interfaces,omitempty"`
}

// EndpointInterface is one interface of the pod.
type EndpointInterface struct {
	// Interface is the name inside the pod (eth0, net1, ...).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16
	Interface string `json:"interface"`
	// ContainerID is the CNI container ID the interface was set up for.
	// +kubebuilder:validation:MaxLength=256
	ContainerID string `json:"containerID"`
	// Network is the CNI network name.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Network string `json:"network,omitempty"`
	// IPs are the interface's addresses, one per family.
	// +kubebuilder:validation:MaxItems=2
	// +listType=atomic
	IPs []EndpointIP `json:"ips"`
	// Routes are the routes the pod got on this interface.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Routes []RouteSpec `json:"routes,omitempty"`
}

// EndpointIP is one address of an interface.
type EndpointIP struct {
	// Family is ipv4 or ipv6.
	// +kubebuilder:validation:Enum=ipv4;ipv6
	Family string `json:"family"`
	// Address is the address with the subnet's prefix length, e.g. 172.18.0.10/16.
	// +kubebuilder:validation:MaxLength=49
	Address string `json:"address"`
	// Pool is the SharedIPPool the address came from.
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// Gateway is the pool's gateway for this family.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	Gateway string `json:"gateway,omitempty"`
}

// AllotEndpointList is a list of AllotEndpoints.
//
// +kubebuilder:object:root=true
type AllotEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AllotEndpoint `json:"items"`
}
