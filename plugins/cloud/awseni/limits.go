package awseni

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/amazon-vpc-resource-controller-k8s/pkg/aws/vpc"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// BuiltinLimits returns an instance type's limits from the table maintained in
// github.com/aws/amazon-vpc-resource-controller-k8s/pkg/aws/vpc. On types with several
// network cards, the interface count is the default card's (the one whose interfaces the
// instance attaches by device index). The table has no IPv6 column; AWS allows as many IPv6
// as IPv4 addresses per interface on every current type, so that is what is reported.
func BuiltinLimits(instanceType string) (cloud.Limits, bool) {
	l, ok := vpc.Limits[instanceType]
	if !ok || l == nil {
		return cloud.Limits{}, false
	}
	enis := l.Interface
	if len(l.NetworkCards) > 1 {
		for _, c := range l.NetworkCards {
			if int(c.NetworkCardIndex) == l.DefaultNetworkCardIndex {
				enis = int(c.MaximumNetworkInterfaces)
			}
		}
	}
	return cloud.Limits{MaxInterfaces: enis, AddressesPerInterface: l.IPv4PerInterface, IPv6AddressesPerInterface: l.IPv4PerInterface,
		PrefixDelegation: l.Hypervisor == nitro}, true
}

// BuiltinTypes is the number of instance types in the built-in table.
func BuiltinTypes() int { return len(vpc.Limits) }

// ParseLimitMapping parses the --aws-instance-limit-mapping syntax: a comma-free list of
// entries "type=enis,addrsPerEni,ipv6PerEni" separated by spaces or semicolons, or given one
// per map key (see Config.InstanceLimits). Errors name the entry.
func ParseLimitMapping(s string) (map[string]cloud.Limits, error) {
	out := map[string]cloud.Limits{}
	for _, entry := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ';' || r == '\n' }) {
		typ, val, ok := strings.Cut(entry, "=")
		if !ok || typ == "" {
			return nil, fmt.Errorf("instance-limit-mapping: entry %q: want type=enis,addrsPerEni,ipv6PerEni", entry)
		}
		l, err := parseLimits(val)
		if err != nil {
			return nil, fmt.Errorf("instance-limit-mapping: entry %q: %w", entry, err)
		}
		out[typ] = l
	}
	return out, nil
}

func parseLimits(v string) (cloud.Limits, error) {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return cloud.Limits{}, fmt.Errorf("want 3 numbers (enis,addrsPerEni,ipv6PerEni), got %q", v)
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || x < 0 {
			return cloud.Limits{}, fmt.Errorf("%q is not a non-negative number", p)
		}
		n[i] = x
	}
	if n[0] < 1 || n[1] < 2 {
		return cloud.Limits{}, fmt.Errorf("enis must be at least 1 and addrsPerEni at least 2, got %q", v)
	}
	return cloud.Limits{MaxInterfaces: n[0], AddressesPerInterface: n[1], IPv6AddressesPerInterface: n[2]}, nil
}

// limits resolves instance types to limits: the configured mapping first, then (when
// UpdateLimitsViaAPI is on) what DescribeInstanceTypes reported, then the built-in table,
// and for a type the table does not know, DescribeInstanceTypes for that type.
type limits struct {
	api      EC2API
	mapping  map[string]cloud.Limits
	viaAPI   bool
	mu       sync.Mutex
	fromAPI  map[string]cloud.Limits
	loadedAt bool
}

func (l *limits) resolve(ctx context.Context, instanceType string) (cloud.Limits, error) {
	if v, ok := l.mapping[instanceType]; ok {
		return v, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.viaAPI && !l.loadedAt {
		if err := l.loadAll(ctx); err != nil {
			return cloud.Limits{}, err
		}
		l.loadedAt = true
	}
	if v, ok := l.fromAPI[instanceType]; ok {
		return v, nil
	}
	if v, ok := BuiltinLimits(instanceType); ok {
		return v, nil
	}
	out, err := l.api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{types.InstanceType(instanceType)}})
	if err != nil {
		return cloud.Limits{}, fmt.Errorf("limits of instance type %q: %w", instanceType, mapErr(err))
	}
	l.store(out.InstanceTypes)
	if v, ok := l.fromAPI[instanceType]; ok {
		return v, nil
	}
	return cloud.Limits{}, fmt.Errorf("limits of instance type %q: unknown to the built-in table and to DescribeInstanceTypes", instanceType)
}

// loadAll reads every instance type's limits (Cilium's --update-ec2-adapter-limit-via-api).
func (l *limits) loadAll(ctx context.Context) error {
	p := ec2.NewDescribeInstanceTypesPaginator(l.api, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(100)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("DescribeInstanceTypes: %w", mapErr(err))
		}
		l.store(out.InstanceTypes)
	}
	return nil
}

func (l *limits) store(its []types.InstanceTypeInfo) {
	if l.fromAPI == nil {
		l.fromAPI = map[string]cloud.Limits{}
	}
	for _, it := range its {
		ni := it.NetworkInfo
		if ni == nil {
			continue
		}
		enis := int(aws.ToInt32(ni.MaximumNetworkInterfaces))
		def := aws.ToInt32(ni.DefaultNetworkCardIndex)
		if len(ni.NetworkCards) > 1 {
			for _, c := range ni.NetworkCards {
				if aws.ToInt32(c.NetworkCardIndex) == def {
					enis = int(aws.ToInt32(c.MaximumNetworkInterfaces))
				}
			}
		}
		l.fromAPI[string(it.InstanceType)] = cloud.Limits{MaxInterfaces: enis,
			AddressesPerInterface:     int(aws.ToInt32(ni.Ipv4AddressesPerInterface)),
			IPv6AddressesPerInterface: int(aws.ToInt32(ni.Ipv6AddressesPerInterface)),
			PrefixDelegation:          it.Hypervisor == types.InstanceTypeHypervisorNitro}
	}
}

// formatLimitMapping renders a mapping in ParseLimitMapping's syntax, sorted (for logs).
func formatLimitMapping(m map[string]cloud.Limits) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		l := m[k]
		fmt.Fprintf(&b, "%s=%d,%d,%d", k, l.MaxInterfaces, l.AddressesPerInterface, l.IPv6AddressesPerInterface)
	}
	return b.String()
}
