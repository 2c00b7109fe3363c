package cniplugin

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/allot-ipam/allot/core/api"
)

// resultFrom turns the daemon's allocation into a CNI result: addresses with their gateway,
// and the pool routes. An IPAM plugin creates no interface, so Interface stays nil.
func resultFrom(a *api.Allocation) (*current.Result, error) {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if len(a.IPs) == 0 {
		return nil, types.NewError(types.ErrInternal, "allotd answered an allocation without addresses", "")
	}
	for i, ip := range a.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return nil, badAnswer("ips[%d].address", i, ip.Address)
		}
		ipc := &current.IPConfig{Address: prefixToIPNet(p, false)}
		if ip.Gateway != "" {
			gw, err := netip.ParseAddr(ip.Gateway)
			if err != nil {
				return nil, badAnswer("ips[%d].gateway", i, ip.Gateway)
			}
			ipc.Gateway = net.IP(gw.Unmap().AsSlice())
		}
		res.IPs = append(res.IPs, ipc)
	}
	for i, r := range a.Routes {
		dst, err := netip.ParsePrefix(r.Dst)
		if err != nil {
			return nil, badAnswer("routes[%d].dst", i, r.Dst)
		}
		rt := &types.Route{Dst: prefixToIPNet(dst, true)}
		if r.GW != "" {
			gw, err := netip.ParseAddr(r.GW)
			if err != nil {
				return nil, badAnswer("routes[%d].gw", i, r.GW)
			}
			rt.GW = net.IP(gw.Unmap().AsSlice())
		}
		res.Routes = append(res.Routes, rt)
	}
	return res, nil
}

// prefixToIPNet converts, keeping the host bits of an address unless masked is set (route
// destinations are networks).
func prefixToIPNet(p netip.Prefix, masked bool) net.IPNet {
	if masked {
		p = p.Masked()
	}
	a := p.Addr().Unmap()
	return net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(p.Bits(), a.BitLen())}
}

func badAnswer(field string, i int, v string) *types.Error {
	return types.NewError(types.ErrInternal, fmt.Sprintf("allotd answered a bad value in "+field+": %q", i, v), "")
}

// encodeResult prints the result in the configuration's CNI version. For 1.0.0 and later it
// writes the JSON itself, byte for byte what the library's PrintTo writes (a test compares
// them): the library re-encodes through a map with reflection, a noticeable part of an ADD
// in a process that lives about a millisecond. Older versions convert through the library.
func encodeResult(res *current.Result, cniVersion string) ([]byte, error) {
	if b, ok := appendResult(nil, res, cniVersion); ok {
		return b, nil
	}
	out, err := res.GetAsVersion(cniVersion)
	if err != nil {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("cannot express the result as CNI %s: %v", cniVersion, err), "")
	}
	var buf bytesWriter
	if err := out.PrintTo(&buf); err != nil {
		return nil, types.NewError(types.ErrIOFailure, fmt.Sprintf("encode result: %v", err), "")
	}
	return buf, nil
}

type bytesWriter []byte

func (w *bytesWriter) Write(p []byte) (int, error) {
	*w = append(*w, p...)
	return len(p), nil
}

// appendResult writes an IPAM result (addresses with gateways, routes with gateways; no
// interfaces, no DNS) as MarshalIndent(res, "", "    ") does in a 1.x version: keys sorted,
// empty lists left out. It reports false for anything else, left to the library.
func appendResult(b []byte, res *current.Result, cniVersion string) ([]byte, bool) {
	if !slices.Contains([]string{"1.0.0", "1.1.0"}, cniVersion) || len(res.Interfaces) > 0 || !res.DNS.IsEmpty() || len(res.IPs) == 0 {
		return nil, false
	}
	b = append(b, "{\n    \"cniVersion\": \""...)
	b = append(b, cniVersion...)
	b = append(b, "\",\n    \"ips\": ["...)
	for i, ip := range res.IPs {
		addr, gw := ip.Address.String(), ipString(ip.Gateway)
		if ip.Interface != nil || !addressText(addr) || !addressText(gw) {
			return nil, false
		}
		b = appendObject(b, i, "address", addr, "gateway", gw)
	}
	b = append(b, "\n    ]"...)
	if len(res.Routes) > 0 {
		b = append(b, ",\n    \"routes\": ["...)
		for i, r := range res.Routes {
			dst, gw := r.Dst.String(), ipString(r.GW)
			if r.MTU != 0 || r.AdvMSS != 0 || r.Priority != 0 || r.Table != nil || r.Scope != nil || !addressText(dst) || !addressText(gw) {
				return nil, false
			}
			b = appendObject(b, i, "dst", dst, "gw", gw)
		}
		b = append(b, "\n    ]"...)
	}
	return append(b, "\n}"...), true
}

func ipString(ip net.IP) string {
	if ip == nil {
		return ""
	}
	return ip.String()
}

// appendObject writes the i-th element of a list: an object of one or two string fields
// (the second left out when empty), values as they are (see addressText).
func appendObject(b []byte, i int, k1, v1, k2, v2 string) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	b = append(b, "\n        {\n            \""...)
	b = append(append(append(append(b, k1...), "\": \""...), v1...), '"')
	if v2 != "" {
		b = append(b, ",\n            \""...)
		b = append(append(append(append(b, k2...), "\": \""...), v2...), '"')
	}
	return append(b, "\n        }"...)
}

// addressText reports whether s is made of what address text is made of, which JSON
// needs no escape for.
func addressText(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || c == '.' || c == ':' || c == '/') {
			return false
		}
	}
	return true
}
