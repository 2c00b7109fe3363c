package frame

import (
	"encoding/binary"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/allot-ipam/allot/core/api"
)

// The payload encoding is protobuf's wire format: each field is a varint key
// (number<<3 | wire type) then a varint (type 0) or a length-prefixed value (type 2: strings,
// nested messages). Zero values are left out, repeated fields repeat, unknown fields are
// skipped, so fields can be added without breaking older peers. The schema, as a .proto
// would write it:
//
//	message Owner           { string container_id = 1; string if_name = 2; }
//	message PodRef          { string namespace = 1; string name = 2; string uid = 3; }
//	message AllocateRequest { Owner owner = 1; string network = 2; PodRef pod = 3;
//	                          repeated string pools = 4; repeated string ips = 5;
//	                          repeated string default_ipv4_pools = 6;
//	                          repeated string default_ipv6_pools = 7; }
//	message ReleaseRequest  { Owner owner = 1; string network = 2; PodRef pod = 3; }
//	message CheckRequest    { Owner owner = 1; string network = 2; PodRef pod = 3; }
//	message GCRequest       { string network = 1; repeated Owner valid = 2; }
//	message GCResponse      { repeated Owner released = 1; }
//	message IPConfig        { string address = 1; string gateway = 2; string pool = 3; }
//	message Route           { string dst = 1; string gw = 2; }
//	message Allocation      { Owner owner = 1; string network = 2; PodRef pod = 3;
//	                          repeated IPConfig ips = 4; repeated Route routes = 5;
//	                          int64 created_unix_nano = 6; }
//	message Error           { string code = 1; string message = 2; string field = 3; }
//
// The release answer is empty.

const (
	wireVarint = 0
	wireBytes  = 2
)

func appendKey(b []byte, num, typ int) []byte {
	return binary.AppendUvarint(b, uint64(num<<3|typ))
}

