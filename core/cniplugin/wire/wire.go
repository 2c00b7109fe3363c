// Package wire is allot-cni's codec for allotd's framed protocol (core/api/framing frames,
// core/api/API.md): the few messages of the CNI path, written and read by hand in the
// protobuf wire format of core/api/proto/allot/api/v1/api.proto.
//
// core/api/frame encodes the same messages with the code protoc-gen-go-vtproto generates. That
// code links the protobuf runtime, whose descriptors are built when the process starts: about
// half a millisecond of every exec of allot-cni, which runs once per CNI call. This package
// imports nothing beyond the standard library and core/api's types. Its tests compare every
// encoding byte for byte with core/api/frame's and fuzz the decoders against frame's.
package wire

import (
	"encoding/binary"

	"github.com/allot-ipam/allot/core/api"
)

// Encoding: proto3 as the generated code writes it (fields in number order, zero scalars
// left out, an absent pod left out, the owner always present).

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func appendTag(b []byte, num, wt int) []byte {
	return binary.AppendUvarint(b, uint64(num)<<3|uint64(wt))
}

func appendString(b []byte, num int, s string) []byte {
	if s == "" {
		return b
	}
	return appendBytesField(b, num, s)
}

func appendBytesField(b []byte, num int, s string) []byte {
	b = appendTag(b, num, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendStrings appends a repeated string field: every element, empty ones too.
func appendStrings(b []byte, num int, ss []string) []byte {
	for _, s := range ss {
		b = appendBytesField(b, num, s)
	}
	return b
}

// appendMessage appends an embedded message; body appends its fields.
func appendMessage(b []byte, num int, body func([]byte) []byte) []byte {
	inner := body(make([]byte, 0, 64))
	b = appendTag(b, num, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(inner)))
	return append(b, inner...)
}

func appendOwner(b []byte, num int, o api.Owner) []byte {
	return appendMessage(b, num, func(m []byte) []byte {
		return appendString(appendString(m, 1, o.ContainerID), 2, o.IfName)
	})
}

func appendPod(b []byte, num int, p api.PodRef) []byte {
	if p == (api.PodRef{}) {
		return b
	}
	return appendMessage(b, num, func(m []byte) []byte {
		return appendString(appendString(appendString(m, 1, p.Namespace), 2, p.Name), 3, p.UID)
	})
}

// appendOwnerTarget appends what allocate, release and check requests begin with: owner,
// network and pod.
func appendOwnerTarget(b []byte, o api.Owner, network string, p api.PodRef) []byte {
	return appendPod(appendString(appendOwner(b, 1, o), 2, network), 3, p)
}

// AppendAllocateRequest appends r's encoding (allot.api.v1.AllocateRequest).
func AppendAllocateRequest(b []byte, r *api.AllocateRequest) []byte {
	b = appendOwnerTarget(b, r.Owner, r.Network, r.Pod)
	b = appendStrings(b, 4, r.Pools)
	b = appendStrings(b, 5, r.IPs)
	b = appendStrings(b, 6, r.DefaultIPv4Pools)
	return appendStrings(b, 7, r.DefaultIPv6Pools)
}

// AppendReleaseRequest appends r's encoding (allot.api.v1.ReleaseRequest).
func AppendReleaseRequest(b []byte, r *api.ReleaseRequest) []byte {
	return appendOwnerTarget(b, r.Owner, r.Network, r.Pod)
}

// AppendCheckRequest appends r's encoding (allot.api.v1.CheckRequest).
func AppendCheckRequest(b []byte, r *api.CheckRequest) []byte {
	return appendOwnerTarget(b, r.Owner, r.Network, r.Pod)
}

// AppendGCRequest appends r's encoding (allot.api.v1.GCRequest).
func AppendGCRequest(b []byte, r *api.GCRequest) []byte {
	b = appendString(b, 1, r.Network)
	for _, o := range r.Valid {
		b = appendOwner(b, 2, o)
	}
	return b
}
