package awseni

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// The cache is the backend's picture of EC2, as Cilium's instances manager keeps one: a full
// resync (DescribeInstances + DescribeNetworkInterfaces + DescribeSubnets, 1,000 per page)
// every ResyncInterval, and in between every write the backend makes is applied to it from
// EC2's own answer. So Inventory costs no API call for a known node, and a fleet of 1,000
// nodes costs three paged reads per interval instead of three reads per node per pass.
//
// A resync must not roll back writes made while it was reading: every write bumps a sequence
// number and stamps the ENI it touched, and a resync keeps the cached version of any ENI
// stamped after the resync started.

type instance struct {
	id, typ, az, vpc, subnet string
}

type eniEntry struct {
	id         string
	instance   string
	index      int
	subnet     string
	mac        string
	primaryIP  netip.Addr
	addrs      []netip.Addr   // secondary IPv4, sorted
	prefixes   []netip.Prefix // delegated IPv4 /28s and IPv6 /80s, sorted
	groups     []string       // sorted
	tags       map[string]string
	attachment string
	stamp      uint64 // sequence of the last local write
}

type cache struct {
	api       EC2API
	vpc       string
	interval  time.Duration
	now       func() time.Time
	resyncMu  sync.Mutex // one resync at a time; others wait for it
	mu        sync.Mutex
	instances map[string]*instance
	enis      map[string]*eniEntry
	subnets   map[string]cloud.Subnet
	syncedAt  time.Time
	seq       uint64
	sgByTags  map[string][]string // VPC|tags -> groups carrying the tags
}

func newCache(api EC2API, vpc string, interval time.Duration, now func() time.Time) *cache {
	return &cache{api: api, vpc: vpc, interval: interval, now: now,
		instances: map[string]*instance{}, enis: map[string]*eniEntry{}, subnets: map[string]cloud.Subnet{}, sgByTags: map[string][]string{}}
}

// fresh resyncs when the cache is older than the interval.
func (c *cache) fresh(ctx context.Context) error {
	c.mu.Lock()
	stale := c.now().Sub(c.syncedAt) >= c.interval
	c.mu.Unlock()
	if !stale {
		return nil
	}
	c.resyncMu.Lock()
	defer c.resyncMu.Unlock()
	c.mu.Lock()
	stale = c.now().Sub(c.syncedAt) >= c.interval
	c.mu.Unlock()
	if !stale {
		return nil // someone else resynced while we waited
	}
	return c.resync(ctx)
}

func (c *cache) vpcFilter() []types.Filter {
	if c.vpc == "" {
		return nil
	}
	return []types.Filter{{Name: aws.String("vpc-id"), Values: []string{c.vpc}}}
}

// resync reads everything and replaces the cache, keeping entries written since it began.
func (c *cache) resync(ctx context.Context) error {
	c.mu.Lock()
	start := c.seq
	c.mu.Unlock()
	began := c.now()

	insts := map[string]*instance{}
	ip := ec2.NewDescribeInstancesPaginator(c.api, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(1000),
		Filters: append(c.vpcFilter(), types.Filter{Name: aws.String("instance-state-name"), Values: []string{"running"}})})
	for ip.HasMorePages() {
		out, err := ip.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("resync: DescribeInstances: %w", mapErr(err))
		}
		for _, r := range out.Reservations {
			for _, in := range r.Instances {
				inst := instanceFrom(in)
				insts[inst.id] = inst
			}
		}
	}
	enis := map[string]*eniEntry{}
	np := ec2.NewDescribeNetworkInterfacesPaginator(c.api, &ec2.DescribeNetworkInterfacesInput{MaxResults: aws.Int32(1000), Filters: c.vpcFilter()})
	for np.HasMorePages() {
		out, err := np.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("resync: DescribeNetworkInterfaces: %w", mapErr(err))
		}
		for _, ni := range out.NetworkInterfaces {
			if e := eniFrom(ni); e.instance != "" {
				enis[e.id] = e
			}
		}
	}
	subnets, err := c.readSubnets(ctx)
	if err != nil {
		return err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for id, old := range c.enis {
		if old.stamp > start {
			enis[id] = old // written while we were reading: ours is newer
		}
	}
	for id, old := range c.instances {
		if _, ok := insts[id]; !ok && c.instanceWrittenSince(id, start) {
			insts[id] = old
		}
	}
	c.instances, c.enis, c.subnets = insts, enis, subnets
	c.syncedAt = began
	return nil
}

