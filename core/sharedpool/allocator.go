package sharedpool

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/explain"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options configure an Allocator.
type Options struct {
	// Node is the node this allocator serves.
	Node string
	// Client is an uncached client: every write, and reads that must be current (the pod's
	// AllotEndpoint, a claim whose resourceVersion went stale).
	Client client.Client
	// Policy returns the pool policy of a CNI network (required, non-nil for every network).
	// The allocator knows no policy by name: the daemon passes each network's chain, or the
	// built-in spiderpool-priority policy it got from the composition root (cmd/allotd).
	Policy func(network string) policy.PoolPolicy
	// PolicyTimeout bounds one policy decision (default 2 s).
	PolicyTimeout time.Duration
	// PodContext completes the policy input (pod labels, annotations and controller,
	// namespace, node labels), e.g. the agent's informer-cache reader. nil: only the node
	// name is filled in.
	PodContext func(ctx context.Context, req *policy.PodRequest) error
	// WriteTimeout bounds the writes that follow the first claim of an ADD; they run even if
	// the caller gave up, so that an ADD never stops half-way by choice (default 15 s).
	WriteTimeout time.Duration
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Now is the clock (tests).
	Now func() time.Time
	// DisableKubeVirt turns off KubeVirt static addresses (on by default, as Spiderpool's
	// ipam.enableKubevirtStaticIP): a virt-launcher pod (controlled by a kubevirt.io
	// VirtualMachineInstance) then gets addresses like any pod, instead of its VM's.
	DisableKubeVirt bool

	// AfterClaim, if set, is called after each claim an ADD creates; an error ends the ADD at
	// once, with no clean-up, as if the agent had been killed there (tests).
	AfterClaim func(ctx context.Context, c *v1alpha1.AddressClaim) error
}

// Allocator serves CNI requests of shared-pool networks on one node. See the package doc.
type Allocator struct {
	opts Options
	log  *slog.Logger
	idx  *Index
	m    *metrics

	mu       sync.Mutex
	inflight map[string]chan struct{} // per pod (namespace/name)
	// cursors: per pool and family, where this node looks for a free address next, and how
	// often it has moved (see start).
	cursors map[cursorKey]uint64
}

type cursorKey struct {
	pool string
	fam  policy.Family
}

// errKilled ends an ADD without clean-up (Options.AfterClaim).
var errKilled = errors.New("sharedpool: ADD abandoned after a claim (test hook)")

// New returns an allocator with an empty index; feed it with Watch or Index().
func New(opts Options) (*Allocator, error) {
	if opts.Node == "" {
		return nil, errors.New("sharedpool: Options.Node: must not be empty")
	}
	if opts.Client == nil {
		return nil, errors.New("sharedpool: Options.Client: must not be nil")
	}
	if opts.Policy == nil {
		return nil, errors.New("sharedpool: Options.Policy: must not be nil")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PolicyTimeout <= 0 {
		opts.PolicyTimeout = 2 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 15 * time.Second
	}
	return &Allocator{
		opts:     opts,
		log:      opts.Logger,
		idx:      NewIndex(opts.Logger, opts.Now),
		m:        newMetrics(opts.Registerer),
		inflight: map[string]chan struct{}{},
	}, nil
}

// Index is the allocator's view of pools, reservations and claims.
func (a *Allocator) Index() *Index { return a.idx }

// Watch feeds the index from c's informers (see Index.Watch).
func (a *Allocator) Watch(ctx context.Context, c cache.Cache) error {
	return a.idx.Watch(ctx, c)
}

// Synced reports whether the index has been filled from the informers.
func (a *Allocator) Synced() bool { return a.idx.Synced() }

// acquire serialises requests of one pod on this node.
func (a *Allocator) acquire(ctx context.Context, key string) (func(), error) {
	a.mu.Lock()
	for {
		ch, busy := a.inflight[key]
		if !busy {
			ch = make(chan struct{})
			a.inflight[key] = ch
			a.mu.Unlock()
			return func() {
				a.mu.Lock()
				delete(a.inflight, key)
				close(ch)
				a.mu.Unlock()
			}, nil
		}
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, api.Errorf(api.CodeUnavailable, "waiting for an earlier request of pod %s: %v", key, ctx.Err())
		}
		a.mu.Lock()
	}
}

func validatePod(p api.PodRef) error {
	for _, f := range []struct{ field, v string }{{"pod.namespace", p.Namespace}, {"pod.name", p.Name}, {"pod.uid", p.UID}} {
		if f.v == "" {
			return api.InvalidField(f.field, "must not be empty: shared pools record the pod holding each address (CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID)")
		}
	}
	return nil
}

