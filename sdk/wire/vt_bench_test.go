package wire_test

import (
	"testing"

	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
	"github.com/allot-ipam/allot/sdk/wire"
)

// The generated (vtprotobuf) path the hand codec is measured against: UnmarshalVT into a
// fresh message, then the FromProto conversion; ToProto then MarshalVT into a reused buffer.

func BenchmarkDecodePodRequestGenerated(b *testing.B) {
	raw, err := wire.AppendPodRequest(nil, benchPodRequest(20))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		m := &pb.PodRequest{}
		if err := m.UnmarshalVT(raw); err != nil {
			b.Fatal(err)
		}
		if _, err := wire.PodRequestFromProto(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendPodRequestGenerated(b *testing.B) {
	req := benchPodRequest(20)
	buf := make([]byte, 8192)
	b.ReportAllocs()
	for b.Loop() {
		m := wire.PodRequestToProto(req)
		n := m.SizeVT()
		if _, err := m.MarshalToSizedBufferVT(buf[:n]); err != nil {
			b.Fatal(err)
		}
	}
}
