package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// ClaimName is the AddressClaim name of an address: "v4-172.18.0.10" or "v6-" followed by
// the 32 hex digits of the IPv6 address. It depends on the address alone, so two agents
// racing for one address create objects of the same name and the API server lets exactly one
// of them through. (IPv6 text with "::" cannot be used: it may start or end with a '-'.)
func ClaimName(a netip.Addr) string {
	a = a.Unmap()
	if a.Is4() {
		return "v4-" + a.String()
	}
	b := a.As16()
	return "v6-" + hex.EncodeToString(b[:])
}

// ParseClaimName is the inverse of ClaimName.
func ParseClaimName(name string) (netip.Addr, error) {
	switch {
	case strings.HasPrefix(name, "v4-"):
		a, err := netip.ParseAddr(name[3:])
		if err != nil || !a.Is4() {
			return netip.Addr{}, fmt.Errorf("claim name %q: not v4-<IPv4 address>", name)
		}
		return a, nil
	case strings.HasPrefix(name, "v6-"):
		b, err := hex.DecodeString(name[3:])
		if err != nil || len(b) != 16 || strings.ToLower(name[3:]) != name[3:] {
			return netip.Addr{}, fmt.Errorf("claim name %q: not v6-<32 lower-case hex digits>", name)
		}
		a := netip.AddrFrom16([16]byte(b))
		if a.Is4In6() {
			return netip.Addr{}, fmt.Errorf("claim name %q: an IPv4-mapped address is named v4-", name)
		}
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("claim name %q: must start with v4- or v6-", name)
}

// LabelValue makes s usable as a label value: values longer than 63 characters (pod and pool
// names may have up to 253) are cut and end in a hash of the whole, so they stay unique.
// Select with LabelValue(name) and compare the object's own field to be exact.
func LabelValue(s string) string {
	if len(s) <= 63 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:46] + "-" + hex.EncodeToString(sum[:8])
}