// apiCall runs one API server request, counted and timed.
func (a *Allocator) apiCall(verb, kind string, fn func() error) error {
	begin := time.Now()
	err := fn()
	a.m.api(verb, kind, begin, err)
	return err
}

// unavailable wraps an API server failure.
func unavailable(what string, err error) error {
	return api.Errorf(api.CodeUnavailable, "%s: the API server did not answer: %v", what, err)
}

// want is what one ADD asks for, resolved.
type want struct {
	req    *api.AllocateRequest
	sts    string // the pod's StatefulSet, if any
	vm     string // the KubeVirt VM whose virt-launcher pod this is, if any
	holder v1alpha1.AddressHolder
}

func (w *want) podKey() string { return podKey(w.req.Pod.Namespace, w.req.Pod.Name) }

// endpointName is the name of the AllotEndpoint recording this interface: the VM's for a
// virt-launcher pod (every pod of the VM shares it), else the pod's.
func (w *want) endpointName() string {
	if w.vm != "" {
		return w.vm
	}
	return w.req.Pod.Name
}

// fixedOwner says whether ep records addresses this request may take over: its own pod's,
// an earlier pod of the same StatefulSet and name, or an earlier pod of the same VM.
func (w *want) fixedOwner(ep *v1alpha1.AllotEndpoint) bool {
	return ep.Spec.PodUID == w.holder.PodUID || (w.sts != "" && ep.Spec.StatefulSet == w.sts) ||
		(w.vm != "" && ep.Spec.VirtualMachine == w.vm)
}

// mayReuse says whether a claim can go to this request's interface without taking it from
// another pod: the same pod (UID), an earlier pod of the same StatefulSet under the same
// name, or any other virt-launcher pod of the same VM (a restart, or the target pod of a
// live migration while the source pod still runs: the VM owns the address, not the pod).
func (w *want) mayReuse(h v1alpha1.AddressHolder) bool {
	if h.Namespace != w.holder.Namespace || h.Interface != w.holder.Interface {
		return false
	}
	if w.vm != "" && h.VirtualMachine == w.vm {
		return true
	}
	if h.Pod != w.holder.Pod {
		return false
	}
	return h.PodUID == w.holder.PodUID || (w.sts != "" && h.StatefulSet == w.sts)
}

// KubeVirt's virt-launcher pods (https://kubevirt.io/user-guide/): controlled by their
// VirtualMachineInstance, which a VirtualMachine of the same name controls, and labelled
// with the VM's name.
const (
	kindVMI     = "VirtualMachineInstance"
	labelVMName = "vm.kubevirt.io/name"
)

// vmOf returns the VM a virt-launcher pod belongs to ("" for other pods): the
// vm.kubevirt.io/name label, else the name of its VirtualMachineInstance (a VMI created
// without a VM owns its addresses itself).
func vmOf(p policy.Pod) string {
	if p.OwnerKind != kindVMI || p.OwnerName == "" {
		return ""
	}
	if n := p.Labels[labelVMName]; n != "" {
		return n
	}
	return p.OwnerName
}

// Allocate implements the CNI ADD of one interface (api.Service).
func (a *Allocator) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	begin := time.Now()
	alloc, err := a.allocate(ctx, req)
	a.m.observe("allocate", begin, err)
	if errors.Is(err, errKilled) {
		return nil, api.Errorf(api.CodeUnavailable, "%v", err)
	}
	return alloc, err
}

func (a *Allocator) allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	w, requested, err := a.wantOf(req)
	if err != nil {
		return nil, err
	}
	done, err := a.acquire(ctx, w.podKey())
	if err != nil {
		return nil, err
	}
	defer done()

	views, blocked := a.idx.views()
	traceStart(ctx, views)
	preq, err := a.podRequest(ctx, w, views)
	if err != nil {
		return nil, err
	}
	ep, held, err := a.takeBack(ctx, w, preq, blocked)
	if err != nil {
		return nil, err
	}
	more, err := a.claimNew(ctx, w, preq, blocked, requested, familiesOf(held))
	if err != nil {
		return nil, err
	}
	held = append(held, more...)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.WriteTimeout)
	defer cancel()
	alloc, iface := a.allocationOf(w, held)
	traceChosen(ctx, alloc)
	if err := a.writeEndpoint(wctx, w, ep, iface); err != nil {
		// The claims stay: a retry of the ADD finds and reuses them.
		return nil, unavailable("write AllotEndpoint "+req.Pod.Namespace+"/"+w.endpointName(), err)
	}
	a.log.Debug("shared allocation", "pod", w.podKey(), "interface", req.Owner.IfName, "addresses", ipsOf(alloc))
	return alloc, nil
}

