// Package awseni is allot's AWS ENI cloud backend: it carries out the operator's decisions
// (core/eni) on EC2 through the real aws-sdk-go-v2 client. See README.md.
package awseni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// Name is the backend's name in configuration.
const Name = "aws-eni"

// Version of the backend (reported by the process plugin).
const Version = "0.1.0"

// Options are the backend's collaborators.
type Options struct {
	Logger  *slog.Logger
	Metrics *Metrics
	// Now is the cache's clock (default time.Now).
	Now func() time.Time
}

// Backend implements cloud.CloudBackend on EC2 ENIs.
type Backend struct {
	api    EC2API
	cfg    Config
	log    *slog.Logger
	cache  *cache
	limits *limits
}

var _ cloud.CloudBackend = (*Backend)(nil)

// New builds the backend with a client from the default AWS configuration chain.
func New(ctx context.Context, cfg Config, opts Options) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("aws-eni: config: %w", err)
	}
	c, err := NewClient(ctx, cfg, opts.Metrics)
	if err != nil {
		return nil, err
	}
	return NewWithAPI(c, cfg, opts)
}

// FromConfig builds the backend from its block of the allotd configuration.
func FromConfig(ctx context.Context, m map[string]any, opts Options) (*Backend, error) {
	cfg, err := ParseConfig(m)
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg, opts)
}

// NewWithAPI builds the backend on an existing client (tests: ec2fake).
func NewWithAPI(api EC2API, cfg Config, opts Options) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("aws-eni: config: %w", err)
	}
	mapping, _ := cfg.limitMapping()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(mapping) > 0 {
		opts.Logger.Info("aws-eni: instance limit mapping", "mapping", formatLimitMapping(mapping))
	}
	return &Backend{
		api: api, cfg: cfg, log: opts.Logger,
		cache:  newCache(api, cfg.VPCID, cfg.ResyncInterval.Duration, opts.Now),
		limits: &limits{api: api, mapping: mapping, viaAPI: cfg.UpdateLimitsViaAPI},
	}, nil
}

// InstanceID extracts the EC2 instance ID of a node: from its providerID
// (aws:///us-east-1a/i-0123...) or, failing that, a name that is an instance ID.
func InstanceID(n cloud.NodeRef) (string, error) {
	if n.ProviderID != "" {
		rest, ok := strings.CutPrefix(n.ProviderID, "aws://")
		id := rest[strings.LastIndex(rest, "/")+1:]
		if !ok || !strings.HasPrefix(id, "i-") {
			return "", fmt.Errorf("aws-eni: node %q: providerID %q is not aws:///<zone>/<instance-id>", n.Name, n.ProviderID)
		}
		return id, nil
	}
	if strings.HasPrefix(n.Name, "i-") {
		return n.Name, nil
	}
	return "", fmt.Errorf("aws-eni: node %q: providerID is empty and the name is not an instance ID", n.Name)
}

// node resolves a node to its cached instance, loading it if needed.
func (b *Backend) node(ctx context.Context, n cloud.NodeRef) (*instance, []eniEntry, []cloud.Subnet, error) {
	id, err := InstanceID(n)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := b.cache.fresh(ctx); err != nil {
		return nil, nil, nil, fmt.Errorf("aws-eni: %w", err)
	}
	inst, enis, subnets, ok := b.cache.snapshot(id)
	if !ok {
		if err := b.cache.loadInstance(ctx, id); err != nil {
			return nil, nil, nil, fmt.Errorf("aws-eni: node %q: %w", n.Name, err)
		}
		inst, enis, subnets, _ = b.cache.snapshot(id)
	}
	return inst, enis, subnets, nil
}

// Inventory implements cloud.CloudBackend.
func (b *Backend) Inventory(ctx context.Context, n cloud.NodeRef) (cloud.NodeInventory, error) {
	inst, enis, subnets, err := b.node(ctx, n)
	if err != nil {
		return cloud.NodeInventory{}, err
	}
	lim, err := b.limits.resolve(ctx, inst.typ)
	if err != nil {
		return cloud.NodeInventory{}, fmt.Errorf("aws-eni: node %q: %w", n.Name, err)
	}
	inv := cloud.NodeInventory{Limits: lim, Subnets: subnets}
	for _, e := range enis {
		inv.Interfaces = append(inv.Interfaces, toInterface(e))
	}
	return inv, nil
}

func toInterface(e eniEntry) cloud.Interface {
	return cloud.Interface{ID: e.id, Index: e.index, Subnet: e.subnet, MAC: e.mac, Primary: e.index == 0,
		Addresses: append([]netip.Addr(nil), e.addrs...), SecurityGroups: append([]string(nil), e.groups...), Tags: e.tags,
		Prefixes: append([]netip.Prefix(nil), e.prefixes...)}
}

