// Package spiderpoolanno parses Spiderpool's pod and namespace annotations (its
// documentation, "Pod annotations": ipam.spidernet.io/ippool, ippools, subnet, subnets,
// default-ipv4-ippool, default-ipv6-ippool). It is vocabulary shared by the operator's subnet
// controller (core/operator) and the spiderpool-priority policy (plugins/policy), so it lives
// outside both: core never imports a plugin, and a plugin never imports core.
package spiderpoolanno

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/allot-ipam/allot/sdk/policy"
)

// Annotation keys, as Spiderpool spells them.
const (
	// Pod annotations.
	AnnoSubnet  = "ipam.spidernet.io/subnet"
	AnnoSubnets = "ipam.spidernet.io/subnets"
	AnnoIPPool  = "ipam.spidernet.io/ippool"
	AnnoIPPools = "ipam.spidernet.io/ippools"
	// Namespace annotations.
	AnnoNSDefaultIPv4 = "ipam.spidernet.io/default-ipv4-ippool"
	AnnoNSDefaultIPv6 = "ipam.spidernet.io/default-ipv6-ippool"
)

// Selection is one parsed entry of the ippool/ippools/subnet/subnets pod annotations: the
// pools (or, for the subnet annotations, subnets) for one interface, per family, best first.
// Names may be glob patterns (policy.IsPoolNamePattern).
type Selection struct {
	// Interface is the pod interface the entry is for; empty in a singular annotation means
	// "whatever interface is being configured".
	Interface string
	IPv4      []string
	IPv6      []string
	// CleanGateway (ippool annotations only) asks for no gateway route on this interface. It
	// does not affect pool choice; it is parsed so that a valid annotation is accepted.
	CleanGateway bool
}

// Wire shapes. Unknown fields are refused so that a typo ("ipv4pools", "iface") is reported
// instead of silently choosing nothing.
type ippoolJSON struct {
	Interface    string   `json:"interface"`
	IPv4         []string `json:"ipv4"`
	IPv6         []string `json:"ipv6"`
	CleanGateway bool     `json:"cleangateway"`
}

type subnetJSON struct {
	Interface string   `json:"interface"`
	IPv4      []string `json:"ipv4"`
	IPv6      []string `json:"ipv6"`
}

// ParseIPPoolAnnotation parses ipam.spidernet.io/ippool:
//
//	{"interface": "eth0", "ipv4": ["v4-a"], "ipv6": ["v6-a", "v6-b"], "cleangateway": false}
//
// "interface" and "cleangateway" are optional; at least one pool must be named.
func ParseIPPoolAnnotation(s string) (Selection, error) {
	var v ippoolJSON
	if err := decodeStrict(s, &v); err != nil {
		return Selection{}, err
	}
	sel := Selection(v)
	return sel, validateSelection("", sel, "pool")
}

// ParseIPPoolsAnnotation parses ipam.spidernet.io/ippools, one entry per interface:
//
//	[{"interface": "eth0", "ipv4": ["v4-a"], "ipv6": ["v6-a"], "cleangateway": true},
//	 {"interface": "net1", "ipv4": ["v4-b"]}]
//
// At least one entry; every entry names its interface, no interface twice.
func ParseIPPoolsAnnotation(s string) ([]Selection, error) {
	var v []ippoolJSON
	if err := decodeStrict(s, &v); err != nil {
		return nil, err
	}
	out := make([]Selection, len(v))
	for i, e := range v {
		out[i] = Selection(e)
	}
	return out, validateSelections(out, "pool")
}

// ParseSubnetAnnotation parses ipam.spidernet.io/subnet:
//
//	{"interface": "eth0", "ipv4": ["subnet-v4"], "ipv6": ["subnet-v6"]}
func ParseSubnetAnnotation(s string) (Selection, error) {
	var v subnetJSON
	if err := decodeStrict(s, &v); err != nil {
		return Selection{}, err
	}
	sel := Selection{Interface: v.Interface, IPv4: v.IPv4, IPv6: v.IPv6}
	return sel, validateSelection("", sel, "subnet")
}

// ParseSubnetsAnnotation parses ipam.spidernet.io/subnets, one entry per interface:
//
//	[{"interface": "eth0", "ipv4": ["subnet-a"]}, {"interface": "net1", "ipv4": ["subnet-b"]}]
func ParseSubnetsAnnotation(s string) ([]Selection, error) {
	var v []subnetJSON
	if err := decodeStrict(s, &v); err != nil {
		return nil, err
	}
	out := make([]Selection, len(v))
	for i, e := range v {
		out[i] = Selection{Interface: e.Interface, IPv4: e.IPv4, IPv6: e.IPv6}
	}
	return out, validateSelections(out, "subnet")
}

// ParseNamespaceDefaultPools parses ipam.spidernet.io/default-ipv4-ippool (or -ipv6-):
// a JSON array of pool names or patterns, e.g. ["ns-v4-a", "ns-v4-b"]. An empty array is
// valid and means "no default for this family".
func ParseNamespaceDefaultPools(s string) ([]string, error) {
	var v []string
	if err := decodeStrict(s, &v); err != nil {
		return nil, err
	}
	for i, n := range v {
		if err := ValidateName(n, "pool"); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return v, nil
}

func decodeStrict(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("invalid JSON: empty value")
		}
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid JSON: unexpected data after the value")
	}
	return nil
}

func validateSelections(sels []Selection, what string) error {
	if len(sels) == 0 {
		return errors.New("must list at least one interface")
	}
	for i, s := range sels {
		prefix := fmt.Sprintf("[%d].", i)
		if s.Interface == "" {
			return fmt.Errorf("%sinterface: must be set when several interfaces may be listed", prefix)
		}
		for j := range i {
			if sels[j].Interface == s.Interface {
				return fmt.Errorf("%sinterface: %q is listed twice", prefix, s.Interface)
			}
		}
		if err := validateSelection(prefix, s, what); err != nil {
			return err
		}
	}
	return nil
}

func validateSelection(prefix string, s Selection, what string) error {
	if len(s.IPv4) == 0 && len(s.IPv6) == 0 {
		return fmt.Errorf("%sipv4, %sipv6: at least one %s must be named", prefix, prefix, what)
	}
	for _, fam := range []struct {
		field string
		names []string
	}{{"ipv4", s.IPv4}, {"ipv6", s.IPv6}} {
		for j, n := range fam.names {
			if err := ValidateName(n, what); err != nil {
				return fmt.Errorf("%s%s[%d]: %w", prefix, fam.field, j, err)
			}
		}
	}
	return nil
}

// ValidateName checks one pool or subnet name of an annotation: not empty, and a well-formed
// glob if it is a pattern. what ("pool", "subnet") names the kind in the error.
func ValidateName(n, what string) error {
	if n == "" {
		return fmt.Errorf("%s name must not be empty", what)
	}
	if policy.IsPoolNamePattern(n) {
		return policy.ValidatePoolNamePattern(n)
	}
	return nil
}