// wantOf checks an ADD (owner, network, requested addresses, pod) and that the pools are
// known, and returns what it asks for.
func (a *Allocator) wantOf(req *api.AllocateRequest) (*want, []netip.Addr, error) {
	requested, err := req.Validate()
	if err != nil {
		return nil, nil, err
	}
	if err := validatePod(req.Pod); err != nil {
		return nil, nil, err
	}
	if !a.idx.Synced() {
		return nil, nil, api.Errorf(api.CodeUnavailable, "shared pools: the agent has not read the pools and claims from the API server yet")
	}
	return &want{req: req, holder: v1alpha1.AddressHolder{
		Namespace: req.Pod.Namespace, Pod: req.Pod.Name, PodUID: req.Pod.UID, Node: a.opts.Node,
		ContainerID: req.Owner.ContainerID, Interface: req.Owner.IfName, Network: req.Network,
	}}, requested, nil
}

// podRequest is what the pool policy sees of w's pod, completed by the PodContext hook;
// it notes the pod's StatefulSet and VM in w.
func (a *Allocator) podRequest(ctx context.Context, w *want, views []policy.PoolView) (*policy.PodRequest, error) {
	req := w.req
	preq := &policy.PodRequest{
		Pod:       policy.Pod{Namespace: req.Pod.Namespace, Name: req.Pod.Name, UID: req.Pod.UID},
		Node:      policy.Node{Name: a.opts.Node},
		Namespace: policy.Namespace{Name: req.Pod.Namespace},
		CNI: policy.CNIRequest{
			IfName: req.Owner.IfName, Network: req.Network, Pools: req.Pools,
			DefaultIPv4Pools: req.DefaultIPv4Pools, DefaultIPv6Pools: req.DefaultIPv6Pools,
		},
		Pools: views,
	}
	if a.opts.PodContext != nil {
		pctx, cancel := context.WithTimeout(ctx, a.opts.PolicyTimeout)
		err := a.opts.PodContext(pctx, preq)
		cancel()
		if err != nil {
			var e *api.Error
			if !errors.As(err, &e) {
				err = api.Errorf(api.CodeUnavailable, "pod %s: %v", w.podKey(), err)
			}
			return nil, err
		}
	}
	if preq.Pod.OwnerKind == "StatefulSet" {
		w.sts = preq.Pod.OwnerName
		w.holder.StatefulSet = w.sts
	}
	if !a.opts.DisableKubeVirt {
		w.vm = vmOf(preq.Pod)
		w.holder.VirtualMachine = w.vm
	}
	return preq, nil
}

// takeBack returns the pod's endpoint and the claims the interface holds or takes back.
// The endpoint is read when this may be a repeat, a recovery, a StatefulSet pod coming
// back or a VM's new pod; a new pod of another kind has none, and its Create says so if it
// does.
func (a *Allocator) takeBack(ctx context.Context, w *want, preq *policy.PodRequest, blocked map[string]string) (*v1alpha1.AllotEndpoint, []*v1alpha1.AddressClaim, error) {
	req := w.req
	var ep *v1alpha1.AllotEndpoint
	var err error
	known := a.idx.podClaims(req.Pod.Namespace, req.Pod.Name)
	if w.sts != "" || w.vm != "" || len(known) > 0 {
		if ep, err = a.getEndpoint(ctx, req.Pod.Namespace, w.endpointName()); err != nil {
			return nil, nil, unavailable("read AllotEndpoint "+req.Pod.Namespace+"/"+w.endpointName(), err)
		}
	}
	// A StatefulSet pod recreated under the same name, or a VM's next virt-launcher pod,
	// takes its endpoint's addresses back.
	recreated := (w.sts != "" || w.vm != "") && ep != nil && ep.Spec.PodUID != w.holder.PodUID
	held, err := a.reuse(ctx, w, ep, known)
	if err != nil {
		return nil, nil, err
	}
	if recreated && len(held) > 0 && len(req.IPs) == 0 {
		if held, err = a.dropUnwanted(ctx, w, preq, blocked, held); err != nil {
			return nil, nil, err
		}
	}
	if len(held) > 0 {
		a.m.nReused.Add(1)
	}
	return ep, held, nil
}

// familiesOf are the families of the claims held. Those the interface should have but
// holds no claim for are claimed anew: an agent killed between its IPv4 and IPv6 claims,
// or a StatefulSet address the GC freed meanwhile.
func familiesOf(held []*v1alpha1.AddressClaim) map[policy.Family]bool {
	have := map[policy.Family]bool{}
	for _, c := range held {
		if ad, err := netip.ParseAddr(c.Spec.IP); err == nil {
			have[famOf(ad)] = true
		}
	}
	return have
}

func ipsOf(al *api.Allocation) []string {
	out := make([]string, len(al.IPs))
	for i, ip := range al.IPs {
		out[i] = ip.Address
	}
	return out
}

