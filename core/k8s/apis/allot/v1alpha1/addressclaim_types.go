package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddressClaim records that one address of a SharedIPPool is held. Its name is derived from
// the address alone (ClaimName), so creating it is the atomic test-and-set of the address:
// the API server accepts exactly one Create per name, whichever agent races for it. Nothing
// else serialises allocations, so agents on different nodes never wait on one another.
//
// The holder is updated in place (with resourceVersion) when a StatefulSet pod is recreated
// and takes its address back; the garbage collector deletes a claim only with a
// UID + resourceVersion precondition, so a claim taken over meanwhile is never freed.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ac,categories=allot
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.spec.ip`
// +kubebuilder:printcolumn:name="POOL",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="NAMESPACE",type=string,JSONPath=`.spec.holder.namespace`
// +kubebuilder:printcolumn:name="POD",type=string,JSONPath=`.spec.holder.pod`
// +kubebuilder:printcolumn:name="NODE",type=string,JSONPath=`.spec.holder.node`
// +kubebuilder:printcolumn:name="INTERFACE",type=string,JSONPath=`.spec.holder.interface`,priority=1
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type AddressClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AddressClaimSpec `json:"spec"`
}

// AddressClaimSpec is who holds the address.
//
// +kubebuilder:validation:XValidation:rule="self.ip == oldSelf.ip && self.pool == oldSelf.pool",message="ip and pool are immutable (the claim's name is the address)"
type AddressClaimSpec struct {
	// IP is the address held, in canonical form.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	IP string `json:"ip"`
	// Pool is the SharedIPPool the address came from.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// Holder is the pod interface holding the address.
	Holder AddressHolder `json:"holder"`
}

// AddressHolder is one interface of one pod.
type AddressHolder struct {
	// Namespace and Pod name the pod.
	// +kubebuilder:validation:MaxLength=253
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// PodUID is the pod's UID when the address was taken (or taken back).
	// +kubebuilder:validation:MaxLength=64
	PodUID string `json:"podUID"`
	// Node is the node the pod ran on.
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// ContainerID is the CNI container ID (the sandbox) of the interface.
	// +kubebuilder:validation:MaxLength=256
	ContainerID string `json:"containerID"`
	// Interface is the interface name inside the pod (eth0, net1, ...).
	// +kubebuilder:validation:MaxLength=16
	Interface string `json:"interface"`
	// StatefulSet names the pod's StatefulSet when it has one: the address then outlives the
	// pod and goes back to the recreated pod of the same name.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StatefulSet string `json:"statefulSet,omitempty"`
	// VirtualMachine names the KubeVirt VirtualMachine (or VirtualMachineInstance) whose
	// virt-launcher pod this is: the address then belongs to the VM, outlives the pod and
	// goes to the VM's next virt-launcher pod (restart, live migration).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	VirtualMachine string `json:"virtualMachine,omitempty"`
	// Network is the CNI network the interface was set up for (CNI GC is per network).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Network string `json:"network,omitempty"`
}

// AddressClaimList is a list of AddressClaims.
//
// +kubebuilder:object:root=true
type AddressClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddressClaim `json:"items"`
}
