package awseni

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// Prefix delegation (docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-prefix-eni.html):
// IPv4 /28 prefixes take one address slot each (AssignPrivateIpAddresses with
// Ipv4PrefixCount), IPv6 /80 prefixes come from AssignIpv6Addresses with Ipv6PrefixCount.
// Only Nitro instances take prefixes; the backend reports it in Limits.PrefixDelegation
// (the built-in table's and DescribeInstanceTypes' hypervisor; types of the
// instance-limit-mapping have none, so no prefixes, as in Cilium).

// nitro is the hypervisor of the instance types that support prefix delegation.
const nitro = "nitro"

// prefixSize4 is the number of addresses of a delegated IPv4 prefix (/28).
const prefixSize4 = 16

func (e *eniEntry) prefixes4() int {
	n := 0
	for _, p := range e.prefixes {
		if p.Addr().Is4() {
			n++
		}
	}
	return n
}

func sortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
}

// allocatePrefixes delegates req.Count prefixes of req.Family to the interface, fewer if
// its slots or (IPv4) its subnet cannot take that many as far as the cache knows.
func (b *Backend) allocatePrefixes(ctx context.Context, req cloud.AllocateRequest) (cloud.AllocateResult, error) {
	inst, e, lim, err := b.allocationTarget(ctx, req)
	if err != nil {
		return cloud.AllocateResult{}, err
	}
	if !lim.PrefixDelegation {
		return cloud.AllocateResult{}, fmt.Errorf("aws-eni: allocate: %s (%s) is not a Nitro instance: prefixes %w", inst.id, inst.typ, cloud.ErrUnsupported)
	}
	var got []netip.Prefix
	if req.Family == cloud.IPv6 {
		got, err = b.assignIPv6Prefixes(ctx, e, req.Count)
	} else {
		got, err = b.assignIPv4Prefixes(ctx, e, lim, req.Count)
	}
	if err != nil {
		return cloud.AllocateResult{}, err
	}
	b.cache.update(e.id, func(c *eniEntry) {
		c.prefixes = append(c.prefixes, got...)
		sortPrefixes(c.prefixes)
	})
	return cloud.AllocateResult{Interface: e.id, Prefixes: got}, nil
}

func (b *Backend) assignIPv4Prefixes(ctx context.Context, e eniEntry, lim cloud.Limits, count int) ([]netip.Prefix, error) {
	if room := lim.AddressesPerInterface - 1 - len(e.addrs) - e.prefixes4(); lim.AddressesPerInterface > 0 && count > room {
		if room <= 0 {
			return nil, fmt.Errorf("aws-eni: allocate: %s holds %d addresses and prefixes: %w", e.id, 1+len(e.addrs)+e.prefixes4(), cloud.ErrLimitReached)
		}
		count = room
	}
	if s, ok := b.cache.subnet(e.subnet); ok && uint64(count)*prefixSize4 > s.Free {
		if s.Free < prefixSize4 {
			return nil, fmt.Errorf("aws-eni: allocate: subnet %s has %d free addresses: %w", e.subnet, s.Free, cloud.ErrNoFreePrefix)
		}
		count = int(s.Free / prefixSize4)
	}
	out, err := b.api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(e.id), Ipv4PrefixCount: aws.Int32(int32(count))})
	if err != nil {
		return nil, fmt.Errorf("aws-eni: allocate prefixes on %s: %w", e.id, mapErr(err))
	}
	var got []netip.Prefix
	for _, p := range out.AssignedIpv4Prefixes {
		if pfx, err := netip.ParsePrefix(aws.ToString(p.Ipv4Prefix)); err == nil {
			got = append(got, pfx)
		}
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("aws-eni: allocate prefixes on %s: EC2 assigned nothing: %w", e.id, cloud.ErrLimitReached)
	}
	sortPrefixes(got)
	b.cache.adjustSubnet(e.subnet, -prefixSize4*len(got))
	return got, nil
}

func (b *Backend) assignIPv6Prefixes(ctx context.Context, e eniEntry, count int) ([]netip.Prefix, error) {
	out, err := b.api.AssignIpv6Addresses(ctx, &ec2.AssignIpv6AddressesInput{
		NetworkInterfaceId: aws.String(e.id), Ipv6PrefixCount: aws.Int32(int32(count))})
	if err != nil {
		return nil, fmt.Errorf("aws-eni: allocate IPv6 prefixes on %s: %w", e.id, mapErr(err))
	}
	var got []netip.Prefix
	for _, s := range out.AssignedIpv6Prefixes {
		if pfx, err := netip.ParsePrefix(s); err == nil {
			got = append(got, pfx)
		}
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("aws-eni: allocate IPv6 prefixes on %s: EC2 assigned nothing: %w", e.id, cloud.ErrLimitReached)
	}
	sortPrefixes(got)
	return got, nil
}

// releasePrefixes takes req.Prefixes back, those the interface still holds (Release is
// idempotent): one UnassignPrivateIpAddresses for the IPv4 ones, one UnassignIpv6Addresses
// for the IPv6 ones.
func (b *Backend) releasePrefixes(ctx context.Context, inst *instance, req cloud.ReleaseRequest) error {
	e, ok := b.cache.eni(req.Interface)
	if !ok || e.instance != inst.id {
		return fmt.Errorf("aws-eni: release: interface %q is not attached to node %q", req.Interface, req.Node.Name)
	}
	var v4, v6 []string
	var drop []netip.Prefix
	for _, p := range req.Prefixes {
		if !slices.Contains(e.prefixes, p) || slices.Contains(drop, p) {
			continue
		}
		drop = append(drop, p)
		if p.Addr().Is4() {
			v4 = append(v4, p.String())
		} else {
			v6 = append(v6, p.String())
		}
	}
	var errs []error
	if len(v4) > 0 {
		if _, err := b.api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(e.id), Ipv4Prefixes: v4}); err != nil {
			errs = append(errs, fmt.Errorf("aws-eni: release prefixes on %s: %w", e.id, mapErr(err)))
			drop = slices.DeleteFunc(drop, func(p netip.Prefix) bool { return p.Addr().Is4() })
		} else {
			b.cache.adjustSubnet(e.subnet, prefixSize4*len(v4))
		}
	}
	if len(v6) > 0 {
		if _, err := b.api.UnassignIpv6Addresses(ctx, &ec2.UnassignIpv6AddressesInput{NetworkInterfaceId: aws.String(e.id), Ipv6Prefixes: v6}); err != nil {
			errs = append(errs, fmt.Errorf("aws-eni: release IPv6 prefixes on %s: %w", e.id, mapErr(err)))
			drop = slices.DeleteFunc(drop, func(p netip.Prefix) bool { return p.Addr().Is6() })
		}
	}
	b.cache.update(e.id, func(c *eniEntry) {
		c.prefixes = slices.DeleteFunc(c.prefixes, func(p netip.Prefix) bool { return slices.Contains(drop, p) })
	})
	return errors.Join(errs...)
}