// reuse finds the claims this interface already holds, or may take back, and makes them
// name this holder: the endpoint's addresses for the interface (a repeat, or a StatefulSet
// pod recreated), then claims the index knows for the pod's interface (an agent that died
// between a claim and the endpoint).
func (a *Allocator) reuse(ctx context.Context, w *want, ep *v1alpha1.AllotEndpoint, known []*v1alpha1.AddressClaim) ([]*v1alpha1.AddressClaim, error) {
	cands, order := reuseCandidates(w, ep, known)
	if len(order) == 0 {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.WriteTimeout)
	defer cancel()
	var held []*v1alpha1.AddressClaim
	fams := map[bool]bool{}
	for _, name := range order {
		c, err := a.claimNamed(wctx, w, name, cands[name])
		if err != nil {
			return nil, err
		}
		if c == nil || !w.mayReuse(c.Spec.Holder) {
			continue
		}
		addr, err := netip.ParseAddr(c.Spec.IP)
		if err != nil || fams[addr.Is4()] {
			continue
		}
		c, err = a.hold(wctx, w, c)
		if err != nil {
			return nil, err
		}
		if c != nil {
			fams[addr.Is4()] = true
			held = append(held, c)
		}
	}
	return held, nil
}

// reuseCandidates are the names of the claims w may reuse, in order (the endpoint's
// addresses for the interface, then the claims known for it), with the claims known (nil
// for a name only the endpoint gives).
func reuseCandidates(w *want, ep *v1alpha1.AllotEndpoint, known []*v1alpha1.AddressClaim) (map[string]*v1alpha1.AddressClaim, []string) {
	cands := map[string]*v1alpha1.AddressClaim{}
	var order []string
	if ep != nil && w.fixedOwner(ep) {
		for _, it := range ep.Spec.Interfaces {
			if it.Interface != w.holder.Interface {
				continue
			}
			for _, ip := range it.IPs {
				p, err := netip.ParsePrefix(ip.Address)
				if err != nil {
					continue
				}
				name := k8s.ClaimName(p.Addr())
				if _, dup := cands[name]; !dup {
					cands[name] = nil
					order = append(order, name)
				}
			}
		}
	}
	for _, c := range known {
		if w.mayReuse(c.Spec.Holder) {
			if _, dup := cands[c.Name]; !dup {
				order = append(order, c.Name)
			}
			cands[c.Name] = c
		}
	}
	return cands, order
}

// claimNamed returns claim name: c when known, else from the index, else from the API
// server; nil when it no longer exists.
func (a *Allocator) claimNamed(ctx context.Context, w *want, name string, c *v1alpha1.AddressClaim) (*v1alpha1.AddressClaim, error) {
	if c == nil {
		c = a.idx.claim(name)
	}
	if c != nil {
		return c, nil
	}
	var cur v1alpha1.AddressClaim
	err := a.apiCall("get", "AddressClaim", func() error {
		return a.opts.Client.Get(ctx, types.NamespacedName{Name: name}, &cur)
	})
	switch {
	case apierrors.IsNotFound(err):
		a.log.Info("address of the pod's endpoint is no longer claimed; allocating anew", "pod", w.podKey(), "claim", name)
		return nil, nil
	case err != nil:
		return nil, unavailable("read AddressClaim "+name, err)
	}
	return &cur, nil
}

// dropUnwanted lets go of addresses a recreated StatefulSet pod took back from pools its
// pool policy no longer chooses (its annotations now name other pools, say): Spiderpool's
// rule is that the pod reuses its last address when that address still fits the rules. The
// freed claims are deleted with preconditions and the families allocated anew by the caller.
// Only for a take-back (a new pod UID): a repeat ADD of the same pod keeps what it was given.
func (a *Allocator) dropUnwanted(ctx context.Context, w *want, preq *policy.PodRequest, blocked map[string]string, held []*v1alpha1.AddressClaim) ([]*v1alpha1.AddressClaim, error) {
	d, err := a.decide(ctx, w, preq, blocked)
	if err != nil || d.Code != policy.Decided {
		return held, nil // no verdict to act on: keep the addresses
	}
	wanted := func(fam policy.Family, pool string) bool {
		cands := d.IPv4
		if fam == policy.IPv6 {
			cands = d.IPv6
		}
		for _, c := range cands {
			if c.Pool == pool {
				return true
			}
		}
		return false
	}
	var keep []*v1alpha1.AddressClaim
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.WriteTimeout)
	defer cancel()
	for _, c := range held {
		ad, err := netip.ParseAddr(c.Spec.IP)
		if err != nil || wanted(famOf(ad), c.Spec.Pool) {
			keep = append(keep, c)
			continue
		}
		a.log.Info("StatefulSet or VM pod: its last address is from a pool its pool policy no longer chooses; allocating anew",
			"pod", w.podKey(), "interface", w.holder.Interface, "address", c.Spec.IP, "pool", c.Spec.Pool)
		holder := c.Spec.Holder
		if err := a.deleteClaim(wctx, c, func(h v1alpha1.AddressHolder) bool { return h == holder }); err != nil {
			return nil, unavailable("delete AddressClaim "+c.Name, err)
		}
	}
	return keep, nil
}