// Allocate implements cloud.CloudBackend with AssignPrivateIpAddresses. It asks for no more
// than the interface and its subnet can take (as far as the cache knows), so a full
// interface costs no API call.
func (b *Backend) Allocate(ctx context.Context, req cloud.AllocateRequest) (cloud.AllocateResult, error) {
	if req.Prefixes {
		return b.allocatePrefixes(ctx, req)
	}
	if req.Family != cloud.IPv4 {
		return cloud.AllocateResult{}, fmt.Errorf("aws-eni: allocate: family %q: %w (IPv4 only for now)", req.Family, cloud.ErrUnsupported)
	}
	_, e, lim, err := b.allocationTarget(ctx, req)
	if err != nil {
		return cloud.AllocateResult{}, err
	}
	count := req.Count
	if room := lim.AddressesPerInterface - 1 - len(e.addrs) - e.prefixes4(); lim.AddressesPerInterface > 0 && count > room {
		if room <= 0 {
			return cloud.AllocateResult{}, fmt.Errorf("aws-eni: allocate: %s holds %d addresses: %w", e.id, len(e.addrs)+1, cloud.ErrLimitReached)
		}
		count = room
	}
	if s, ok := b.cache.subnet(e.subnet); ok && uint64(count) > s.Free {
		if s.Free == 0 {
			return cloud.AllocateResult{}, fmt.Errorf("aws-eni: allocate: subnet %s: %w", e.subnet, cloud.ErrSubnetFull)
		}
		count = int(s.Free)
	}
	out, err := b.api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(e.id), SecondaryPrivateIpAddressCount: aws.Int32(int32(count))})
	if err != nil {
		err = mapErr(err)
		if errors.Is(err, cloud.ErrSubnetFull) {
			b.cache.setSubnetFree(e.subnet, 0)
		}
		if errorCode(err) == "InvalidNetworkInterfaceID.NotFound" {
			_ = b.cache.refreshENI(ctx, e.id)
		}
		return cloud.AllocateResult{}, fmt.Errorf("aws-eni: allocate on %s: %w", e.id, err)
	}
	var got []netip.Addr
	for _, a := range out.AssignedPrivateIpAddresses {
		if ip, err := netip.ParseAddr(aws.ToString(a.PrivateIpAddress)); err == nil {
			got = append(got, ip)
		}
	}
	sortAddrs(got)
	b.cache.update(e.id, func(c *eniEntry) {
		c.addrs = append(c.addrs, got...)
		sortAddrs(c.addrs)
	})
	b.cache.adjustSubnet(e.subnet, -len(got))
	if len(got) == 0 {
		return cloud.AllocateResult{}, fmt.Errorf("aws-eni: allocate on %s: EC2 assigned nothing: %w", e.id, cloud.ErrLimitReached)
	}
	return cloud.AllocateResult{Interface: e.id, Addresses: got}, nil
}

// allocationTarget checks an allocate request's count and resolves its node, interface and
// the node's limits.
func (b *Backend) allocationTarget(ctx context.Context, req cloud.AllocateRequest) (*instance, eniEntry, cloud.Limits, error) {
	if req.Count < 1 {
		return nil, eniEntry{}, cloud.Limits{}, fmt.Errorf("aws-eni: allocate: count %d must be at least 1", req.Count)
	}
	inst, _, _, err := b.node(ctx, req.Node)
	if err != nil {
		return nil, eniEntry{}, cloud.Limits{}, err
	}
	e, ok := b.cache.eni(req.Interface)
	if !ok || e.instance != inst.id {
		return nil, eniEntry{}, cloud.Limits{}, fmt.Errorf("aws-eni: allocate: interface %q is not attached to node %q", req.Interface, req.Node.Name)
	}
	lim, err := b.limits.resolve(ctx, inst.typ)
	if err != nil {
		return nil, eniEntry{}, cloud.Limits{}, fmt.Errorf("aws-eni: allocate: %w", err)
	}
	return inst, e, lim, nil
}

