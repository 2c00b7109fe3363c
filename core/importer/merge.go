package importer

import (
	"fmt"
	"maps"
	"slices"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Merge returns what an import writes over an allot object that already exists: desired's
// spec on existing's metadata (labels and annotations added to), except where replacing
// would take an address from someone. An AllotNode keeps every block and ENI address it
// has and gains the imported ones, and keeps what its agent wrote (requests, spec.eni); an
// AddressClaim held by another pod is a conflict (refused: the address is that pod's).
// changed says whether anything differs from existing.
func Merge(existing, desired client.Object) (merged client.Object, changed bool, err error) {
	out := existing.DeepCopyObject().(client.Object)
	out.SetLabels(union(existing.GetLabels(), desired.GetLabels()))
	out.SetAnnotations(union(existing.GetAnnotations(), desired.GetAnnotations()))
	switch d := desired.(type) {
	case *allotv1.AllotNode:
		mergeNode(out.(*allotv1.AllotNode), d)
	case *allotv1.AddressClaim:
		e := existing.(*allotv1.AddressClaim)
		if e.Spec.Pool != d.Spec.Pool || e.Spec.Holder.PodUID != d.Spec.Holder.PodUID {
			return nil, false, fmt.Errorf("AddressClaim %s: %s is held by pod %s/%s (UID %s) of pool %s; the import wants it for %s/%s (UID %s) of pool %s",
				e.Name, e.Spec.IP, e.Spec.Holder.Namespace, e.Spec.Holder.Pod, e.Spec.Holder.PodUID, e.Spec.Pool,
				d.Spec.Holder.Namespace, d.Spec.Holder.Pod, d.Spec.Holder.PodUID, d.Spec.Pool)
		}
		// Held by the same pod: the claim the agent wrote is more precise (container ID).
	case *allotv1.IPPool:
		out.(*allotv1.IPPool).Spec = d.Spec
	case *allotv1.SharedIPPool:
		out.(*allotv1.SharedIPPool).Spec = d.Spec
	case *allotv1.AllotSubnet:
		o := out.(*allotv1.AllotSubnet)
		o.Spec = d.Spec
		for _, a := range d.Status.Allocations {
			if !slices.ContainsFunc(o.Status.Allocations, func(x allotv1.SubnetAllocation) bool { return x.Pool == a.Pool }) {
				o.Status.Allocations = append(o.Status.Allocations, a)
			}
		}
	case *allotv1.ReservedIP:
		out.(*allotv1.ReservedIP).Spec = d.Spec
	case *allotv1.ClusterCIDRConfig:
		out.(*allotv1.ClusterCIDRConfig).Spec = d.Spec
	default:
		return nil, false, fmt.Errorf("%T: not a kind the import writes", desired)
	}
	return out, !equality.Semantic.DeepEqual(existing, out), nil
}

func union(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

func mergeNode(e, d *allotv1.AllotNode) {
	for _, a := range d.Spec.IPAM.Pools.Allocated {
		i := slices.IndexFunc(e.Spec.IPAM.Pools.Allocated, func(x allotv1.PoolAllocation) bool { return x.Pool == a.Pool })
		if i < 0 {
			e.Spec.IPAM.Pools.Allocated = append(e.Spec.IPAM.Pools.Allocated, a)
			continue
		}
		for _, c := range a.CIDRs {
			if !slices.Contains(e.Spec.IPAM.Pools.Allocated[i].CIDRs, c) {
				e.Spec.IPAM.Pools.Allocated[i].CIDRs = append(e.Spec.IPAM.Pools.Allocated[i].CIDRs, c)
			}
		}
	}
	if len(e.Spec.IPAM.Pools.Requested) == 0 {
		e.Spec.IPAM.Pools.Requested = d.Spec.IPAM.Pools.Requested
	}
	if len(d.Spec.IPAM.Pool) > 0 {
		e.Spec.IPAM.Pool = union2(e.Spec.IPAM.Pool, d.Spec.IPAM.Pool)
	}
	if e.Spec.ENI == nil {
		e.Spec.ENI = d.Spec.ENI
	}
	if len(d.Status.IPAM.Used) > 0 {
		e.Status.IPAM.Used = union2(e.Status.IPAM.Used, d.Status.IPAM.Used)
	}
}

// union2 adds b's entries missing from a (a's win: the cluster's state is newer).
func union2[V any](a, b map[string]V) map[string]V {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]V{}
	}
	for k, v := range b {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}