// hold makes the claim name w's holder (update with resourceVersion); nil when the claim is
// gone or now belongs to someone else.
func (a *Allocator) hold(ctx context.Context, w *want, c *v1alpha1.AddressClaim) (*v1alpha1.AddressClaim, error) {
	for attempt := 0; attempt < 5; attempt++ {
		if !w.mayReuse(c.Spec.Holder) {
			return nil, nil
		}
		if c.Spec.Holder == w.holder && c.Labels[v1alpha1.LabelClaimNode] == k8s.LabelValue(a.opts.Node) {
			return c, nil
		}
		cp := c.DeepCopy()
		cp.Spec.Holder = w.holder
		cp.Labels = claimLabels(cp.Spec.Pool, a.opts.Node, w.holder.Namespace, w.holder.Pod)
		err := a.apiCall("update", "AddressClaim", func() error { return a.opts.Client.Update(ctx, cp) })
		if err == nil {
			a.idx.noteWritten(cp)
			a.log.Info("address taken over", "claim", cp.Name, "pod", w.podKey(), "uid", w.holder.PodUID, "node", a.opts.Node, "from", c.Spec.Holder.PodUID+"@"+c.Spec.Holder.Node)
			return cp, nil
		}
		if !apierrors.IsConflict(err) {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, unavailable("update AddressClaim "+c.Name, err)
		}
		var cur v1alpha1.AddressClaim
		err = a.apiCall("get", "AddressClaim", func() error {
			return a.opts.Client.Get(ctx, types.NamespacedName{Name: c.Name}, &cur)
		})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, unavailable("read AddressClaim "+c.Name, err)
		}
		c = &cur
	}
	return nil, api.Errorf(api.CodeUnavailable, "AddressClaim %s keeps changing; try again", c.Name)
}

func claimLabels(pool, node, ns, pod string) map[string]string {
	return map[string]string{
		v1alpha1.LabelClaimPool:      k8s.LabelValue(pool),
		v1alpha1.LabelClaimNode:      k8s.LabelValue(node),
		v1alpha1.LabelClaimNamespace: k8s.LabelValue(ns),
		v1alpha1.LabelClaimPod:       k8s.LabelValue(pod),
	}
}

// claimNew decides the pools and claims one address per wanted family.
//
// have are the families the interface already holds: they are left out, and when it holds
// any, a policy that no longer finds a pool (the pod's annotations changed, say) leaves the
// interface with what it has instead of failing a repeat ADD.
func (a *Allocator) claimNew(ctx context.Context, w *want, preq *policy.PodRequest, blocked map[string]string, requested []netip.Addr, have map[policy.Family]bool) ([]*v1alpha1.AddressClaim, error) {
	var plan []famPlan
	if len(requested) > 0 {
		var err error
		if plan, err = a.requestedPlan(requested, have, blocked); err != nil {
			return nil, err
		}
	} else {
		d, err := a.decide(ctx, w, preq, blocked)
		if err != nil {
			if len(have) > 0 {
				a.log.Info("keeping the addresses the interface holds; the pool policy finds no pool for the rest", "pod", w.podKey(), "interface", w.holder.Interface, "err", err)
				return nil, nil
			}
			return nil, err
		}
		plan = decidedPlan(d, have)
	}
	return a.claimPlan(ctx, w, plan)
}

// famPlan is what to claim for one family: an address of one of the candidate pools, or
// the requested address addr (of field).
type famPlan struct {
	fam   policy.Family
	cands []policy.Candidate
	addr  netip.Addr // a requested address
	field string
}

// requestedPlan claims each requested address (one per family) from the pool holding it,
// but for the families the interface has.
func (a *Allocator) requestedPlan(requested []netip.Addr, have map[policy.Family]bool, blocked map[string]string) ([]famPlan, error) {
	var plan []famPlan
	seen := map[policy.Family]bool{}
	for i, ad := range requested {
		fam := famOf(ad)
		field := fmt.Sprintf("ips[%d]", i)
		if seen[fam] {
			return nil, api.InvalidField(field, "%s: only one address per family can be requested", ad)
		}
		seen[fam] = true
		if have[fam] {
			continue
		}
		pool, err := a.poolOf(ad, field, blocked)
		if err != nil {
			return nil, err
		}
		plan = append(plan, famPlan{fam: fam, cands: []policy.Candidate{{Pool: pool}}, addr: ad, field: field})
	}
	return plan, nil
}

