package spiderpool

import (
	"fmt"
	"net/netip"

	"github.com/allot-ipam/allot/core/importer/mapping"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Spiderpool's owner kinds (pkg/constant) whose pods keep their addresses.
const (
	ownerStatefulSet = "StatefulSet"
	ownerKubevirtVM  = "VirtualMachine"
	ownerKubevirtVMI = "VirtualMachineInstance"
)

type spiderEndpoint struct {
	Status struct {
		Current struct {
			UID  string `json:"uid"`
			Node string `json:"node"`
			IPs  []struct {
				NIC  string  `json:"interface"`
				IPv4 *string `json:"ipv4"`
				IPv6 *string `json:"ipv6"`
			} `json:"ips"`
		} `json:"current"`
		OwnerControllerType string `json:"ownerControllerType"`
		OwnerControllerName string `json:"ownerControllerName"`
	} `json:"status"`
}

// endpoint is what a SpiderEndpoint tells about its pod.
type endpoint struct {
	uid, node, ownerKind, ownerName string
	nic                             map[netip.Addr]string
}

// endpoints indexes the SpiderEndpoints by namespace/name (the pod's).
func endpoints(res *mapping.Result, objs []*unstructured.Unstructured) (map[string]*endpoint, error) {
	out := map[string]*endpoint{}
	for _, u := range objs {
		o := res.On(u)
		var in spiderEndpoint
		if err := o.Decode(u, &in); err != nil {
			return nil, err
		}
		c := in.Status.Current
		ep := &endpoint{uid: c.UID, node: c.Node, ownerKind: in.Status.OwnerControllerType,
			ownerName: in.Status.OwnerControllerName, nic: map[netip.Addr]string{}}
		for i, ip := range c.IPs {
			for _, s := range []struct {
				field string
				v     *string
			}{{"ipv4", ip.IPv4}, {"ipv6", ip.IPv6}} {
				if s.v == nil || *s.v == "" {
					continue
				}
				a, err := o.Addr(fmt.Sprintf("status.current.ips[%d].%s", i, s.field), *s.v)
				if err != nil {
					return nil, err
				}
				ep.nic[a] = ip.NIC
			}
		}
		out[u.GetNamespace()+"/"+u.GetName()] = ep
	}
	return out, nil
}

// holderFromEndpoint completes a claim's holder from the pod's SpiderEndpoint. The CNI
// container ID is known to no Spiderpool object: the claim carries none, the pod's next
// ADD (same pod UID) takes it over, the node's CNI GC skips it (no network, no
// AllotEndpoint: core/sharedpool release.go), and the operator's GC frees it once the pod is
// gone.
func holderFromEndpoint(o mapping.Object, field string, addr netip.Addr, h *allotv1.AddressHolder, ep *endpoint) {
	if ep == nil || ep.uid != h.PodUID {
		o.Warn(field, "no SpiderEndpoint %s/%s of pod UID %s: the claim's node is left empty and its interface assumed eth0", h.Namespace, h.Pod, h.PodUID)
		return
	}
	h.Node = ep.node
	if nic := ep.nic[addr]; nic != "" {
		h.Interface = nic
	}
	switch ep.ownerKind {
	case ownerStatefulSet:
		h.StatefulSet = ep.ownerName
	case ownerKubevirtVM, ownerKubevirtVMI:
		h.VirtualMachine = ep.ownerName
	}
}
