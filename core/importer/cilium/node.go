package cilium

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/allot-ipam/allot/core/importer/mapping"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

type allocationIP struct {
	Owner    string `json:"owner"`
	Resource string `json:"resource"`
}

type ipamSpec struct {
	Pool  map[string]allocationIP `json:"pool"`
	Pools struct {
		Requested []struct {
			Pool   string `json:"pool"`
			Needed struct {
				IPv4 int64 `json:"ipv4-addrs"`
				IPv6 int64 `json:"ipv6-addrs"`
			} `json:"needed"`
		} `json:"requested"`
		Allocated []struct {
			Pool  string   `json:"pool"`
			CIDRs []string `json:"cidrs"`
		} `json:"allocated"`
	} `json:"pools"`
	PodCIDRs          []string `json:"podCIDRs"`
	MinAllocate       int      `json:"min-allocate"`
	MaxAllocate       int      `json:"max-allocate"`
	PreAllocate       int      `json:"pre-allocate"`
	MaxAboveWatermark int      `json:"max-above-watermark"`
}

type eniSpec struct {
	InstanceType        string            `json:"instance-type"`
	AvailabilityZone    string            `json:"availability-zone"`
	FirstInterfaceIndex *int              `json:"first-interface-index"`
	SecurityGroups      []string          `json:"security-groups"`
	SecurityGroupTags   map[string]string `json:"security-group-tags"`
	SubnetIDs           []string          `json:"subnet-ids"`
	SubnetTags          map[string]string `json:"subnet-tags"`
}

type ciliumNode struct {
	Spec struct {
		InstanceID string   `json:"instance-id"`
		ENI        *eniSpec `json:"eni"`
		IPAM       ipamSpec `json:"ipam"`
	} `json:"spec"`
	Status struct {
		IPAM struct {
			Used       map[string]allocationIP `json:"used"`
			ReleaseIPs map[string]string       `json:"release-ips"`
		} `json:"ipam"`
	} `json:"status"`
}

// nodeFields are the CiliumNode spec fields read. addresses, health, ingress, encryption,
// nodeidentity and bootid describe the node to Cilium's datapath, not its IPAM: allot has
// no use for them, and they are not reported.
var nodeFields = mapping.Fields{
	"instance-id": nil,
	"eni": {"instance-type": nil, "availability-zone": nil, "first-interface-index": nil,
		"security-groups": nil, "security-group-tags": nil, "subnet-ids": nil, "subnet-tags": nil},
	"ipam": {"pool": nil, "podCIDRs": nil, "min-allocate": nil, "max-allocate": nil, "pre-allocate": nil,
		"max-above-watermark": nil,
		"pools": {"requested": {"pool": nil, "needed": {"ipv4-addrs": nil, "ipv6-addrs": nil}},
			"allocated": {"pool": nil, "cidrs": nil}}},
	"addresses": nil, "health": nil, "ingress": nil, "encryption": nil, "nodeidentity": nil, "bootid": nil,
}

