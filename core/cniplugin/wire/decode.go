package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/allot-ipam/allot/core/api"
)

// Decoding follows proto3: fields in any order, the last value of a scalar wins, a message
// given twice is merged, unknown fields are skipped. Stricter than the generated code in
// what no conforming encoder writes (groups, varints over 64 bits, field numbers beyond
// 2^29-1), and strings must be UTF-8, as frame checks them. Errors name the field.

// maxFieldNumber is the largest field number protobuf allows.
const maxFieldNumber = 1<<29 - 1

// The messages are those of sdk/proto/protoerr, which names the field for core/api/frame.
var (
	errVarint   = errors.New("bad varint")
	errPastEnd  = errors.New("length runs past the end of the message")
	errFixed64  = errors.New("truncated fixed64")
	errFixed32  = errors.New("truncated fixed32")
	errWireType = errors.New("unsupported wire type")
)

// field is one field of a message: its number, wire type and value.
type field struct {
	num  int
	wt   int
	u    uint64 // the value of a varint, fixed64 or fixed32 field
	data []byte // the value of a length-delimited field
}

// fields calls f for every field of msg, in order; path names msg in errors.
func fields(path string, msg []byte, f func(field) error) error {
	for len(msg) > 0 {
		tag, n := binary.Uvarint(msg)
		if n <= 0 {
			return fmt.Errorf("%s: bad field key", path)
		}
		msg = msg[n:]
		fl := field{num: int(min(tag>>3, maxFieldNumber+1)), wt: int(tag & 7)}
		if fl.num == 0 || fl.num > maxFieldNumber {
			return fmt.Errorf("%s: field number %d out of range", path, tag>>3)
		}
		var err error
		if msg, err = fl.read(msg); err != nil {
			return fmt.Errorf("%s: field %d: %w", path, fl.num, err)
		}
		if err := f(fl); err != nil {
			return err
		}
	}
	return nil
}

// read takes the field's value off the front of b and returns the rest.
func (f *field) read(b []byte) ([]byte, error) {
	switch f.wt {
	case wireVarint:
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errVarint
		}
		f.u = v
		return b[n:], nil
	case wireFixed64:
		if len(b) < 8 {
			return nil, errFixed64
		}
		f.u = binary.LittleEndian.Uint64(b)
		return b[8:], nil
	case wireFixed32:
		if len(b) < 4 {
			return nil, errFixed32
		}
		f.u = uint64(binary.LittleEndian.Uint32(b))
		return b[4:], nil
	case wireBytes:
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, errPastEnd
		}
		f.data = b[n : n+int(l)]
		return b[n+int(l):], nil
	}
	return nil, fmt.Errorf("%w %d", errWireType, f.wt)
}

// want checks the wire type of a known field; what is "bytes" or "a message".
func (f field) want(path string, wt int, what string) error {
	if f.wt != wt {
		return fmt.Errorf("%s: wire type %d, want %s", path, f.wt, what)
	}
	return nil
}

func str(path string, f field, dst *string) error {
	if err := f.want(path, wireBytes, "bytes"); err != nil {
		return err
	}
	if !utf8.Valid(f.data) {
		return fmt.Errorf("%s: not valid UTF-8", path)
	}
	*dst = string(f.data)
	return nil
}

func varint(path string, f field, dst *uint64) error {
	if err := f.want(path, wireVarint, "varint"); err != nil {
		return err
	}
	*dst = f.u
	return nil
}

func boolean(path string, f field, dst *bool) error {
	var v uint64
	err := varint(path, f, &v)
	*dst = v != 0
	return err
}

