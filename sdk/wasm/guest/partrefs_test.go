package guest

import (
	"reflect"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// withParts encodes req as the host does with part references (sdk/ABI.md): the parts
// in bits are left out (of the pod, all but its name and uid) and named in field 1001.
// keep lists parts to send in full all the same, to build what a host never sends.
func withParts(t *testing.T, req *policy.PodRequest, bits, keep uint64) []byte {
	t.Helper()
	b, err := wire.AppendPodRequest(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	part := map[protowire.Number]uint64{podReqNamespace: partNamespace, podReqNode: partNode, podReqCNI: partCNI}
	var out []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		field := b[:n+m]
		b = b[n+m:]
		switch {
		case part[num]&bits&^keep != 0:
			continue
		case num == podReqPod && bits&partPodRest != 0 && keep&partPodRest == 0:
			pod, _ := protowire.ConsumeBytes(field[n:])
			var nameUID []byte
			for len(pod) > 0 {
				pn, pt, k := protowire.ConsumeTag(pod)
				l := protowire.ConsumeFieldValue(pn, pt, pod[k:])
				if pn == podName || pn == podUID {
					nameUID = append(nameUID, pod[:k+l]...)
				}
				pod = pod[k+l:]
			}
			out = protowire.AppendBytes(protowire.AppendTag(out, podReqPod, protowire.BytesType), nameUID)
			continue
		}
		out = append(out, field...)
	}
	out = protowire.AppendTag(out, podReqPartRefs, protowire.VarintType)
	return protowire.AppendVarint(out, bits)
}

// TestPartRefs: parts taken from the cache give what decoding the full request gives;
// references the cache cannot honour, or that contradict the request, are refused.
func TestPartRefs(t *testing.T) {
	podCache = reqCache{}
	req := richPodRequest()
	if _, err := decodePodRequest(withParts(t, req, 0, 0)); err != nil { // fills the cache
		t.Fatal(err)
	}
	req.Pod.Name, req.Pod.UID = "other", "uid-2"
	for _, bits := range []uint64{partsKnown, partPodRest, partNamespace | partCNI, partNode} {
		want := decodeFresh(t, req)
		got, err := decodePodRequest(withParts(t, req, bits, 0))
		if err != nil {
			t.Fatalf("bits %#x: %v", bits, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("bits %#x: got %+v\nwant %+v", bits, got, want)
		}
	}
	for _, c := range []struct {
		name       string
		bits, keep uint64
		want       string
	}{
		{"namespace twice", partNamespace, partNamespace, "sent both in full and by reference"},
		{"pod in full", partPodRest, partPodRest, "pod: fields other than name and uid"},
		{"unknown part", 1 << 7, 0, "unknown part bits 0x80"},
	} {
		if _, err := decodePodRequest(withParts(t, req, c.bits, c.keep)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	for _, bits := range []uint64{partNamespace, partNode, partCNI, partPodRest} {
		podCache = reqCache{}
		_, err := decodePodRequest(withParts(t, req, bits, 0))
		if err == nil || !strings.Contains(err.Error(), "a part this instance has not decoded") {
			t.Errorf("bits %#x on an empty cache: %v", bits, err)
		}
	}
}