// CreateInterface implements cloud.CloudBackend: CreateNetworkInterface (with the
// description, tags and addresses), AttachNetworkInterface at req.Index and, when asked,
// ModifyNetworkInterfaceAttribute for delete-on-termination. An interface that fails to
// attach is deleted again so it does not hold subnet addresses.
func (b *Backend) CreateInterface(ctx context.Context, req cloud.CreateInterfaceRequest) (cloud.Interface, error) {
	if req.Count > 0 && req.Family != cloud.IPv4 {
		return cloud.Interface{}, fmt.Errorf("aws-eni: create interface: family %q: %w (IPv4 only for now)", req.Family, cloud.ErrUnsupported)
	}
	if req.Index < 1 {
		return cloud.Interface{}, fmt.Errorf("aws-eni: create interface: index %d: device index 0 is the primary interface's", req.Index)
	}
	if req.Subnet == "" {
		return cloud.Interface{}, errors.New("aws-eni: create interface: subnet is empty")
	}
	inst, enis, _, err := b.node(ctx, req.Node)
	if err != nil {
		return cloud.Interface{}, err
	}
	lim, err := b.limits.resolve(ctx, inst.typ)
	if err != nil {
		return cloud.Interface{}, fmt.Errorf("aws-eni: create interface: %w", err)
	}
	if lim.MaxInterfaces > 0 && len(enis) >= lim.MaxInterfaces {
		return cloud.Interface{}, fmt.Errorf("aws-eni: create interface: %s (%s) has %d of %d interfaces: %w", inst.id, inst.typ, len(enis), lim.MaxInterfaces, cloud.ErrLimitReached)
	}
	for _, e := range enis {
		if e.index == req.Index {
			return cloud.Interface{}, fmt.Errorf("aws-eni: create interface: device index %d of %s is taken by %s", req.Index, inst.id, e.id)
		}
	}
	groups, err := b.securityGroups(ctx, inst, enis, req.SecurityGroups, req.SecurityGroupTags)
	if err != nil {
		return cloud.Interface{}, err
	}
	count := req.Count
	if lim.AddressesPerInterface > 0 {
		count = min(count, lim.AddressesPerInterface-1)
	}
	if s, ok := b.cache.subnet(req.Subnet); ok {
		if s.Free < 1 {
			return cloud.Interface{}, fmt.Errorf("aws-eni: create interface: subnet %s: %w", req.Subnet, cloud.ErrSubnetFull)
		}
		count = min(count, int(min(s.Free-1, 1<<20)))
	}
	in := &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(req.Subnet), Groups: groups, Description: aws.String(req.Description)}
	if count > 0 {
		in.SecondaryPrivateIpAddressCount = aws.Int32(int32(count))
	}
	if len(req.Tags) > 0 {
		ts := types.TagSpecification{ResourceType: types.ResourceTypeNetworkInterface}
		for _, k := range sortedKeys(req.Tags) {
			ts.Tags = append(ts.Tags, types.Tag{Key: aws.String(k), Value: aws.String(req.Tags[k])})
		}
		in.TagSpecifications = []types.TagSpecification{ts}
	}
	created, err := b.api.CreateNetworkInterface(ctx, in)
	if err != nil {
		err = mapErr(err)
		if errors.Is(err, cloud.ErrSubnetFull) {
			b.cache.setSubnetFree(req.Subnet, 0)
		}
		return cloud.Interface{}, fmt.Errorf("aws-eni: create interface in %s: %w", req.Subnet, err)
	}
	e := eniFrom(*created.NetworkInterface)
	b.cache.adjustSubnet(req.Subnet, -(1 + len(e.addrs)))

	att, err := b.api.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{
		NetworkInterfaceId: aws.String(e.id), InstanceId: aws.String(inst.id), DeviceIndex: aws.Int32(int32(req.Index))})
	if err != nil {
		err = mapErr(err)
		if _, derr := b.api.DeleteNetworkInterface(context.WithoutCancel(ctx), &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(e.id)}); derr != nil {
			b.log.Warn("aws-eni: could not delete an interface that failed to attach", "interface", e.id, "err", derr)
		} else {
			b.cache.adjustSubnet(req.Subnet, 1+len(e.addrs))
		}
		if errorCode(err) == "InvalidParameterValue" {
			// Device index taken behind our back: re-read the instance next time.
			_ = b.cache.loadInstance(ctx, inst.id)
		}
		return cloud.Interface{}, fmt.Errorf("aws-eni: attach %s to %s at index %d: %w", e.id, inst.id, req.Index, err)
	}
	e.instance, e.index, e.attachment = inst.id, req.Index, aws.ToString(att.AttachmentId)
	b.cache.put(e)

	if req.DeleteOnTermination {
		_, err := b.api.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{NetworkInterfaceId: aws.String(e.id),
			Attachment: &types.NetworkInterfaceAttachmentChanges{AttachmentId: att.AttachmentId, DeleteOnTermination: aws.Bool(true)}})
		if err != nil {
			// The interface is attached and carries addresses: report it rather than lose it.
			b.log.Warn("aws-eni: could not set delete-on-termination", "interface", e.id, "err", err)
		}
	}
	return toInterface(*e), nil
}

