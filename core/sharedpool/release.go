package sharedpool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// getEndpoint reads the pod's AllotEndpoint from the API server; nil when there is none.
func (a *Allocator) getEndpoint(ctx context.Context, ns, name string) (*v1alpha1.AllotEndpoint, error) {
	var ep v1alpha1.AllotEndpoint
	err := a.apiCall("get", "AllotEndpoint", func() error {
		return a.opts.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &ep)
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &ep, nil
}

// writeEndpoint records the interface in the pod's endpoint (created, or updated with
// resourceVersion). An endpoint left by an earlier pod of the same name that is not a
// StatefulSet sibling is replaced.
func (a *Allocator) writeEndpoint(ctx context.Context, w *want, ep *v1alpha1.AllotEndpoint, it v1alpha1.EndpointInterface) error {
	mutate := func(e *v1alpha1.AllotEndpoint) {
		if !w.fixedOwner(e) {
			e.Spec.Interfaces = nil
		}
		e.Spec.PodUID, e.Spec.Node, e.Spec.StatefulSet, e.Spec.VirtualMachine = w.holder.PodUID, a.opts.Node, w.sts, w.vm
		e.Spec.Interfaces = slices.DeleteFunc(e.Spec.Interfaces, func(x v1alpha1.EndpointInterface) bool { return x.Interface == it.Interface })
		e.Spec.Interfaces = append(e.Spec.Interfaces, it)
		slices.SortFunc(e.Spec.Interfaces, func(x, y v1alpha1.EndpointInterface) int { return strings.Compare(x.Interface, y.Interface) })
		if w.sts == "" && w.vm == "" {
			// Goes with the pod: the API server's garbage collector removes it with the pod.
			e.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: w.holder.Pod, UID: types.UID(w.holder.PodUID)}}
		} else {
			e.OwnerReferences = nil // outlives the pod (the operator's GC frees it with the StatefulSet or VM)
		}
	}
	key := types.NamespacedName{Namespace: w.holder.Namespace, Name: w.endpointName()}
	for attempt := 0; attempt < 8; attempt++ {
		if ep == nil {
			n := &v1alpha1.AllotEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
			mutate(n)
			err := a.apiCall("create", "AllotEndpoint", func() error { return a.opts.Client.Create(ctx, n) })
			if err == nil || !apierrors.IsAlreadyExists(err) {
				return err
			}
			if ep, err = a.getEndpoint(ctx, key.Namespace, key.Name); err != nil {
				return err
			}
			continue
		}
		cp := ep.DeepCopy()
		mutate(cp)
		if equality.Semantic.DeepEqual(cp.Spec, ep.Spec) && equality.Semantic.DeepEqual(cp.OwnerReferences, ep.OwnerReferences) {
			return nil
		}
		err := a.apiCall("update", "AllotEndpoint", func() error { return a.opts.Client.Update(ctx, cp) })
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			if ep, err = a.getEndpoint(ctx, key.Namespace, key.Name); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return fmt.Errorf("AllotEndpoint %s keeps changing", key)
}

// ownerClaims are the claims held by one interface (container ID and interface name),
// looked up by pod when the request names it, else among this node's claims.
func (a *Allocator) ownerClaims(o api.Owner, pod api.PodRef) []*v1alpha1.AddressClaim {
	var all []*v1alpha1.AddressClaim
	if pod.Namespace != "" && pod.Name != "" {
		all = a.idx.podClaims(pod.Namespace, pod.Name)
	} else {
		all = a.idx.nodeClaims(a.opts.Node)
	}
	var out []*v1alpha1.AddressClaim
	for _, c := range all {
		if c.Spec.Holder.ContainerID == o.ContainerID && c.Spec.Holder.Interface == o.IfName {
			out = append(out, c)
		}
	}
	return out
}