func importNode(res *mapping.Result, u *unstructured.Unstructured, pools map[string]*pool) error {
	o := res.On(u)
	var in ciliumNode
	if err := o.Decode(u, &in); err != nil {
		return err
	}
	o.Unmapped(u, "spec", nodeFields)
	out := &allotv1.AllotNode{TypeMeta: typeMeta("AllotNode"), ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
	if err := nodeBlocks(o, &in.Spec.IPAM, pools, &out.Spec.IPAM.Pools); err != nil {
		return err
	}
	for i, r := range in.Spec.IPAM.Pools.Requested {
		f := fmt.Sprintf("spec.ipam.pools.requested[%d]", i)
		if r.Pool == "" {
			return o.Errorf(f+".pool", "must not be empty")
		}
		if r.Needed.IPv4 < 0 || r.Needed.IPv6 < 0 {
			return o.Errorf(f+".needed", "must not be negative")
		}
		out.Spec.IPAM.Pools.Requested = append(out.Spec.IPAM.Pools.Requested, allotv1.PoolRequest{
			Pool: r.Pool, Needed: allotv1.AddressCounts{IPv4: r.Needed.IPv4, IPv6: r.Needed.IPv6}})
	}
	eni := len(in.Spec.IPAM.Pool) > 0 || in.Spec.ENI != nil || in.Spec.InstanceID != ""
	if eni {
		if err := nodeENI(o, &in, out); err != nil {
			return err
		}
	} else {
		nodeNotENI(o, &in)
	}
	res.Objects = append(res.Objects, out)
	return nil
}

// nodeBlocks maps the multi-pool blocks (spec.ipam.pools.allocated) and cluster-pool
// podCIDRs to the AllotNode's blocks: the node keeps serving its pods out of them.
func nodeBlocks(o mapping.Object, in *ipamSpec, pools map[string]*pool, out *allotv1.NodePools) error {
	seen := map[netip.Prefix]string{}
	for i, a := range in.Pools.Allocated {
		f := fmt.Sprintf("spec.ipam.pools.allocated[%d]", i)
		if a.Pool == "" {
			return o.Errorf(f+".pool", "must not be empty")
		}
		p := pools[a.Pool]
		if p == nil {
			o.Warn(f+".pool", "pool %q is not among the imported CiliumPodIPPools; the AllotNode keeps its blocks, but the operator hands out no more until an IPPool %q exists", a.Pool, a.Pool)
		}
		for j, c := range a.CIDRs {
			cf := fmt.Sprintf("%s.cidrs[%d]", f, j)
			b, err := o.Prefix(cf, c)
			if err != nil {
				return err
			}
			if prev, ok := seen[b]; ok {
				return o.Errorf(cf, "%s is also listed under %s", b, prev)
			}
			seen[b] = cf
			checkBlock(o, cf, b, a.Pool, p)
			addBlock(out, a.Pool, b)
		}
	}
	for i, c := range in.PodCIDRs {
		f := fmt.Sprintf("spec.ipam.podCIDRs[%d]", i)
		b, err := o.Prefix(f, c)
		if err != nil {
			return err
		}
		name := poolHolding(pools, b)
		if name == "" {
			o.Warn(f, "%s (cluster-pool IPAM) lies in no imported CiliumPodIPPool; create an IPPool holding Cilium's cluster-pool CIDRs (clusterPoolIPv4PodCIDRList, mask clusterPoolIPv4MaskSize) and import again, or this node's pods lose their block", b)
			continue
		}
		if _, ok := seen[b]; !ok {
			seen[b] = f
			addBlock(out, name, b)
		}
	}
	return nil
}

func checkBlock(o mapping.Object, field string, b netip.Prefix, name string, p *pool) {
	if p == nil {
		return
	}
	fi := 1
	if b.Addr().Is4() {
		fi = 0
	}
	if !slices.ContainsFunc(p.cidrs[fi], func(c netip.Prefix) bool { return c.Bits() <= b.Bits() && c.Contains(b.Addr()) }) {
		o.Warn(field, "%s lies in none of pool %q's CIDRs; the operator reports it, and it must be added to the IPPool before the CIDR can be reused", b, name)
	} else if p.mask[fi] != b.Bits() {
		o.Warn(field, "%s is not of pool %q's mask size /%d; kept as it is", b, name, p.mask[fi])
	}
}

func poolHolding(pools map[string]*pool, b netip.Prefix) string {
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		for _, fam := range pools[name].cidrs {
			for _, c := range fam {
				if c.Bits() <= b.Bits() && c.Contains(b.Addr()) {
					return name
				}
			}
		}
	}
	return ""
}

func addBlock(out *allotv1.NodePools, name string, b netip.Prefix) {
	i := slices.IndexFunc(out.Allocated, func(a allotv1.PoolAllocation) bool { return a.Pool == name })
	if i < 0 {
		out.Allocated = append(out.Allocated, allotv1.PoolAllocation{Pool: name})
		i = len(out.Allocated) - 1
	}
	out.Allocated[i].CIDRs = append(out.Allocated[i].CIDRs, b.String())
}