// message decodes an embedded message with decode.
func message(path string, f field, decode func(path string, b []byte) error) error {
	if err := f.want(path, wireBytes, "a message"); err != nil {
		return err
	}
	return decode(path, f.data)
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func decodeOwner(path string, b []byte, o *api.Owner) error {
	return fields(path, b, func(f field) error {
		switch f.num {
		case 1:
			return str(path+".containerID", f, &o.ContainerID)
		case 2:
			return str(path+".ifName", f, &o.IfName)
		}
		return nil
	})
}

func decodePod(path string, b []byte, p *api.PodRef) error {
	return fields(path, b, func(f field) error {
		switch f.num {
		case 1:
			return str(path+".namespace", f, &p.Namespace)
		case 2:
			return str(path+".name", f, &p.Name)
		case 3:
			return str(path+".uid", f, &p.UID)
		}
		return nil
	})
}

// owners returns a decoder that appends to *list.
func owners(list *[]api.Owner) func(string, []byte) error {
	return func(path string, b []byte) error {
		var o api.Owner
		err := decodeOwner(index(path, len(*list)), b, &o)
		*list = append(*list, o)
		return err
	}
}

// DecodeAllocation decodes an allot.api.v1.Allocation as frame.DecodeAllocation does: ips is
// never nil.
func DecodeAllocation(b []byte, a *api.Allocation) error {
	*a = api.Allocation{IPs: []api.IPConfig{}}
	var created uint64
	err := fields("allocation", b, func(f field) error {
		switch f.num {
		case 1:
			return message("allocation.owner", f, func(p string, m []byte) error { return decodeOwner(p, m, &a.Owner) })
		case 2:
			return str("allocation.network", f, &a.Network)
		case 3:
			return message("allocation.pod", f, func(p string, m []byte) error { return decodePod(p, m, &a.Pod) })
		case 4:
			return message("allocation.ips", f, func(p string, m []byte) error {
				a.IPs = append(a.IPs, api.IPConfig{})
				return decodeIPConfig(index(p, len(a.IPs)-1), m, &a.IPs[len(a.IPs)-1])
			})
		case 5:
			return message("allocation.routes", f, func(p string, m []byte) error {
				a.Routes = append(a.Routes, api.Route{})
				return decodeRoute(index(p, len(a.Routes)-1), m, &a.Routes[len(a.Routes)-1])
			})
		case 6:
			return varint("allocation.created", f, &created)
		}
		return nil
	})
	if created != 0 {
		a.Created = time.Unix(0, int64(created))
	}
	return err
}

func decodeIPConfig(path string, b []byte, ip *api.IPConfig) error {
	return fields(path, b, func(f field) error {
		switch f.num {
		case 1:
			return str(path+".address", f, &ip.Address)
		case 2:
			return str(path+".gateway", f, &ip.Gateway)
		case 3:
			return str(path+".pool", f, &ip.Pool)
		}
		return nil
	})
}

func decodeRoute(path string, b []byte, r *api.Route) error {
	return fields(path, b, func(f field) error {
		switch f.num {
		case 1:
			return str(path+".dst", f, &r.Dst)
		case 2:
			return str(path+".gw", f, &r.GW)
		}
		return nil
	})
}

// DecodeGCResponse decodes an allot.api.v1.GCResponse; released is never nil.
func DecodeGCResponse(b []byte, r *api.GCResponse) error {
	*r = api.GCResponse{Released: []api.Owner{}}
	return fields("gcResponse", b, func(f field) error {
		if f.num == 1 {
			return message("gcResponse.released", f, owners(&r.Released))
		}
		return nil
	})
}

// DecodeError decodes an allot.api.v1.Error; one without a code is an error.
func DecodeError(b []byte) (*api.Error, error) {
	e := &api.Error{}
	err := fields("error", b, func(f field) error {
		switch f.num {
		case 1:
			var s string
			err := str("error.code", f, &s)
			e.Code = api.ErrorCode(s)
			return err
		case 2:
			return str("error.message", f, &e.Message)
		case 3:
			return str("error.field", f, &e.Field)
		}
		return nil
	})
	if err == nil && e.Code == "" {
		err = errors.New("error.code: missing")
	}
	return e, err
}

// DecodeStatus decodes an allot.api.v1.Status; pools is never nil.
func DecodeStatus(b []byte, s *api.Status) error {
	*s = api.Status{Pools: []api.PoolStatus{}}
	return fields("status", b, func(f field) error {
		switch f.num {
		case 1:
			return boolean("status.ready", f, &s.Ready)
		case 2:
			return str("status.message", f, &s.Message)
		case 3:
			return str("status.version", f, &s.Version)
		case 4:
			return str("status.mode", f, &s.Mode)
		case 5:
			return str("status.uptime", f, &s.Uptime)
		case 6:
			return message("status.pools", f, func(p string, m []byte) error {
				s.Pools = append(s.Pools, api.PoolStatus{})
				return decodePoolStatus(index(p, len(s.Pools)-1), m, &s.Pools[len(s.Pools)-1])
			})
		case 7:
			var v uint64
			err := varint("status.allocations", f, &v)
			s.Allocations = int(int64(v))
			return err
		}
		return nil
	})
}

func decodePoolStatus(path string, b []byte, p *api.PoolStatus) error {
	return fields(path, b, func(f field) error {
		switch f.num {
		case 1:
			return str(path+".name", f, &p.Name)
		case 2:
			return str(path+".family", f, &p.Family)
		case 3:
			p.CIDRs = append(p.CIDRs, "")
			return str(index(path+".cidrs", len(p.CIDRs)-1), f, &p.CIDRs[len(p.CIDRs)-1])
		case 4:
			return varint(path+".usable", f, &p.Usable)
		case 5:
			return varint(path+".used", f, &p.Used)
		case 6:
			return varint(path+".free", f, &p.Free)
		case 7:
			if err := f.want(path+".utilization", wireFixed64, "fixed64"); err != nil {
				return err
			}
			p.Utilization = math.Float64frombits(f.u)
		case 8:
			return boolean(path+".default", f, &p.Default)
		}
		return nil
	})
}
