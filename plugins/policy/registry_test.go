package policy

import (
	"context"
	"slices"
	"strings"
	"testing"

	sdkpolicy "github.com/allot-ipam/allot/sdk/policy"
)

func TestBuiltinsSortedAndBuildable(t *testing.T) {
	bs := Builtins()
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.Name
	}
	want := []string{"cilium-annotations", "node-labels", "spiderpool-priority", "static"}
	if !slices.Equal(names, want) {
		t.Fatalf("Builtins = %v, want %v (sorted)", names, want)
	}
	for _, b := range bs {
		p, err := New(b.Name, nil)
		if err != nil {
			t.Fatalf("%s: %v", b.Name, err)
		}
		// Every built-in answers both methods without error on an empty request.
		if _, err := p.SelectPodPools(context.Background(), &sdkpolicy.PodRequest{}); err != nil {
			t.Fatalf("%s: SelectPodPools: %v", b.Name, err)
		}
		if _, err := p.SelectNodeCIDRConfig(context.Background(), &sdkpolicy.NodeRequest{}); err != nil {
			t.Fatalf("%s: SelectNodeCIDRConfig: %v", b.Name, err)
		}
	}
	bs[0].Name = "mutated"
	if Builtins()[0].Name != "cilium-annotations" {
		t.Fatal("Builtins must return a copy")
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New("nope", nil)
	if err == nil || !strings.Contains(err.Error(), `unknown built-in policy "nope"`) || !strings.Contains(err.Error(), "static") {
		t.Fatalf("New(nope) = %v", err)
	}
	_, err = New("cilium-annotations", map[string]any{"annotation": 3})
	if err == nil || !strings.Contains(err.Error(), `config field "annotation": must be a string`) {
		t.Fatalf("bad config error = %v", err)
	}
	p, err := New("cilium-annotations", map[string]any{"annotation": "example.com/pool"})
	if err != nil || p == nil {
		t.Fatalf("New with config: %v", err)
	}
}