// nodeENI maps the ENI mode's node: its addresses and their interfaces (spec.ipam.pool),
// which of them pods use (status.ipam.used), its identity and per-node ENI settings.
func nodeENI(o mapping.Object, in *ciliumNode, out *allotv1.AllotNode) error {
	if len(in.Spec.IPAM.Pool) > 0 {
		out.Spec.IPAM.Pool = map[string]allotv1.PoolAddress{}
	}
	for _, ip := range slices.Sorted(maps.Keys(in.Spec.IPAM.Pool)) {
		a, err := o.Addr("spec.ipam.pool["+ip+"]", ip)
		if err != nil {
			return err
		}
		out.Spec.IPAM.Pool[a.String()] = allotv1.PoolAddress{Resource: in.Spec.IPAM.Pool[ip].Resource}
	}
	for _, ip := range slices.Sorted(maps.Keys(in.Status.IPAM.Used)) {
		a, err := o.Addr("status.ipam.used["+ip+"]", ip)
		if err != nil {
			return err
		}
		if _, ok := out.Spec.IPAM.Pool[a.String()]; !ok {
			o.Warn("status.ipam.used["+ip+"]", "in use but not in spec.ipam.pool; not imported")
			continue
		}
		if out.Status.IPAM.Used == nil {
			out.Status.IPAM.Used = map[string]allotv1.UsedAddress{}
		}
		out.Status.IPAM.Used[a.String()] = allotv1.UsedAddress{Owner: in.Status.IPAM.Used[ip].Owner}
	}
	if len(in.Status.IPAM.ReleaseIPs) > 0 {
		o.Warn("status.ipam.release-ips", "%d addresses are in Cilium's release handshake; let cilium-operator finish it before importing (allot starts its own handshake from nothing)", len(in.Status.IPAM.ReleaseIPs))
	}
	spec, err := eniSpecOf(o, in)
	if err != nil {
		return err
	}
	out.Spec.ENI = spec
	return nil
}

// eniSpecOf maps the node's identity, per-node ENI settings and watermarks.
func eniSpecOf(o mapping.Object, in *ciliumNode) (*allotv1.NodeENISpec, error) {
	spec := &allotv1.NodeENISpec{InstanceID: in.Spec.InstanceID}
	if e := in.Spec.ENI; e != nil {
		spec.InstanceType, spec.Zone = e.InstanceType, e.AvailabilityZone
		spec.SecurityGroups, spec.SecurityGroupTags = e.SecurityGroups, e.SecurityGroupTags
		spec.SubnetIDs, spec.SubnetTags = e.SubnetIDs, e.SubnetTags
		if e.FirstInterfaceIndex != nil {
			if *e.FirstInterfaceIndex < 0 || *e.FirstInterfaceIndex > 64 {
				return nil, o.Errorf("spec.eni.first-interface-index", "%d is not between 0 and 64", *e.FirstInterfaceIndex)
			}
			v := int32(*e.FirstInterfaceIndex)
			spec.FirstInterfaceIndex = &v
		}
	}
	for _, w := range []struct {
		field string
		v     int
		out   **int32
	}{{"min-allocate", in.Spec.IPAM.MinAllocate, &spec.MinAllocate}, {"max-allocate", in.Spec.IPAM.MaxAllocate, &spec.MaxAllocate},
		{"pre-allocate", in.Spec.IPAM.PreAllocate, &spec.PreAllocate}, {"max-above-watermark", in.Spec.IPAM.MaxAboveWatermark, &spec.MaxAboveWatermark}} {
		if w.v == 0 {
			continue
		}
		if w.v < 0 || w.v > maxWatermark {
			return nil, o.Errorf("spec.ipam."+w.field, "%d is not between 0 and %d", w.v, maxWatermark)
		}
		v := int32(w.v)
		*w.out = &v
	}
	return spec, nil
}

// nodeNotENI reports what only the ENI mode maps.
func nodeNotENI(o mapping.Object, in *ciliumNode) {
	for _, w := range []struct {
		field string
		v     int
	}{{"min-allocate", in.Spec.IPAM.MinAllocate}, {"max-allocate", in.Spec.IPAM.MaxAllocate},
		{"pre-allocate", in.Spec.IPAM.PreAllocate}, {"max-above-watermark", in.Spec.IPAM.MaxAboveWatermark}} {
		if w.v != 0 {
			o.Warn("spec.ipam."+w.field, "outside ENI mode allot's agent sets pre-allocation per pool in its configuration (cluster.preAllocation); not imported")
		}
	}
	if len(in.Status.IPAM.Used) > 0 {
		o.Warn("status.ipam.used", "outside ENI mode the agent reports usage itself; not imported")
	}
}
