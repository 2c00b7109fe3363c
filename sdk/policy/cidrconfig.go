package policy

import (
	"errors"
	"fmt"
)

// Validate checks one config: a valid node selector, at least one family, each CIDR of
// its family with 0 < perNodeMaskSize-bits, the per-node mask inside the CIDR and the address
// length, and for dual stack an equal number of addresses per node in both families (32 -
// IPv4.PerNodeMaskSize == 128 - IPv6.PerNodeMaskSize). Errors name the field.
//
// The node-labels policy and the operator (which reports a refused config in its status) apply
// the same rules, so they belong to the contract's type.
func (c *CIDRConfigView) Validate() error {
	if c.Name == "" {
		return errors.New("name: must not be empty")
	}
	if err := c.NodeSelector.Validate(); err != nil {
		return fmt.Errorf("nodeSelector: %w", err)
	}
	if c.IPv4 == nil && c.IPv6 == nil {
		return errors.New("ipv4, ipv6: at least one family must be set")
	}
	if c.IPv4 != nil {
		if err := validateSpec(c.IPv4, true); err != nil {
			return fmt.Errorf("ipv4.%w", err)
		}
	}
	if c.IPv6 != nil {
		if err := validateSpec(c.IPv6, false); err != nil {
			return fmt.Errorf("ipv6.%w", err)
		}
	}
	if c.IPv4 != nil && c.IPv6 != nil && 32-c.IPv4.PerNodeMaskSize != 128-c.IPv6.PerNodeMaskSize {
		return fmt.Errorf("ipv6.perNodeMaskSize: dual stack needs equal addresses per node: 32-%d != 128-%d",
			c.IPv4.PerNodeMaskSize, c.IPv6.PerNodeMaskSize)
	}
	return nil
}

func validateSpec(s *CIDRSpec, v4 bool) error {
	if !s.CIDR.IsValid() {
		return errors.New("cidr: must be set")
	}
	if s.CIDR.Addr().Is4() != v4 || s.CIDR.Addr().Is4In6() {
		return fmt.Errorf("cidr: %s is not of this family", s.CIDR)
	}
	if s.CIDR.Masked() != s.CIDR {
		return fmt.Errorf("cidr: %s has host bits set (did you mean %s?)", s.CIDR, s.CIDR.Masked())
	}
	if s.PerNodeMaskSize < s.CIDR.Bits() || s.PerNodeMaskSize > s.CIDR.Addr().BitLen() {
		return fmt.Errorf("perNodeMaskSize: %d must be between the CIDR's prefix length %d and %d",
			s.PerNodeMaskSize, s.CIDR.Bits(), s.CIDR.Addr().BitLen())
	}
	return nil
}
