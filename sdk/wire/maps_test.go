package wire_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
)

// Equal maps must encode to equal bytes (the WASM host caches and compares encodings), and
// labels must come out sorted by key whatever Go's map order.
func TestMapEncodingDeterministic(t *testing.T) {
	labels := map[string]string{}
	for _, k := range []string{"z", "a", "m", "b", "y", "c", "x", "d", "w", "e"} {
		labels[k] = k + "-v"
	}
	req := &policy.PodRequest{Pod: policy.Pod{Name: "p", Labels: labels}}
	first, err := proto.Marshal(wire.PodRequestToProto(req))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _ := proto.Marshal(wire.PodRequestToProto(req))
		if !bytes.Equal(first, again) {
			t.Fatal("same request encoded differently")
		}
	}
	pairs := wire.PodRequestToProto(req).Pod.Labels
	for i := 1; i < len(pairs); i++ {
		if pairs[i-1].Key >= pairs[i].Key {
			t.Fatalf("labels not sorted: %q before %q", pairs[i-1].Key, pairs[i].Key)
		}
	}
}
