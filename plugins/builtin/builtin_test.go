package builtin

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/registry"
	"github.com/allot-ipam/allot/sdk/policy"
)

func names[F any](es []registry.Entry[F]) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

func TestRegistrySortedValidAndBuildable(t *testing.T) {
	r := Registry()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		got, want []string
	}{
		{names(r.Policies), []string{"cilium-annotations", "node-labels", "spiderpool-priority", "static"}},
		{names(r.Clouds), []string{"aws-eni"}},
		{names(r.Datapaths), []string{"ebpf", "iptables", "none"}},
	} {
		if !slices.Equal(k.got, k.want) || !slices.IsSorted(k.got) {
			t.Fatalf("names %v, want %v (sorted)", k.got, k.want)
		}
	}
	for _, e := range r.Policies {
		p, err := r.NewPolicy(e.Name, nil)
		if err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		// Every built-in answers both methods without error on an empty request.
		if _, err := p.SelectPodPools(context.Background(), &policy.PodRequest{}); err != nil {
			t.Fatalf("%s: SelectPodPools: %v", e.Name, err)
		}
		if _, err := p.SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{}); err != nil {
			t.Fatalf("%s: SelectNodeCIDRConfig: %v", e.Name, err)
		}
	}
	r.Policies[0].Name = "mutated"
	if Registry().Policies[0].Name != "cilium-annotations" {
		t.Fatal("Registry must return new lists")
	}
}

func TestNewPolicyErrors(t *testing.T) {
	r := Registry()
	_, err := r.NewPolicy("nope", nil)
	if err == nil || !strings.Contains(err.Error(), `unknown built-in policy "nope"`) || !strings.Contains(err.Error(), "static") {
		t.Fatalf("NewPolicy(nope) = %v", err)
	}
	_, err = r.NewPolicy("cilium-annotations", map[string]any{"annotation": 3})
	if err == nil || !strings.Contains(err.Error(), `config field "annotation": must be a string`) {
		t.Fatalf("bad config error = %v", err)
	}
	if p, err := r.NewPolicy("cilium-annotations", map[string]any{"annotation": "example.com/pool"}); err != nil || p == nil {
		t.Fatalf("NewPolicy with config: %v", err)
	}
}

func TestValidateRefuses(t *testing.T) {
	r := Registry()
	r.Roles.NodePolicy = "gone"
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), `Roles.NodePolicy: "gone" is no registered policy`) {
		t.Fatalf("Validate = %v", err)
	}
	r = Registry()
	r.Datapaths = append(r.Datapaths, r.Datapaths[0])
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), `datapath "ebpf" is registered twice`) {
		t.Fatalf("Validate = %v", err)
	}
	if err := (*registry.Registry)(nil).Validate(); err == nil {
		t.Fatal("nil registry validated")
	}
}