// decidedPlan claims, for each family the policy decided and the interface lacks, an
// address of its candidates.
func decidedPlan(d policy.PodDecision, have map[policy.Family]bool) []famPlan {
	var plan []famPlan
	if len(d.IPv4) > 0 && !have[policy.IPv4] {
		plan = append(plan, famPlan{fam: policy.IPv4, cands: d.IPv4})
	}
	if len(d.IPv6) > 0 && !have[policy.IPv6] {
		plan = append(plan, famPlan{fam: policy.IPv6, cands: d.IPv6})
	}
	return plan
}

// claimPlan makes the claims of plan; when one fails, those made are deleted again.
func (a *Allocator) claimPlan(ctx context.Context, w *want, plan []famPlan) ([]*v1alpha1.AddressClaim, error) {
	var held []*v1alpha1.AddressClaim
	fail := func(err error) ([]*v1alpha1.AddressClaim, error) {
		if errors.Is(err, errKilled) {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.WriteTimeout)
		defer cancel()
		for _, c := range held {
			a.deleteClaim(rctx, c, func(h v1alpha1.AddressHolder) bool { return h == c.Spec.Holder })
		}
		return nil, err
	}
	for _, p := range plan {
		// After the first claim the ADD finishes even if the caller gives up: see WriteTimeout.
		cctx := ctx
		if len(held) > 0 {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), a.opts.WriteTimeout)
			defer cancel()
		}
		var c *v1alpha1.AddressClaim
		var err error
		if p.addr.IsValid() {
			c, err = a.claimRequested(cctx, w, p.cands[0].Pool, p.addr, p.field)
		} else {
			c, err = a.claimFrom(cctx, w, p.fam, p.cands)
		}
		if err != nil {
			return fail(err)
		}
		held = append(held, c)
		if a.opts.AfterClaim != nil {
			if err := a.opts.AfterClaim(ctx, c); err != nil {
				return nil, fmt.Errorf("%w: %v", errKilled, err)
			}
		}
	}
	return held, nil
}

// decide asks the network's policy for candidate pools.
func (a *Allocator) decide(ctx context.Context, w *want, preq *policy.PodRequest, blocked map[string]string) (policy.PodDecision, error) {
	pol := a.opts.Policy(w.req.Network)
	if pol == nil {
		return policy.PodDecision{}, fmt.Errorf("network %q has no pool policy", w.req.Network)
	}
	pctx, cancel := context.WithTimeout(ctx, a.opts.PolicyTimeout)
	defer cancel()
	d, err := pol.SelectPodPools(pctx, preq)
	explain.From(ctx).Outcome(explain.Step{Name: "policy", Policy: pol, Request: preq, Decision: d, Err: err})
	if err != nil {
		return d, api.Errorf(api.CodeUnavailable, "pool policy failed: %v", err)
	}
	note := ""
	if len(blocked) > 0 {
		var parts []string
		for _, n := range sortedKeys(blocked) {
			parts = append(parts, fmt.Sprintf("pool %q: %s", n, blocked[n]))
		}
		note = " (pools that hand out nothing until fixed: " + strings.Join(parts, "; ") + ")"
	}
	switch d.Code {
	case policy.Decided:
	case policy.NoFit, policy.Skip:
		reason := d.Reason
		if reason == "" {
			reason = "no policy chose a pool"
		}
		if full := a.exhausted(pctx, pol, preq); len(full) > 0 {
			// The policy filters exhausted pools; say so with the exhaustion code (CNI 101).
			return d, api.Errorf(api.CodeExhausted, "no free address for %s of pod %s: shared pool(s) %s exhausted (%s)",
				w.req.Owner.IfName, w.podKey(), strings.Join(full, ", "), reason)
		}
		return d, api.Errorf(api.CodeNoPool, "no shared pool for %s of pod %s: %s%s", w.req.Owner.IfName, w.podKey(), reason, note)
	default:
		return d, api.Errorf(api.CodeInternal, "pool policy answered unknown code %v", d.Code)
	}
	if len(d.IPv4) == 0 && len(d.IPv6) == 0 {
		return d, api.Errorf(api.CodeNoPool, "no shared pool for %s of pod %s: the policy (%s) chose no pool for any family%s", w.req.Owner.IfName, w.podKey(), d.Source, note)
	}
	return d, nil
}