// securityGroups picks a new interface's groups: the operator's IDs, else the groups of the
// instance's VPC carrying the operator's tags for the node (nodeTags), else those carrying
// the configured tags, else eth0's. Groups found by tags are cached per VPC and tag set.
// Tags the operator named for the node that match no group are an error (the node's ENIs
// would otherwise get groups it was not meant to have); configured tags that match none fall
// back to eth0's groups, as Cilium's security-group-tags do.
func (b *Backend) securityGroups(ctx context.Context, inst *instance, enis []eniEntry, asked []string, nodeTags map[string]string) ([]string, error) {
	if len(asked) > 0 {
		return asked, nil
	}
	tags := b.cfg.SecurityGroupTags
	if len(nodeTags) > 0 {
		tags = nodeTags
	}
	if len(tags) > 0 {
		groups, err := b.groupsByTags(ctx, inst.vpc, tags)
		if err != nil {
			return nil, err
		}
		if len(groups) > 0 {
			return groups, nil
		}
		if len(nodeTags) > 0 {
			return nil, fmt.Errorf("aws-eni: create interface: security-group-tags %v match no security group in %s", nodeTags, inst.vpc)
		}
		b.log.Warn("aws-eni: no security group matches the configured tags; using eth0's", "vpc", inst.vpc)
	}
	for _, e := range enis {
		if e.index == 0 {
			return e.groups, nil
		}
	}
	return nil, nil
}

// groupsByTags lists the groups of vpc carrying every one of tags (DescribeSecurityGroups),
// sorted, cached once found.
func (b *Backend) groupsByTags(ctx context.Context, vpc string, tags map[string]string) ([]string, error) {
	key := vpc
	filters := []types.Filter{{Name: aws.String("vpc-id"), Values: []string{vpc}}}
	for _, k := range sortedKeys(tags) {
		filters = append(filters, types.Filter{Name: aws.String("tag:" + k), Values: []string{tags[k]}})
		key += "|" + k + "=" + tags[k]
	}
	b.cache.mu.Lock()
	cached, ok := b.cache.sgByTags[key]
	b.cache.mu.Unlock()
	if ok {
		return cached, nil
	}
	var groups []string
	p := ec2.NewDescribeSecurityGroupsPaginator(b.api, &ec2.DescribeSecurityGroupsInput{Filters: filters, MaxResults: aws.Int32(1000)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("aws-eni: security groups by tags: %w", mapErr(err))
		}
		for _, g := range out.SecurityGroups {
			groups = append(groups, aws.ToString(g.GroupId))
		}
	}
	sort.Strings(groups)
	if len(groups) > 0 {
		b.cache.mu.Lock()
		b.cache.sgByTags[key] = groups
		b.cache.mu.Unlock()
	}
	return groups, nil
}

// Release implements cloud.CloudBackend with UnassignPrivateIpAddresses. Addresses the
// interface no longer holds are skipped (Release is idempotent); if EC2 disagrees with the
// cache, the interface is re-read and the call made once more with what it really holds.
func (b *Backend) Release(ctx context.Context, req cloud.ReleaseRequest) error {
	inst, _, _, err := b.node(ctx, req.Node)
	if err != nil {
		return err
	}
	if len(req.Prefixes) > 0 {
		if err := b.releasePrefixes(ctx, inst, req); err != nil || len(req.Addresses) == 0 {
			return err
		}
	}
	for attempt := 0; attempt < 2; attempt++ {
		e, ok := b.cache.eni(req.Interface)
		if !ok || e.instance != inst.id {
			return fmt.Errorf("aws-eni: release: interface %q is not attached to node %q", req.Interface, req.Node.Name)
		}
		held := map[netip.Addr]bool{}
		for _, a := range e.addrs {
			held[a] = true
		}
		var drop []netip.Addr
		for _, a := range req.Addresses {
			if held[a] {
				drop = append(drop, a)
				held[a] = false
			}
		}
		if len(drop) == 0 {
			return nil
		}
		sortAddrs(drop)
		strs := make([]string, len(drop))
		for i, a := range drop {
			strs[i] = a.String()
		}
		_, err := b.api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(e.id), PrivateIpAddresses: strs})
		if err == nil {
			gone := map[netip.Addr]bool{}
			for _, a := range drop {
				gone[a] = true
			}
			b.cache.update(e.id, func(c *eniEntry) {
				kept := c.addrs[:0]
				for _, a := range c.addrs {
					if !gone[a] {
						kept = append(kept, a)
					}
				}
				c.addrs = kept
			})
			b.cache.adjustSubnet(e.subnet, len(drop))
			return nil
		}
		if errorCode(err) != "InvalidParameterValue" || attempt == 1 {
			return fmt.Errorf("aws-eni: release on %s: %w", e.id, mapErr(err))
		}
		if rerr := b.cache.refreshENI(ctx, e.id); rerr != nil {
			return fmt.Errorf("aws-eni: release on %s: %w (re-reading it: %v)", e.id, mapErr(err), rerr)
		}
	}
	return nil
}
