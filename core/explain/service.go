package explain

import (
	"context"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/sdk/policy"
)

// DryRunner is a service that can decide an ADD without taking anything: the policy is asked
// and the address that would be taken is found, but nothing is held, written or counted.
// core/ipam's Manager, core/sharedpool's Allocator and the daemon's router implement it.
type DryRunner interface {
	AllocateDryRun(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error)
}

// Service is the daemon's api.Service with every ADD traced and the explain call served.
type Service struct {
	api.Service
	rec *Recorder
	now func() time.Time
}

var _ api.Explainer = (*Service)(nil)

// NewService wraps svc; rec keeps the traces.
func NewService(svc api.Service, rec *Recorder) *Service {
	return &Service{Service: svc, rec: rec, now: time.Now}
}

// Allocate traces the ADD and records its explanation for the pod interface. A repeated ADD
// answered from what the owner already holds decides nothing, and keeps the first one's.
func (s *Service) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	t := &Trace{}
	a, err := s.Service.Allocate(With(ctx, t), req)
	if err == nil && t.empty() {
		return a, err
	}
	if err == nil {
		t.compact()
	}
	s.rec.put(&record{k: keyOf(req.Owner, req.Pod), trace: t, err: err,
		meta: Meta{Owner: req.Owner, Network: req.Network, Pod: req.Pod, Time: s.now()}})
	return a, err
}

func (t *Trace) empty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.steps) == 0 && len(t.chosen) == 0
}

// Explain implements api.Explainer.
func (s *Service) Explain(ctx context.Context, req *api.ExplainRequest) (*api.ExplainResponse, error) {
	if req.DryRun != nil {
		return s.dryRun(ctx, req.DryRun)
	}
	if req.Pod.Name == "" && req.Owner.ContainerID == "" {
		return nil, api.InvalidField("pod.name", "name a pod (or, outside Kubernetes, owner.containerID)")
	}
	if req.Pod.Name != "" && req.Pod.Namespace == "" {
		return nil, api.InvalidField("pod.namespace", "must not be empty with pod.name")
	}
	recs := s.rec.find(req.Pod, req.Owner)
	if len(recs) == 0 {
		return nil, api.Errorf(api.CodeNotFound, "no ADD of %s recorded on this node (the last %d pod interfaces are kept, since allotd started)",
			describe(req), s.rec.cap)
	}
	out := &api.ExplainResponse{Explanations: make([]api.Explanation, len(recs))}
	for i, r := range recs {
		r.trace.fillDetail(ctx)
		out.Explanations[i] = r.trace.Explanation(r.meta, r.err)
	}
	return out, nil
}

func describe(req *api.ExplainRequest) string {
	if req.Pod.Name != "" {
		return "pod " + req.Pod.Namespace + "/" + req.Pod.Name
	}
	return "container " + req.Owner.ContainerID
}

// dryRun decides the ADD of d without effect.
func (s *Service) dryRun(ctx context.Context, d *api.DryRun) (*api.ExplainResponse, error) {
	dr, ok := s.Service.(DryRunner)
	if !ok {
		return nil, api.Errorf(api.CodeInternal, "this allotd cannot decide a dry run")
	}
	req := d.Request
	if req.Owner.ContainerID == "" {
		req.Owner.ContainerID = "dry-run"
	}
	if req.Owner.IfName == "" {
		req.Owner.IfName = "eth0"
	}
	if req.Pod.Name != "" && req.Pod.UID == "" {
		req.Pod.UID = "dry-run" // a pod not created yet has none; shared pools want one
	}
	t := &Trace{dryRun: &policy.Pod{Namespace: req.Pod.Namespace, Name: req.Pod.Name, UID: req.Pod.UID,
		Labels: d.Labels, Annotations: d.Annotations, OwnerKind: d.OwnerKind, OwnerName: d.OwnerName}}
	_, err := dr.AllocateDryRun(With(ctx, t), &req)
	if ae, ok := err.(*api.Error); ok && ae.Code == api.CodeInvalid && len(t.steps) == 0 {
		return nil, err // the request itself is wrong: say so, not "the ADD would fail"
	}
	t.fillDetail(ctx)
	e := t.Explanation(Meta{Owner: req.Owner, Network: req.Network, Pod: req.Pod, Time: s.now(), DryRun: true}, err)
	return &api.ExplainResponse{Explanations: []api.Explanation{e}}, nil
}