// seed spreads agents racing for one pool over its free addresses.
// start is where this node looks for a free address of pool and family: a position derived
// from the node's name, so nodes fill separate stretches of the pool. After a conflict the
// node has run into another node's stretch, whose next address the other node is most
// likely claiming right now; following it would collide on every try, so the cursor jumps
// to a new pseudo-random position instead (moved).
func (a *Allocator) start(pool string, fam policy.Family, moved bool) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := cursorKey{pool, fam}
	n, ok := a.cursors[k]
	if ok && !moved {
		return hashStart(a.opts.Node, pool, fam, n)
	}
	if moved {
		n++
	}
	if a.cursors == nil {
		a.cursors = map[cursorKey]uint64{}
	}
	a.cursors[k] = n
	return hashStart(a.opts.Node, pool, fam, n)
}

func hashStart(node, pool string, fam policy.Family, n uint64) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", node, pool, fam, n)
	return h.Sum64()
}

func (a *Allocator) newClaim(w *want, pool string, ad netip.Addr) *v1alpha1.AddressClaim {
	return &v1alpha1.AddressClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:   k8s.ClaimName(ad),
			Labels: claimLabels(pool, a.opts.Node, w.holder.Namespace, w.holder.Pod),
		},
		Spec: v1alpha1.AddressClaimSpec{IP: ad.String(), Pool: pool, Holder: w.holder},
	}
}

// claimFrom claims a free address of the first candidate pool that has one. Every failed
// Create (another agent was first) marks the address taken and tries another.
func (a *Allocator) claimFrom(ctx context.Context, w *want, fam policy.Family, cands []policy.Candidate) (*v1alpha1.AddressClaim, error) {
	var tried []string
	attempts := 0
	for _, cand := range cands {
		conflicted := false
		for {
			if err := ctx.Err(); err != nil {
				return nil, api.Errorf(api.CodeUnavailable, "allocation of %s from pool %q: %v", fam.Label(), cand.Pool, err)
			}
			start := a.start(cand.Pool, fam, conflicted)
			if conflicted {
				start = hashStart(w.holder.PodUID, cand.Pool, fam, uint64(attempts))
			}
			attempts++
			ad, ok := a.idx.pick(cand.Pool, fam, start, conflicted)
			if !ok {
				tried = append(tried, fmt.Sprintf("%q", cand.Pool))
				explain.From(ctx).Pool(cand.Pool, fam, api.VerdictExhausted, noFreeAddress)
				break
			}
			c := a.newClaim(w, cand.Pool, ad)
			err := a.apiCall("create", "AddressClaim", func() error { return a.opts.Client.Create(ctx, c) })
			// The outcome is recorded before the pending mark goes, so no concurrent pick
			// sees the address free in between.
			switch {
			case err == nil:
				a.idx.noteWritten(c)
			case apierrors.IsAlreadyExists(err):
				a.idx.noteTaken(ad)
			}
			a.idx.unpend(ad)
			if err == nil {
				a.m.allocated.WithLabelValues(cand.Pool).Inc()
				a.m.nAllocated.Add(1)
				return c, nil
			}
			if apierrors.IsAlreadyExists(err) {
				a.m.conflicts.WithLabelValues(cand.Pool).Inc()
				a.m.nConflicts.Add(1)
				conflicted = true
				continue
			}
			return nil, unavailable("create AddressClaim "+c.Name, err)
		}
	}
	return nil, api.Errorf(api.CodeExhausted, "no free %s address in shared pool(s) %s", fam.Label(), strings.Join(tried, ", "))
}

// claimRequested claims one specific address (CNI "ips" / IP=).
func (a *Allocator) claimRequested(ctx context.Context, w *want, pool string, ad netip.Addr, field string) (*v1alpha1.AddressClaim, error) {
	c := a.newClaim(w, pool, ad)
	err := a.apiCall("create", "AddressClaim", func() error { return a.opts.Client.Create(ctx, c) })
	if err == nil {
		a.idx.noteWritten(c)
		a.m.allocated.WithLabelValues(pool).Inc()
		a.m.nAllocated.Add(1)
		return c, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, unavailable("create AddressClaim "+c.Name, err)
	}
	var cur v1alpha1.AddressClaim
	if err := a.apiCall("get", "AddressClaim", func() error {
		return a.opts.Client.Get(ctx, types.NamespacedName{Name: c.Name}, &cur)
	}); err != nil {
		return nil, unavailable("read AddressClaim "+c.Name, err)
	}
	if w.mayReuse(cur.Spec.Holder) {
		return a.hold(ctx, w, &cur)
	}
	h := cur.Spec.Holder
	return nil, &api.Error{Code: api.CodeConflict, Field: field,
		Message: fmt.Sprintf("%s is already held by pod %s/%s (interface %s, node %s)", ad, h.Namespace, h.Pod, h.Interface, h.Node)}
}

