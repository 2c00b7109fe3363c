package config

import (
	"fmt"
	"net/netip"
)

// AutoCreatePool is one IPPool the operator creates at start when no IPPool of that name
// exists (Cilium's operator option auto-create-cilium-pod-ip-pools, helm
// ipam.operator.autoCreateCiliumPodIPPools). An existing pool, however it got there and
// whatever a user changed in it, is never overwritten.
type AutoCreatePool struct {
	// Name of the IPPool.
	Name string `koanf:"name"`
	// IPv4 and IPv6: the families' CIDRs and per-node mask size.
	IPv4 *AutoCreateFamily `koanf:"ipv4"`
	IPv6 *AutoCreateFamily `koanf:"ipv6"`
}

// AutoCreateFamily is one family of an AutoCreatePool.
type AutoCreateFamily struct {
	CIDRs    []string `koanf:"cidrs"`
	MaskSize int      `koanf:"maskSize"`
}

// validateAutoCreatePools checks cluster.autoCreatePools; errors name the field. The IPPool
// CRD's rules are checked here too, so a bad entry stops the operator at start instead of
// failing its Create at every term.
func (c *Config) validateAutoCreatePools() []error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("cluster.autoCreatePools%s: %s", field, fmt.Sprintf(format, args...)))
	}
	seen := map[string]int{}
	for i, p := range c.Cluster.AutoCreatePools {
		f := fmt.Sprintf("[%d]", i)
		switch {
		case p.Name == "" || len(p.Name) > 253 || !dns1123Subdomain.MatchString(p.Name):
			add(f+".name", "%q is not a valid IPPool name", p.Name)
		default:
			if j, dup := seen[p.Name]; dup {
				add(f+".name", "%q is already cluster.autoCreatePools[%d]", p.Name, j)
			}
			seen[p.Name] = i
		}
		if p.IPv4 == nil && p.IPv6 == nil {
			add(f, "pool %q: set ipv4, ipv6 or both", p.Name)
		}
		for _, fam := range []struct {
			name string
			f    *AutoCreateFamily
			bits int
		}{{"ipv4", p.IPv4, 32}, {"ipv6", p.IPv6, 128}} {
			if fam.f == nil {
				continue
			}
			ff := f + "." + fam.name
			if len(fam.f.CIDRs) == 0 {
				add(ff+".cidrs", "empty; list the CIDRs the pool hands blocks out of")
			}
			var prefixes []netip.Prefix
			for k, s := range fam.f.CIDRs {
				pr, err := netip.ParsePrefix(s)
				switch {
				case err != nil || pr.Addr().BitLen() != fam.bits || pr.Addr().Is4In6():
					add(fmt.Sprintf("%s.cidrs[%d]", ff, k), "%q is not an %s CIDR", s, fam.name)
					continue
				case pr != pr.Masked():
					add(fmt.Sprintf("%s.cidrs[%d]", ff, k), "%q has host bits set; write %s", s, pr.Masked())
				case fam.f.MaskSize < pr.Bits():
					add(ff+".maskSize", "%d is shorter than the prefix length of cidrs[%d] %s", fam.f.MaskSize, k, s)
				}
				for m, o := range prefixes {
					if o.Overlaps(pr) {
						add(fmt.Sprintf("%s.cidrs[%d]", ff, k), "%s overlaps cidrs[%d] %s", s, m, o)
					}
				}
				prefixes = append(prefixes, pr)
			}
			if fam.f.MaskSize < 1 || fam.f.MaskSize > fam.bits {
				add(ff+".maskSize", "%d must be between 1 and %d", fam.f.MaskSize, fam.bits)
			}
		}
	}
	return errs
}
