package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"
)

// The node state: what an agent last learned from the API server about the blocks its node
// holds (AllotNode spec.ipam.pools.allocated, or Node.spec.podCIDRs). An agent that restarts
// while the API server is unreachable rebuilds its pools from it and serves CNI ADD from
// those blocks until it can read its node again (core/agent).
//
// It is one JSON value under the key "node" of the meta bucket, written through the group
// committer like records (so it is ordered with them and refused after ErrFailed). Older
// versions of allotd ignore the key; Inspect and Salvage carry records only, so a salvaged
// store starts without it and the agent then waits for the API server, as it did before
// the node state existed.

var nodeStateKey = []byte("node")

// nodeStateVersion is the "v" of the stored value.
const nodeStateVersion = 1

// NodeState is the node's blocks as the agent last read them.
type NodeState struct {
	// Node is the node's name: a state saved under another name is not this node's.
	Node string
	// Source says where the blocks came from ("allotnode", "podcidrs"); an agent in another
	// mode does not use them.
	Source string
	// Blocks are the node's blocks, each in its pool.
	Blocks []Block
	// Saved is when the agent last read them from the API server.
	Saved time.Time
}

// Block is one block of one pool.
type Block struct {
	Pool string
	CIDR netip.Prefix
	// Bits and Gateway are how the block's addresses are presented to pods when that is not
	// the block itself (ENI mode: a single address with its subnet's prefix length and
	// router); zero values: the block's own.
	Bits    int
	Gateway netip.Addr
}

type nodeStateJSON struct {
	V      int         `json:"v"`
	Node   string      `json:"node"`
	Source string      `json:"source"`
	Blocks []blockJSON `json:"blocks"`
	Saved  time.Time   `json:"saved"`
}

type blockJSON struct {
	Pool    string `json:"pool"`
	CIDR    string `json:"cidr"`
	Bits    int    `json:"bits,omitempty"`
	Gateway string `json:"gateway,omitempty"`
}

func validateNodeState(st NodeState) error {
	if st.Node == "" {
		return &FieldError{Field: "node", Reason: "must not be empty"}
	}
	for i, b := range st.Blocks {
		if b.Pool == "" {
			return &FieldError{Field: fmt.Sprintf("blocks[%d].pool", i), Reason: "must not be empty"}
		}
		if !b.CIDR.IsValid() || b.CIDR != b.CIDR.Masked() {
			return &FieldError{Field: fmt.Sprintf("blocks[%d].cidr", i), Reason: fmt.Sprintf("%s is not a masked CIDR", b.CIDR)}
		}
		if b.Bits < 0 || b.Bits > b.CIDR.Addr().BitLen() {
			return &FieldError{Field: fmt.Sprintf("blocks[%d].bits", i), Reason: fmt.Sprintf("%d is not between 0 and %d", b.Bits, b.CIDR.Addr().BitLen())}
		}
		if b.Gateway.IsValid() && b.Gateway.Is4() != b.CIDR.Addr().Is4() {
			return &FieldError{Field: fmt.Sprintf("blocks[%d].gateway", i), Reason: fmt.Sprintf("%s is not of the block's family", b.Gateway)}
		}
	}
	return nil
}

// PutNodeState replaces the node state. Like Put, it returns nil once the state is durable
// together with every operation enqueued before it.
func (s *Store) PutNodeState(ctx context.Context, st NodeState) error {
	if err := validateNodeState(st); err != nil {
		return fmt.Errorf("store: put node state: %w", err)
	}
	v := nodeStateJSON{V: nodeStateVersion, Node: st.Node, Source: st.Source, Blocks: []blockJSON{}, Saved: st.Saved.UTC()}
	for _, b := range st.Blocks {
		bj := blockJSON{Pool: b.Pool, CIDR: b.CIDR.String(), Bits: b.Bits}
		if b.Gateway.IsValid() {
			bj.Gateway = b.Gateway.String()
		}
		v.Blocks = append(v.Blocks, bj)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: put node state: %w", err)
	}
	if err := s.submit(ctx, op{bucket: metaBucket, key: nodeStateKey, value: raw}); err != nil {
		return fmt.Errorf("store: put node state: %w", err)
	}
	return nil
}

// NodeState returns the node state and whether there is one. A value that does not decode
// is an error naming the field (the caller then waits for the API server instead).
func (s *Store) NodeState(ctx context.Context) (NodeState, bool, error) {
	if err := s.readable(ctx); err != nil {
		return NodeState{}, false, fmt.Errorf("store: node state: %w", err)
	}
	raw, err := s.get(metaBucket, nodeStateKey)
	if err != nil {
		return NodeState{}, false, fmt.Errorf("store: node state: %w", err)
	}
	if raw == nil {
		return NodeState{}, false, nil
	}
	st, err := decodeNodeState(raw)
	if err != nil {
		return NodeState{}, false, fmt.Errorf("store: node state: %w", err)
	}
	return st, true, nil
}

func decodeNodeState(raw []byte) (NodeState, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var v nodeStateJSON
	if err := dec.Decode(&v); err != nil {
		return NodeState{}, &FieldError{Field: "node", Reason: err.Error()}
	}
	if v.V != nodeStateVersion {
		return NodeState{}, &FieldError{Field: "v", Reason: fmt.Sprintf("version %d, this build reads %d", v.V, nodeStateVersion)}
	}
	st := NodeState{Node: v.Node, Source: v.Source, Saved: v.Saved}
	for i, b := range v.Blocks {
		c, err := netip.ParsePrefix(b.CIDR)
		if err != nil {
			return NodeState{}, &FieldError{Field: fmt.Sprintf("blocks[%d].cidr", i), Reason: err.Error()}
		}
		blk := Block{Pool: b.Pool, CIDR: c, Bits: b.Bits}
		if b.Gateway != "" {
			if blk.Gateway, err = netip.ParseAddr(b.Gateway); err != nil {
				return NodeState{}, &FieldError{Field: fmt.Sprintf("blocks[%d].gateway", i), Reason: err.Error()}
			}
		}
		st.Blocks = append(st.Blocks, blk)
	}
	if err := validateNodeState(st); err != nil {
		return NodeState{}, err
	}
	return st, nil
}