// deleteClaim deletes a claim with a UID + resourceVersion precondition, re-reading it on a
// conflict: it is deleted only while match(holder) still holds, so a claim another pod took
// meanwhile is never freed.
func (a *Allocator) deleteClaim(ctx context.Context, c *v1alpha1.AddressClaim, match func(v1alpha1.AddressHolder) bool) error {
	for attempt := 0; attempt < 5; attempt++ {
		uid, rv := c.UID, c.ResourceVersion
		err := a.apiCall("delete", "AddressClaim", func() error {
			return a.opts.Client.Delete(ctx, c, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		})
		if err == nil || apierrors.IsNotFound(err) {
			a.idx.noteDeleted(c)
			a.m.released.WithLabelValues(c.Spec.Pool).Inc()
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		var cur v1alpha1.AddressClaim
		err = a.apiCall("get", "AddressClaim", func() error {
			return a.opts.Client.Get(ctx, types.NamespacedName{Name: c.Name}, &cur)
		})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != c.UID || !match(cur.Spec.Holder) {
			return nil // someone else's now
		}
		c = &cur
	}
	return fmt.Errorf("AddressClaim %s keeps changing", c.Name)
}

// Release implements CNI DEL (api.Service). A StatefulSet pod's addresses are kept; other
// pods' claims are deleted and the interface leaves the endpoint. When the API server does
// not answer, DEL logs and succeeds: the runtime would otherwise retry forever on a pod that
// is gone, and the operator's garbage collector frees claims of pods that no longer exist.
func (a *Allocator) Release(ctx context.Context, req *api.ReleaseRequest) error {
	begin := time.Now()
	err := a.release(ctx, req)
	if err != nil && api.CodeOf(err) != api.CodeInvalid {
		a.log.Warn("shared DEL could not finish; succeeding anyway, the operator's GC frees what is left",
			"owner", req.Owner.String(), "pod", req.Pod.Namespace+"/"+req.Pod.Name, "err", err)
		err = nil
	}
	a.m.observe("release", begin, err)
	return err
}

func (a *Allocator) release(ctx context.Context, req *api.ReleaseRequest) error {
	if err := req.Owner.Validate(); err != nil {
		return err
	}
	pod := req.Pod
	mine := a.ownerClaims(req.Owner, pod)
	if len(mine) > 0 {
		pod.Namespace, pod.Name = mine[0].Spec.Holder.Namespace, mine[0].Spec.Holder.Pod
	}
	if pod.Namespace == "" || pod.Name == "" {
		return nil // nothing held, and no pod to look at
	}
	done, err := a.acquire(ctx, podKey(pod.Namespace, pod.Name))
	if err != nil {
		return err
	}
	defer done()
	mine = a.ownerClaims(req.Owner, pod)
	for _, c := range mine {
		if c.Spec.Holder.StatefulSet != "" || c.Spec.Holder.VirtualMachine != "" {
			// The VM's addresses stay for its next pod (restart, migration) until the VM
			// is deleted; the operator's GC frees them then.
			a.log.Debug("DEL of a StatefulSet or VM pod keeps its addresses", "owner", req.Owner.String(), "pod", pod.Namespace+"/"+pod.Name)
			return nil
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.WriteTimeout)
	defer cancel()
	match := func(h v1alpha1.AddressHolder) bool {
		return h.ContainerID == req.Owner.ContainerID && h.Interface == req.Owner.IfName && h.StatefulSet == "" && h.VirtualMachine == ""
	}
	var errs []error
	for _, c := range mine {
		if err := a.deleteClaim(wctx, c, match); err != nil {
			errs = append(errs, fmt.Errorf("delete AddressClaim %s: %w", c.Name, err))
		}
	}
	if err := a.dropInterface(wctx, pod, req.Owner); err != nil {
		errs = append(errs, err)
	}
	if len(mine) > 0 {
		a.log.Debug("shared release", "owner", req.Owner.String(), "pod", pod.Namespace+"/"+pod.Name, "claims", len(mine))
	}
	return errors.Join(errs...)
}

// dropInterface removes the owner's interface from the pod's endpoint, deleting the endpoint
// when nothing is left. A StatefulSet pod's endpoint is kept.
func (a *Allocator) dropInterface(ctx context.Context, pod api.PodRef, o api.Owner) error {
	for attempt := 0; attempt < 5; attempt++ {
		ep, err := a.getEndpoint(ctx, pod.Namespace, pod.Name)
		if err != nil {
			return fmt.Errorf("read AllotEndpoint %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if ep == nil || ep.Spec.StatefulSet != "" {
			return nil
		}
		keep := slices.DeleteFunc(slices.Clone(ep.Spec.Interfaces), func(x v1alpha1.EndpointInterface) bool {
			return x.Interface == o.IfName && x.ContainerID == o.ContainerID
		})
		if len(keep) == len(ep.Spec.Interfaces) {
			return nil
		}
		if len(keep) == 0 {
			uid, rv := ep.UID, ep.ResourceVersion
			err = a.apiCall("delete", "AllotEndpoint", func() error {
				return a.opts.Client.Delete(ctx, ep, client.Preconditions{UID: &uid, ResourceVersion: &rv})
			})
		} else {
			ep.Spec.Interfaces = keep
			err = a.apiCall("update", "AllotEndpoint", func() error { return a.opts.Client.Update(ctx, ep) })
		}
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("write AllotEndpoint %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return fmt.Errorf("AllotEndpoint %s/%s keeps changing", pod.Namespace, pod.Name)
}

// Check implements CNI CHECK (api.Service): the owner must hold a claim.
func (a *Allocator) Check(ctx context.Context, req *api.CheckRequest) (*api.Allocation, error) {
	if err := req.Owner.Validate(); err != nil {
		return nil, err
	}
	mine := a.ownerClaims(req.Owner, req.Pod)
	if len(mine) == 0 {
		return nil, api.Errorf(api.CodeNotFound, "%s holds no address of a shared pool", req.Owner)
	}
	h := mine[0].Spec.Holder
	w := &want{req: &api.AllocateRequest{Owner: req.Owner, Network: req.Network,
		Pod: api.PodRef{Namespace: h.Namespace, Name: h.Pod, UID: h.PodUID}}, holder: h}
	al, _ := a.allocationOf(w, mine)
	al.Created = mine[0].CreationTimestamp.UTC()
	return al, nil
}

// GC implements CNI GC (api.Service) for one shared network: claims held on this node by
// interfaces the runtime no longer lists, whose endpoint says they belong to that network,
// are released. StatefulSet pods' claims are left to the operator, and so are claims with
// no endpoint (their network is unknown here); claims made after the GC began are spared.
func (a *Allocator) GC(ctx context.Context, req *api.GCRequest) (*api.GCResponse, error) {
	if req.Network == "" {
		return nil, api.InvalidField("network", "must not be empty")
	}
	valid, err := validOwners(req.Valid)
	if err != nil {
		return nil, err
	}
	began := a.opts.Now()
	stale := staleClaims(a.idx.nodeClaims(a.opts.Node), valid, req.Network, began)
	owners := slices.SortedFunc(maps.Keys(stale), func(x, y api.Owner) int { return strings.Compare(x.String(), y.String()) })
	resp := &api.GCResponse{Released: []api.Owner{}}
	var errs []error
	for _, o := range owners {
		sc := stale[o]
		if sc.network == "" {
			// Older claims do not say their network; the endpoint does.
			ours, err := a.endpointOf(ctx, o, sc.pod, req.Network)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !ours {
				continue
			}
		}
		if err := a.release(ctx, &api.ReleaseRequest{Owner: o, Network: req.Network, Pod: sc.pod}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
			continue
		}
		resp.Released = append(resp.Released, o)
	}
	if len(resp.Released) > 0 {
		a.log.Info("gc released stale shared-pool claims", "network", req.Network, "count", len(resp.Released))
	}
	if len(errs) > 0 {
		return resp, api.Errorf(api.CodeUnavailable, "gc: %v", errors.Join(errs...))
	}
	return resp, nil
}

// validOwners are the interfaces the runtime still has (CNI GC's valid attachments).
func validOwners(owners []api.Owner) (map[api.Owner]bool, error) {
	valid := map[api.Owner]bool{}
	for i, o := range owners {
		if o.ContainerID == "" || o.IfName == "" {
			return nil, api.InvalidField(fmt.Sprintf("valid[%d]", i), "containerID and ifName are required")
		}
		valid[o] = true
	}
	return valid, nil
}

// staleClaim is a claim GC may free: its pod, and its network ("" for claims written
// before holders recorded it).
type staleClaim struct {
	pod     api.PodRef
	network string
}

// staleClaims are the claims of network GC may free: made before it began, of interfaces
// the runtime no longer has, and not kept for a StatefulSet pod or a VM.
func staleClaims(claims []*v1alpha1.AddressClaim, valid map[api.Owner]bool, network string, began time.Time) map[api.Owner]staleClaim {
	stale := map[api.Owner]staleClaim{}
	for _, c := range claims {
		h := c.Spec.Holder
		o := api.Owner{ContainerID: h.ContainerID, IfName: h.Interface}
		if valid[o] || h.StatefulSet != "" || h.VirtualMachine != "" || c.CreationTimestamp.IsZero() || !c.CreationTimestamp.Time.Before(began) {
			continue
		}
		if h.Network != "" && h.Network != network {
			continue // another network's GC decides about it
		}
		stale[o] = staleClaim{pod: api.PodRef{Namespace: h.Namespace, Name: h.Pod, UID: h.PodUID}, network: h.Network}
	}
	return stale
}

// endpointOf tells whether the pod's endpoint names interface o on network.
func (a *Allocator) endpointOf(ctx context.Context, o api.Owner, pod api.PodRef, network string) (bool, error) {
	ep, err := a.getEndpoint(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return false, fmt.Errorf("read AllotEndpoint %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return ep != nil && slices.ContainsFunc(ep.Spec.Interfaces, func(x v1alpha1.EndpointInterface) bool {
		return x.Interface == o.IfName && x.ContainerID == o.ContainerID && x.Network == network
	}), nil
}

// Pools implements api.Service: one entry per shared pool and family, sorted.
func (a *Allocator) Pools(ctx context.Context) ([]api.PoolStatus, error) {
	views, _ := a.idx.views()
	out := make([]api.PoolStatus, 0, len(views))
	for _, v := range views {
		ps := api.PoolStatus{Name: v.Name, Family: string(v.Family), Usable: v.Total, Used: v.Total - v.Free, Free: v.Free, Default: v.Default}
		if v.Disabled || v.Terminating {
			ps.Free = 0
		}
		for _, c := range v.CIDRs {
			ps.CIDRs = append(ps.CIDRs, c.String())
		}
		if ps.Usable > 0 {
			ps.Utilization = float64(ps.Used) / float64(ps.Usable)
		}
		out = append(out, ps)
	}
	return out, nil
}

// Allocations implements api.Service: what interfaces of pods on this node hold, sorted by
// owner.
func (a *Allocator) Allocations(ctx context.Context) ([]api.Allocation, error) {
	groups := map[api.Owner][]*v1alpha1.AddressClaim{}
	for _, c := range a.idx.nodeClaims(a.opts.Node) {
		o := api.Owner{ContainerID: c.Spec.Holder.ContainerID, IfName: c.Spec.Holder.Interface}
		groups[o] = append(groups[o], c)
	}
	owners := make([]api.Owner, 0, len(groups))
	for o := range groups {
		owners = append(owners, o)
	}
	slices.SortFunc(owners, func(x, y api.Owner) int { return strings.Compare(x.String(), y.String()) })
	out := make([]api.Allocation, 0, len(owners))
	for _, o := range owners {
		cs := groups[o]
		h := cs[0].Spec.Holder
		w := &want{req: &api.AllocateRequest{Owner: o, Network: h.Network, Pod: api.PodRef{Namespace: h.Namespace, Name: h.Pod, UID: h.PodUID}}, holder: h}
		al, _ := a.allocationOf(w, cs)
		al.Created = cs[0].CreationTimestamp.UTC()
		out = append(out, *al)
	}
	return out, nil
}