// poolOf finds the shared pool that may hand out ad.
func (a *Allocator) poolOf(ad netip.Addr, field string, blocked map[string]string) (string, error) {
	views, _ := a.idx.views()
	for _, v := range views {
		info, ok := a.idx.pool(v.Name)
		if !ok || info.res == nil || info.res.Get(famOf(ad)) == nil {
			continue
		}
		if !info.res.Get(famOf(ad)).Usable.Contains(ad) {
			continue
		}
		if msg := blocked[v.Name]; msg != "" {
			return "", api.InvalidField(field, "%s is in shared pool %q, which hands out nothing: %s", ad, v.Name, msg)
		}
		if v.Disabled || v.Terminating {
			return "", api.InvalidField(field, "%s is in shared pool %q, which is disabled or being deleted", ad, v.Name)
		}
		return v.Name, nil
	}
	return "", api.InvalidField(field, "%s is not a usable address of any shared pool (outside every pool, excluded or reserved)", ad)
}

// allocationOf is the answer and the endpoint entry for the held claims.
func (a *Allocator) allocationOf(w *want, held []*v1alpha1.AddressClaim) (*api.Allocation, v1alpha1.EndpointInterface) {
	al := &api.Allocation{Owner: w.req.Owner, Network: w.req.Network, Pod: w.req.Pod, Created: a.opts.Now().UTC()}
	it := v1alpha1.EndpointInterface{Interface: w.holder.Interface, ContainerID: w.holder.ContainerID, Network: w.req.Network}
	ips, routes := a.addressesOf(held)
	for _, ip := range ips {
		al.IPs = append(al.IPs, ip.cfg)
		it.IPs = append(it.IPs, v1alpha1.EndpointIP{Family: string(ip.fam), Address: ip.cfg.Address, Pool: ip.cfg.Pool, Gateway: ip.cfg.Gateway})
	}
	for _, r := range routes {
		al.Routes = append(al.Routes, r)
		it.Routes = append(it.Routes, v1alpha1.RouteSpec{Dst: r.Dst, Gw: r.GW})
	}
	return al, it
}

type heldIP struct {
	fam policy.Family
	cfg api.IPConfig
}

// addressesOf renders claims as addresses with their subnet's prefix length and gateway,
// IPv4 first, and the routes of their pools.
func (a *Allocator) addressesOf(held []*v1alpha1.AddressClaim) ([]heldIP, []api.Route) {
	var ips []heldIP
	var routes []api.Route
	for _, fam := range []policy.Family{policy.IPv4, policy.IPv6} {
		for _, c := range held {
			ad, err := netip.ParseAddr(c.Spec.IP)
			if err != nil || famOf(ad) != fam {
				continue
			}
			cfg := api.IPConfig{Address: netip.PrefixFrom(ad, ad.BitLen()).String(), Pool: c.Spec.Pool}
			if info, ok := a.idx.pool(c.Spec.Pool); ok && info.res != nil && info.res.Get(fam) != nil {
				f := info.res.Get(fam)
				cfg.Address = netip.PrefixFrom(ad, f.Subnet.Bits()).String()
				if f.Gateway.IsValid() {
					cfg.Gateway = f.Gateway.String()
				}
				for _, r := range f.Routes {
					gw := r.Gw
					if !gw.IsValid() {
						gw = f.Gateway
					}
					rt := api.Route{Dst: r.Dst.String()}
					if gw.IsValid() {
						rt.GW = gw.String()
					}
					routes = append(routes, rt)
				}
			}
			ips = append(ips, heldIP{fam: fam, cfg: cfg})
		}
	}
	return ips, routes
}

// claim returns the index's effective claim of that name, or nil.
func (x *Index) claim(name string) *v1alpha1.AddressClaim {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.claimLocked(name)
}

// exhausted asks the policy again as if every pool had room: if it then decides, the pools
// it names were refused only for being full, and they are returned (quoted); else nil.
func (a *Allocator) exhausted(ctx context.Context, pol policy.PoolPolicy, preq *policy.PodRequest) []string {
	ctx = explain.Detach(ctx) // a hypothetical question: not a step of the decision
	again := *preq
	again.Pools = make([]policy.PoolView, len(preq.Pools))
	full := map[string]bool{}
	for i, v := range preq.Pools {
		if v.Free == 0 && v.Total > 0 {
			full[v.Name] = true
			v.Free = 1
		}
		again.Pools[i] = v
	}
	if len(full) == 0 {
		return nil
	}
	d, err := pol.SelectPodPools(ctx, &again)
	if err != nil || d.Code != policy.Decided {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range append(append([]policy.Candidate(nil), d.IPv4...), d.IPv6...) {
		if full[c.Pool] && !seen[c.Pool] {
			seen[c.Pool] = true
			out = append(out, fmt.Sprintf("%q", c.Pool))
		}
	}
	return out
}
