package wasm

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
)

// TestEncodePodMatchesPoolRefs: the view mirror's shortcut sends exactly the bytes that
// encoding every pool and replacing the known ones by references does, whatever changes
// between requests, including views changed in place by the caller.
func TestEncodePodMatchesPoolRefs(t *testing.T) {
	viaViews, viaBytes := &instance{}, &instance{}
	req := podRequest("web", nil)
	steps := []struct {
		name   string
		change func()
	}{
		{"first request", func() {}},
		{"unchanged", func() {}},
		{"free count changed", func() { req.Pools[3].Free++ }},
		{"free count to zero", func() { req.Pools[4].Free = 0 }},
		{"free count back from zero", func() { req.Pools[4].Free = 7 }},
		{"flag changed in place", func() { req.Pools[5].Disabled = true }},
		{"selector map changed in place", func() { req.Pools[0].NodeAffinity.MatchLabels["zone"] = "b" }},
		{"list changed in place", func() { req.Pools[2].NamespaceName[0] = "other" }},
		{"CIDR changed in place", func() { req.Pools[1].CIDRs[0] = netip.MustParsePrefix("fd00:99::/64") }},
		{"empty selector is not a nil one", func() { req.Pools[1].PodAffinity = &policy.LabelSelector{} }},
		{"pool removed", func() { req.Pools = slices.Delete(req.Pools, 0, 1) }},
		{"unchanged again", func() {}},
		{"pod changed", func() { req.Pod.Name = "web-2" }},
		{"forgotten", func() { viaViews.forget(); viaBytes.forget() }},
		{"after forgetting", func() {}},
	}
	for _, s := range steps {
		s.change()
		got, err := viaViews.encodePod(nil, req, true, true)
		if err != nil {
			t.Fatal(err)
		}
		full, err := wire.AppendPodRequest(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		if want := viaBytes.withPoolRefs(nil, full, true); !bytes.Equal(got, want) {
			t.Fatalf("%s: the view mirror's request differs from the byte mirror's", s.name)
		}
	}
}

// BenchmarkEncodePodCached: the host's encoding of a 20-pool request whose pools the
// instance already holds (the common case): the comparison with the view mirror, the pod,
// node and namespace, and the run of references.
func BenchmarkEncodePodCached(b *testing.B) {
	in := &instance{}
	req := podRequest("web", map[string]string{"allot.io/pool": "pool-v4-07"})
	buf, err := in.encodePod(nil, req, true, true)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = in.encodePod(buf[:0], req, true, true)
	}
}