func appendString(b []byte, num int, s string) []byte {
	if s == "" {
		return b
	}
	b = appendKey(b, num, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, num int, ss []string) []byte {
	for _, s := range ss {
		// Repeated elements keep their position even when empty.
		b = appendKey(b, num, wireBytes)
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// appendMessage appends field num holding the message fill appends. The length is written
// after the body; a body of 128 bytes or more moves itself to make room for a longer varint.
func appendMessage(b []byte, num int, fill func([]byte) []byte) []byte {
	b = appendKey(b, num, wireBytes)
	at := len(b)
	b = append(b, 0)
	b = fill(b)
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	var l [binary.MaxVarintLen64]byte
	ln := binary.PutUvarint(l[:], uint64(n))
	b = append(b, l[:ln-1]...)
	copy(b[at+ln:], b[at+1:at+1+n])
	copy(b[at:], l[:ln])
	return b
}

func appendOwner(b []byte, o api.Owner) []byte {
	b = appendString(b, 1, o.ContainerID)
	return appendString(b, 2, o.IfName)
}

func appendPod(b []byte, p api.PodRef) []byte {
	b = appendString(b, 1, p.Namespace)
	b = appendString(b, 2, p.Name)
	return appendString(b, 3, p.UID)
}

func appendOwnerPodNetwork(b []byte, o api.Owner, network string, p api.PodRef) []byte {
	b = appendMessage(b, 1, func(b []byte) []byte { return appendOwner(b, o) })
	b = appendString(b, 2, network)
	if p != (api.PodRef{}) {
		b = appendMessage(b, 3, func(b []byte) []byte { return appendPod(b, p) })
	}
	return b
}

// AppendAllocateRequest appends r's encoding.
func AppendAllocateRequest(b []byte, r *api.AllocateRequest) []byte {
	b = appendOwnerPodNetwork(b, r.Owner, r.Network, r.Pod)
	b = appendStrings(b, 4, r.Pools)
	b = appendStrings(b, 5, r.IPs)
	b = appendStrings(b, 6, r.DefaultIPv4Pools)
	return appendStrings(b, 7, r.DefaultIPv6Pools)
}

// AppendReleaseRequest appends r's encoding.
func AppendReleaseRequest(b []byte, r *api.ReleaseRequest) []byte {
	return appendOwnerPodNetwork(b, r.Owner, r.Network, r.Pod)
}

// AppendCheckRequest appends r's encoding.
func AppendCheckRequest(b []byte, r *api.CheckRequest) []byte {
	return appendOwnerPodNetwork(b, r.Owner, r.Network, r.Pod)
}

// AppendGCRequest appends r's encoding.
func AppendGCRequest(b []byte, r *api.GCRequest) []byte {
	b = appendString(b, 1, r.Network)
	for _, o := range r.Valid {
		b = appendMessage(b, 2, func(b []byte) []byte { return appendOwner(b, o) })
	}
	return b
}

// AppendGCResponse appends r's encoding.
func AppendGCResponse(b []byte, r *api.GCResponse) []byte {
	for _, o := range r.Released {
		b = appendMessage(b, 1, func(b []byte) []byte { return appendOwner(b, o) })
	}
	return b
}

// AppendAllocation appends a's encoding.
func AppendAllocation(b []byte, a *api.Allocation) []byte {
	b = appendOwnerPodNetwork(b, a.Owner, a.Network, a.Pod)
	for _, ip := range a.IPs {
		b = appendMessage(b, 4, func(b []byte) []byte {
			b = appendString(b, 1, ip.Address)
			b = appendString(b, 2, ip.Gateway)
			return appendString(b, 3, ip.Pool)
		})
	}
	for _, r := range a.Routes {
		b = appendMessage(b, 5, func(b []byte) []byte {
			b = appendString(b, 1, r.Dst)
			return appendString(b, 2, r.GW)
		})
	}
	if !a.Created.IsZero() {
		b = appendKey(b, 6, wireVarint)
		b = binary.AppendUvarint(b, uint64(a.Created.UnixNano()))
	}
	return b
}

// AppendError appends e's encoding.
func AppendError(b []byte, e *api.Error) []byte {
	b = appendString(b, 1, string(e.Code))
	b = appendString(b, 2, e.Message)
	return appendString(b, 3, e.Field)
}

// decoder walks the fields of one message. Errors name the field by its path in the
// request ("allocate.owner.containerID").
type decoder struct {
	b []byte
	// The path is built only for an error message: parent, name and index (-1: none).
	parent *decoder
	name   string
	idx    int
	err    error
	// current field
	num  int
	typ  int
	val  uint64
	data []byte
}

func newDecoder(b []byte, name string) *decoder { return &decoder{b: b, name: name, idx: -1} }

func (d *decoder) path() string {
	p := d.name
	if d.idx >= 0 {
		p = fmt.Sprintf("%s[%d]", p, d.idx)
	}
	if d.parent != nil {
		p = d.parent.path() + "." + p
	}
	return p
}

// next reads the next field; false at the end of the message or on an error.
func (d *decoder) next() bool {
	if d.err != nil || len(d.b) == 0 {
		return false
	}
	key, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%s: bad field key", d.path())
		return false
	}
	d.b = d.b[n:]
	if key>>3 == 0 || key>>3 > 1<<29 {
		d.err = fmt.Errorf("%s: field number %d out of range", d.path(), key>>3)
		return false
	}
	d.num, d.typ = int(key>>3), int(key&7)
	switch d.typ {
	case wireVarint:
		v, n := binary.Uvarint(d.b)
		if n <= 0 {
			d.err = fmt.Errorf("%s: field %d: bad varint", d.path(), d.num)
			return false
		}
		d.val, d.b = v, d.b[n:]
	case wireBytes:
		l, n := binary.Uvarint(d.b)
		if n <= 0 || l > uint64(len(d.b)-n) {
			d.err = fmt.Errorf("%s: field %d: length runs past the end of the message", d.path(), d.num)
			return false
		}
		d.data, d.b = d.b[n:n+int(l)], d.b[n+int(l):]
	case 1: // fixed64: skipped when unknown
		if len(d.b) < 8 {
			d.err = fmt.Errorf("%s: field %d: truncated fixed64", d.path(), d.num)
			return false
		}
		d.b = d.b[8:]
	case 5: // fixed32
		if len(d.b) < 4 {
			d.err = fmt.Errorf("%s: field %d: truncated fixed32", d.path(), d.num)
			return false
		}
		d.b = d.b[4:]
	default:
		d.err = fmt.Errorf("%s: field %d: unsupported wire type %d", d.path(), d.num, d.typ)
		return false
	}
	return true
}

// str returns the current field as a string named name.
func (d *decoder) str(name string) string { return d.stri(name, -1) }

// stri is str for element i of a repeated field.
func (d *decoder) stri(name string, i int) string {
	if d.typ != wireBytes {
		d.err = fmt.Errorf("%s.%s: wire type %d, want bytes", d.path(), elem(name, i), d.typ)
		return ""
	}
	if !utf8.Valid(d.data) {
		d.err = fmt.Errorf("%s.%s: not valid UTF-8", d.path(), elem(name, i))
		return ""
	}
	return string(d.data)
}

func elem(name string, i int) string {
	if i < 0 {
		return name
	}
	return fmt.Sprintf("%s[%d]", name, i)
}

func (d *decoder) sub(name string) *decoder { return d.subi(name, -1) }

// subi returns a decoder of the current field as the message named name (element i of a
// repeated field, or -1).
func (d *decoder) subi(name string, i int) *decoder {
	if d.typ != wireBytes {
		d.err = fmt.Errorf("%s.%s: wire type %d, want a message", d.path(), elem(name, i), d.typ)
		return &decoder{err: d.err}
	}
	return &decoder{b: d.data, parent: d, name: name, idx: i}
}

func (d *decoder) varint(name string) uint64 {
	if d.typ != wireVarint {
		d.err = fmt.Errorf("%s.%s: wire type %d, want varint", d.path(), name, d.typ)
		return 0
	}
	return d.val
}

// done returns the first error of d or of a nested decoder.
func (d *decoder) done(nested ...error) error {
	for _, e := range nested {
		if e != nil && d.err == nil {
			d.err = e
		}
	}
	return d.err
}

func decodeOwner(d *decoder) (o api.Owner, err error) {
	for d.next() {
		switch d.num {
		case 1:
			o.ContainerID = d.str("containerID")
		case 2:
			o.IfName = d.str("ifName")
		}
	}
	return o, d.err
}

func decodePod(d *decoder) (p api.PodRef, err error) {
	for d.next() {
		switch d.num {
		case 1:
			p.Namespace = d.str("namespace")
		case 2:
			p.Name = d.str("name")
		case 3:
			p.UID = d.str("uid")
		}
	}
	return p, d.err
}

// ownerPodNetwork decodes fields 1-3 shared by several messages; it reports whether it took
// the current field.
func ownerPodNetwork(d *decoder, o *api.Owner, network *string, p *api.PodRef) bool {
	var err error
	switch d.num {
	case 1:
		*o, err = decodeOwner(d.sub("owner"))
	case 2:
		*network = d.str("network")
	case 3:
		*p, err = decodePod(d.sub("pod"))
	default:
		return false
	}
	if err != nil && d.err == nil {
		d.err = err
	}
	return true
}

// DecodeAllocateRequest decodes an allocate request.
func DecodeAllocateRequest(b []byte, r *api.AllocateRequest) error {
	d := newDecoder(b, "allocate")
	for d.next() {
		if ownerPodNetwork(d, &r.Owner, &r.Network, &r.Pod) {
			continue
		}
		switch d.num {
		case 4:
			r.Pools = append(r.Pools, d.stri("pools", len(r.Pools)))
		case 5:
			r.IPs = append(r.IPs, d.stri("ips", len(r.IPs)))
		case 6:
			r.DefaultIPv4Pools = append(r.DefaultIPv4Pools, d.stri("defaultIPv4Pools", len(r.DefaultIPv4Pools)))
		case 7:
			r.DefaultIPv6Pools = append(r.DefaultIPv6Pools, d.stri("defaultIPv6Pools", len(r.DefaultIPv6Pools)))
		}
	}
	return d.err
}

// DecodeReleaseRequest decodes a release request.
func DecodeReleaseRequest(b []byte, r *api.ReleaseRequest) error {
	d := newDecoder(b, "release")
	for d.next() {
		ownerPodNetwork(d, &r.Owner, &r.Network, &r.Pod)
	}
	return d.err
}

// DecodeCheckRequest decodes a check request.
func DecodeCheckRequest(b []byte, r *api.CheckRequest) error {
	d := newDecoder(b, "check")
	for d.next() {
		ownerPodNetwork(d, &r.Owner, &r.Network, &r.Pod)
	}
	return d.err
}

// DecodeGCRequest decodes a GC request.
func DecodeGCRequest(b []byte, r *api.GCRequest) error {
	d := newDecoder(b, "gc")
	for d.next() {
		switch d.num {
		case 1:
			r.Network = d.str("network")
		case 2:
			o, err := decodeOwner(d.subi("valid", len(r.Valid)))
			r.Valid = append(r.Valid, o)
			d.done(err)
		}
	}
	if r.Valid == nil && d.err == nil {
		// "Nothing is valid" is an empty list, as allot-cni sends it in JSON.
		r.Valid = []api.Owner{}
	}
	return d.err
}

// DecodeGCResponse decodes a GC answer.
func DecodeGCResponse(b []byte, r *api.GCResponse) error {
	d := newDecoder(b, "gcResponse")
	for d.next() {
		if d.num == 1 {
			o, err := decodeOwner(d.subi("released", len(r.Released)))
			r.Released = append(r.Released, o)
			d.done(err)
		}
	}
	if r.Released == nil && d.err == nil {
		r.Released = []api.Owner{}
	}
	return d.err
}

// DecodeAllocation decodes an allocation.
func DecodeAllocation(b []byte, a *api.Allocation) error {
	d := newDecoder(b, "allocation")
	for d.next() {
		if ownerPodNetwork(d, &a.Owner, &a.Network, &a.Pod) {
			continue
		}
		switch d.num {
		case 4:
			s := d.subi("ips", len(a.IPs))
			var ip api.IPConfig
			for s.next() {
				switch s.num {
				case 1:
					ip.Address = s.str("address")
				case 2:
					ip.Gateway = s.str("gateway")
				case 3:
					ip.Pool = s.str("pool")
				}
			}
			a.IPs = append(a.IPs, ip)
			d.done(s.err)
		case 5:
			s := d.subi("routes", len(a.Routes))
			var r api.Route
			for s.next() {
				switch s.num {
				case 1:
					r.Dst = s.str("dst")
				case 2:
					r.GW = s.str("gw")
				}
			}
			a.Routes = append(a.Routes, r)
			d.done(s.err)
		case 6:
			if v := d.varint("created"); d.err == nil {
				a.Created = time.Unix(0, int64(v))
			}
		}
	}
	if a.IPs == nil && d.err == nil {
		// JSON answers always carry "ips"; keep the two clients alike.
		a.IPs = []api.IPConfig{}
	}
	return d.err
}

// DecodeError decodes an error answer.
func DecodeError(b []byte) (*api.Error, error) {
	d := newDecoder(b, "error")
	var e api.Error
	for d.next() {
		switch d.num {
		case 1:
			e.Code = api.ErrorCode(d.str("code"))
		case 2:
			e.Message = d.str("message")
		case 3:
			e.Field = d.str("field")
		}
	}
	if d.err == nil && e.Code == "" {
		d.err = fmt.Errorf("error.code: missing")
	}
	return &e, d.err
}