func (c *cache) instanceWrittenSince(id string, seq uint64) bool {
	for _, e := range c.enis {
		if e.instance == id && e.stamp > seq {
			return true
		}
	}
	return false
}

func (c *cache) readSubnets(ctx context.Context) (map[string]cloud.Subnet, error) {
	out := map[string]cloud.Subnet{}
	sp := ec2.NewDescribeSubnetsPaginator(c.api, &ec2.DescribeSubnetsInput{MaxResults: aws.Int32(1000), Filters: c.vpcFilter()})
	for sp.HasMorePages() {
		page, err := sp.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("resync: DescribeSubnets: %w", mapErr(err))
		}
		for _, s := range page.Subnets {
			sn := cloud.Subnet{ID: aws.ToString(s.SubnetId), VPC: aws.ToString(s.VpcId), Zone: aws.ToString(s.AvailabilityZone),
				Free: uint64(max(aws.ToInt32(s.AvailableIpAddressCount), 0)), Tags: tagsFrom(s.Tags)}
			if p, err := netip.ParsePrefix(aws.ToString(s.CidrBlock)); err == nil {
				sn.CIDR = p
			}
			out[sn.ID] = sn
		}
	}
	return out, nil
}

// loadInstance reads one instance the cache does not know (launched since the last resync).
func (c *cache) loadInstance(ctx context.Context, id string) error {
	out, err := c.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return fmt.Errorf("DescribeInstances %s: %w", id, mapErr(err))
	}
	var inst *instance
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if aws.ToString(in.InstanceId) == id {
				inst = instanceFrom(in)
			}
		}
	}
	if inst == nil {
		return fmt.Errorf("instance %s: %w", id, cloud.ErrNodeNotFound)
	}
	ni, err := c.api.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{id}}}})
	if err != nil {
		return fmt.Errorf("DescribeNetworkInterfaces of %s: %w", id, mapErr(err))
	}
	c.mu.Lock()
	needSubnets := false
	c.instances[id] = inst
	for _, n := range ni.NetworkInterfaces {
		e := eniFrom(n)
		c.seq++
		e.stamp = c.seq
		c.enis[e.id] = e
		if _, ok := c.subnets[e.subnet]; !ok {
			needSubnets = true
		}
	}
	c.mu.Unlock()
	if needSubnets {
		subnets, err := c.readSubnets(ctx)
		if err != nil {
			return err
		}
		c.mu.Lock()
		for k, v := range subnets {
			c.subnets[k] = v
		}
		c.mu.Unlock()
	}
	return nil
}

