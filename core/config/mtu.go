package config

import (
	"encoding/json"
	"fmt"
)

// The MTU bounds of a pod's interface in ENI mode, as the AWS VPC CNI checks its
// AWS_VPC_ENI_MTU and POD_MTU: an ENI carries jumbo frames of up to 9001 bytes; 576 is the
// datagram every IPv4 host must accept (RFC 791) and 1280 the minimum MTU of an IPv6 link
// (RFC 8200).
const (
	MinMTUIPv4 = 576
	MinMTUIPv6 = 1280
	MaxENIMTU  = 9001
)

// ValidateENIMTU checks mtu as the MTU of a pod's interface in ENI mode; ipv6: pods get IPv6
// addresses too.
func ValidateENIMTU(mtu int, ipv6 bool) error {
	switch {
	case mtu < MinMTUIPv4 || mtu > MaxENIMTU:
		return fmt.Errorf("%d is outside %d..%d (an ENI's MTU range, as the AWS VPC CNI's AWS_VPC_ENI_MTU)", mtu, MinMTUIPv4, MaxENIMTU)
	case ipv6 && mtu < MinMTUIPv6:
		return fmt.Errorf("%d is below %d, the minimum MTU of an IPv6 link (IPv6 prefix delegation is on)", mtu, MinMTUIPv6)
	}
	return nil
}

// eniConflistMTU checks the mtu of every plugin of an ENI-mode network configuration list
// that sets one (ptp's, the chart's eni.mtu): a pod interface whose MTU the ENI cannot carry,
// or that IPv6 refuses, fails only at the first pod otherwise. A list that is not JSON is
// ValidateConflist's to report.
func eniConflistMTU(b []byte, ipv6 bool) []string {
	var list struct {
		Plugins []map[string]json.RawMessage `json:"plugins"`
	}
	if json.Unmarshal(b, &list) != nil {
		return nil
	}
	var out []string
	for i, p := range list.Plugins {
		raw, ok := p["mtu"]
		if !ok {
			continue
		}
		var mtu int
		if err := json.Unmarshal(raw, &mtu); err != nil {
			out = append(out, fmt.Sprintf("plugins[%d].mtu: %s is not an integer", i, raw))
			continue
		}
		if err := ValidateENIMTU(mtu, ipv6); err != nil {
			out = append(out, fmt.Sprintf("plugins[%d].mtu: %v", i, err))
		}
	}
	return out
}

// ipv6 reports whether ENI mode gives pods IPv6 addresses (the node's /80).
func (e ClusterENI) ipv6() bool {
	return e.IPv6PrefixDelegation || (e.Node.IPv6PrefixDelegation != nil && *e.Node.IPv6PrefixDelegation)
}
