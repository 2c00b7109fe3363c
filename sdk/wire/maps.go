package wire

import (
	"strings"

	pb "github.com/allot-ipam/allot/sdk/proto/pluginv1"
)

// mapToProto encodes a string map as pairs sorted by key, so equal maps encode to equal
// bytes. One allocation holds all pairs.
func mapToProto(m map[string]string) []*pb.StringPair {
	if len(m) == 0 {
		return nil
	}
	pairs := make([]pb.StringPair, len(m))
	out := make([]*pb.StringPair, len(m))
	i := 0
	for k, v := range m {
		pairs[i].Key, pairs[i].Value = k, v
		out[i] = &pairs[i]
		i++
	}
	// Insertion sort: label maps are small, and it needs no closure or extra allocation.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && strings.Compare(out[j-1].Key, out[j].Key) > 0; j-- {
			out[j-1], out[j] = out[j], out[j-1]
		}
	}
	return out
}

// mapFromProto decodes pairs into a map; a repeated key keeps its last value, as for a
// protobuf map field. Empty input gives nil.
func mapFromProto(ps []*pb.StringPair) map[string]string {
	if len(ps) == 0 {
		return nil
	}
	m := make(map[string]string, len(ps))
	for _, p := range ps {
		if p != nil {
			m[p.Key] = p.Value
		}
	}
	return m
}