// refreshENI re-reads one ENI (after EC2 disagreed with the cache).
func (c *cache) refreshENI(ctx context.Context, id string) error {
	out, err := c.api.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{id}})
	if err != nil {
		if errorCode(err) == "InvalidNetworkInterfaceID.NotFound" {
			c.mu.Lock()
			delete(c.enis, id)
			c.mu.Unlock()
		}
		return fmt.Errorf("DescribeNetworkInterfaces %s: %w", id, mapErr(err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range out.NetworkInterfaces {
		e := eniFrom(n)
		c.seq++
		e.stamp = c.seq
		c.enis[e.id] = e
	}
	return nil
}

// update applies fn to a cached ENI under the lock and stamps it.
func (c *cache) update(id string, fn func(e *eniEntry)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.enis[id]
	if !ok {
		return
	}
	fn(e)
	c.seq++
	e.stamp = c.seq
}

func (c *cache) put(e *eniEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	e.stamp = c.seq
	c.enis[e.id] = e
}

func (c *cache) adjustSubnet(id string, delta int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.subnets[id]
	if !ok {
		return
	}
	if delta < 0 && uint64(-delta) > s.Free {
		s.Free = 0
	} else {
		s.Free = uint64(int64(s.Free) + int64(delta))
	}
	c.subnets[id] = s
}

func (c *cache) setSubnetFree(id string, free uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.subnets[id]; ok {
		s.Free = free
		c.subnets[id] = s
	}
}

// snapshot returns the instance, its ENIs sorted by index, and its VPC's subnets sorted by ID.
func (c *cache) snapshot(id string) (*instance, []eniEntry, []cloud.Subnet, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, ok := c.instances[id]
	if !ok {
		return nil, nil, nil, false
	}
	var enis []eniEntry
	for _, e := range c.enis {
		if e.instance == id {
			cp := *e
			cp.addrs = append([]netip.Addr(nil), e.addrs...)
			enis = append(enis, cp)
		}
	}
	sort.Slice(enis, func(i, j int) bool { return enis[i].index < enis[j].index })
	var subnets []cloud.Subnet
	for _, s := range c.subnets {
		if s.VPC == inst.vpc {
			subnets = append(subnets, s)
		}
	}
	sort.Slice(subnets, func(i, j int) bool { return subnets[i].ID < subnets[j].ID })
	i := *inst
	return &i, enis, subnets, true
}

func (c *cache) eni(id string) (eniEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.enis[id]
	if !ok {
		return eniEntry{}, false
	}
	cp := *e
	cp.addrs = append([]netip.Addr(nil), e.addrs...)
	return cp, true
}

func (c *cache) subnet(id string) (cloud.Subnet, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.subnets[id]
	return s, ok
}

func instanceFrom(in types.Instance) *instance {
	inst := &instance{id: aws.ToString(in.InstanceId), typ: string(in.InstanceType), vpc: aws.ToString(in.VpcId), subnet: aws.ToString(in.SubnetId)}
	if in.Placement != nil {
		inst.az = aws.ToString(in.Placement.AvailabilityZone)
	}
	return inst
}

func eniFrom(ni types.NetworkInterface) *eniEntry {
	e := &eniEntry{id: aws.ToString(ni.NetworkInterfaceId), subnet: aws.ToString(ni.SubnetId), mac: aws.ToString(ni.MacAddress), tags: tagsFrom(ni.TagSet)}
	if a := ni.Attachment; a != nil {
		e.instance = aws.ToString(a.InstanceId)
		e.index = int(aws.ToInt32(a.DeviceIndex))
		e.attachment = aws.ToString(a.AttachmentId)
	}
	for _, p := range ni.PrivateIpAddresses {
		a, err := netip.ParseAddr(aws.ToString(p.PrivateIpAddress))
		if err != nil {
			continue
		}
		if aws.ToBool(p.Primary) {
			e.primaryIP = a
		} else {
			e.addrs = append(e.addrs, a)
		}
	}
	sortAddrs(e.addrs)
	for _, p := range ni.Ipv4Prefixes {
		if pfx, err := netip.ParsePrefix(aws.ToString(p.Ipv4Prefix)); err == nil {
			e.prefixes = append(e.prefixes, pfx)
		}
	}
	for _, p := range ni.Ipv6Prefixes {
		if pfx, err := netip.ParsePrefix(aws.ToString(p.Ipv6Prefix)); err == nil {
			e.prefixes = append(e.prefixes, pfx)
		}
	}
	sortPrefixes(e.prefixes)
	for _, g := range ni.Groups {
		e.groups = append(e.groups, aws.ToString(g.GroupId))
	}
	sort.Strings(e.groups)
	return e
}

func tagsFrom(ts []types.Tag) map[string]string {
	if len(ts) == 0 {
		return nil
	}
	out := make(map[string]string, len(ts))
	for _, t := range ts {
		out[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return out
}

func sortAddrs(a []netip.Addr) {
	sort.Slice(a, func(i, j int) bool { return a[i].Less(a[j]) })
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
