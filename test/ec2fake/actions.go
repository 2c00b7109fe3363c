package ec2fake

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
)

type handler func(s *Server, f url.Values) ([]field, error)

// handlers is the explicit table of supported actions. Handlers run with s.mu held.
var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"DescribeInstances":               (*Server).describeInstances,
		"DescribeNetworkInterfaces":       (*Server).describeNetworkInterfaces,
		"DescribeSubnets":                 (*Server).describeSubnets,
		"DescribeSecurityGroups":          (*Server).describeSecurityGroups,
		"DescribeVpcs":                    (*Server).describeVpcs,
		"DescribeInstanceTypes":           (*Server).describeInstanceTypes,
		"CreateNetworkInterface":          (*Server).createNetworkInterface,
		"AttachNetworkInterface":          (*Server).attachNetworkInterface,
		"DeleteNetworkInterface":          (*Server).deleteNetworkInterface,
		"ModifyNetworkInterfaceAttribute": (*Server).modifyNetworkInterfaceAttribute,
		"AssignPrivateIpAddresses":        (*Server).assignPrivateIPAddresses,
		"UnassignPrivateIpAddresses":      (*Server).unassignPrivateIPAddresses,
		"CreateTags":                      (*Server).createTags,
		"AssignIpv6Addresses":             (*Server).assignIPv6Addresses,
		"UnassignIpv6Addresses":           (*Server).unassignIPv6Addresses,
	}
}

// Actions returns the names of the actions the fake implements, sorted.
func Actions() []string { return sortedKeys(handlers) }

// filters ---------------------------------------------------------------------------------

type filter struct {
	name   string
	values []string
}

func parseFilters(f url.Values) []filter {
	var out []filter
	for i := 1; ; i++ {
		p := "Filter." + strconv.Itoa(i)
		name, ok := f[p+".Name"]
		if !ok {
			return out
		}
		out = append(out, filter{name: name[0], values: list(f, p+".Value")})
	}
}

// fielder returns an object's values for a filter name, and whether the name is supported.
type fielder func(name string) ([]string, bool)

func tagFields(tags map[string]string, name string) ([]string, bool) {
	if name == "tag-key" {
		return sortedKeys(tags), true
	}
	if k, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, ok := tags[k]; ok {
			return []string{v}, true
		}
		return nil, true
	}
	return nil, false
}

// match applies AWS filter semantics: values of one filter are ORed, filters are ANDed;
// '*' and '?' are wildcards.
func match(filters []filter, get fielder) (bool, error) {
	for _, fl := range filters {
		have, ok := get(fl.name)
		if !ok {
			return false, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("The filter '%s' is invalid", fl.name)}
		}
		hit := false
		for _, want := range fl.values {
			for _, h := range have {
				if m, _ := path.Match(want, h); m || want == h {
					hit = true
				}
			}
		}
		if !hit {
			return false, nil
		}
	}
	return true, nil
}

// page cuts ids (sorted) by MaxResults/NextToken and returns the page and the next token.
func page(f url.Values, action string, ids []string, max int) ([]string, string, error) {
	limit, err := intParam(f, "MaxResults", 0)
	if err != nil {
		return nil, "", err
	}
	if f.Get("MaxResults") != "" && (limit < 5 || limit > max) {
		return nil, "", apiError{status: 400, code: "InvalidParameterValue",
			msg: fmt.Sprintf("Value ( %d ) for parameter maxResults is invalid. Expecting a value between 5 and %d.", limit, max)}
	}
	start := 0
	if tok := f.Get("NextToken"); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		rest, ok := strings.CutPrefix(string(raw), action+":")
		n, err2 := strconv.Atoi(rest)
		if err != nil || !ok || err2 != nil || n < 0 || n > len(ids) {
			return nil, "", apiError{status: 400, code: "InvalidPaginationToken", msg: "The pagination token is not valid."}
		}
		start = n
	}
	if limit == 0 || start+limit >= len(ids) {
		return ids[start:], "", nil
	}
	next := base64.RawURLEncoding.EncodeToString([]byte(action + ":" + strconv.Itoa(start+limit)))
	return ids[start : start+limit], next, nil
}

func withToken(fields []field, next string) []field {
	if next != "" {
		fields = append(fields, field{"nextToken", next})
	}
	return fields
}

func notFound(code, what, id string) error {
	return apiError{status: 400, code: code, msg: fmt.Sprintf("The %s ID '%s' does not exist", what, id)}
}

// Describe* ---------------------------------------------------------------------------------

func (s *Server) describeInstances(f url.Values) ([]field, error) {
	filters := parseFilters(f)
	wanted := list(f, "InstanceId")
	for _, id := range wanted {
		if _, ok := s.instances[id]; !ok {
			return nil, notFound("InvalidInstanceID.NotFound", "instance", id)
		}
	}
	var ids []string
	for _, id := range sortedKeys(s.instances) {
		if len(wanted) > 0 && !contains(wanted, id) {
			continue
		}
		inst := s.instances[id]
		ok, err := match(filters, func(name string) ([]string, bool) {
			switch name {
			case "instance-id":
				return []string{inst.ID}, true
			case "instance-type":
				return []string{inst.Type}, true
			case "vpc-id":
				return []string{inst.VPC}, true
			case "subnet-id":
				return []string{inst.Subnet}, true
			case "availability-zone":
				return []string{inst.AZ}, true
			case "instance-state-name":
				return []string{"running"}, true
			}
			return tagFields(inst.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, id)
		}
	}
	pg, next, err := page(f, "DescribeInstances", ids, 1000)
	if err != nil {
		return nil, err
	}
	var res items[xmlReservation]
	for _, id := range pg {
		inst := s.instances[id]
		xi := xmlInstance{
			InstanceID: inst.ID, InstanceType: inst.Type, Placement: xmlPlacement{inst.AZ},
			InstanceState: xmlState{16, "running"}, SubnetID: inst.Subnet, VpcID: inst.VPC,
			PrivateIPAddress: s.enis[inst.PrimaryENI].PrimaryIP.String(),
			Groups:           s.groupsXML(inst.SecurityGroups), TagSet: tagsXML(inst.Tags),
		}
		for _, e := range s.attached(inst.ID) {
			xi.NetworkInterfaces.Item = append(xi.NetworkInterfaces.Item, s.eniXML(e))
		}
		res.Item = append(res.Item, xmlReservation{ReservationID: "r-" + strings.TrimPrefix(inst.ID, "i-"), OwnerID: ownerID,
			Instances: items[xmlInstance]{Item: []xmlInstance{xi}}})
	}
	return withToken([]field{{"reservationSet", res}}, next), nil
}

// attached returns the ENIs attached to an instance sorted by device index.
func (s *Server) attached(instance string) []*ENI {
	var out []*ENI
	for _, k := range sortedKeys(s.enis) {
		if e := s.enis[k]; e.Attachment != nil && e.Attachment.InstanceID == instance {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Attachment.DeviceIndex < out[j].Attachment.DeviceIndex })
	return out
}

func (s *Server) describeNetworkInterfaces(f url.Values) ([]field, error) {
	filters := parseFilters(f)
	wanted := list(f, "NetworkInterfaceId")
	for _, id := range wanted {
		if _, ok := s.enis[id]; !ok {
			return nil, notFound("InvalidNetworkInterfaceID.NotFound", "networkInterface", id)
		}
	}
	var ids []string
	for _, id := range sortedKeys(s.enis) {
		if len(wanted) > 0 && !contains(wanted, id) {
			continue
		}
		e := s.enis[id]
		ok, err := match(filters, func(name string) ([]string, bool) {
			switch name {
			case "network-interface-id":
				return []string{e.ID}, true
			case "subnet-id":
				return []string{e.Subnet}, true
			case "vpc-id":
				return []string{e.VPC}, true
			case "availability-zone":
				return []string{e.AZ}, true
			case "description":
				return []string{e.Description}, true
			case "status":
				if e.Attachment != nil {
					return []string{"in-use"}, true
				}
				return []string{"available"}, true
			case "attachment.instance-id":
				if e.Attachment != nil {
					return []string{e.Attachment.InstanceID}, true
				}
				return nil, true
			case "attachment.device-index":
				if e.Attachment != nil {
					return []string{strconv.Itoa(e.Attachment.DeviceIndex)}, true
				}
				return nil, true
			case "group-id":
				return e.SecurityGroups, true
			}
			return tagFields(e.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, id)
		}
	}
	pg, next, err := page(f, "DescribeNetworkInterfaces", ids, 1000)
	if err != nil {
		return nil, err
	}
	var out items[xmlENI]
	for _, id := range pg {
		out.Item = append(out.Item, s.eniXML(s.enis[id]))
	}
	return withToken([]field{{"networkInterfaceSet", out}}, next), nil
}

func (s *Server) describeSubnets(f url.Values) ([]field, error) {
	filters := parseFilters(f)
	wanted := list(f, "SubnetId")
	for _, id := range wanted {
		if _, ok := s.subnets[id]; !ok {
			return nil, notFound("InvalidSubnetID.NotFound", "subnet", id)
		}
	}
	var ids []string
	for _, id := range sortedKeys(s.subnets) {
		if len(wanted) > 0 && !contains(wanted, id) {
			continue
		}
		sn := s.subnets[id]
		ok, err := match(filters, func(name string) ([]string, bool) {
			switch name {
			case "subnet-id":
				return []string{sn.ID}, true
			case "vpc-id":
				return []string{sn.VPC}, true
			case "availability-zone":
				return []string{sn.AZ}, true
			case "cidr-block":
				return []string{sn.CIDR.String()}, true
			}
			return tagFields(sn.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, id)
		}
	}
	pg, next, err := page(f, "DescribeSubnets", ids, 1000)
	if err != nil {
		return nil, err
	}
	var out items[xmlSubnet]
	for _, id := range pg {
		sn := s.subnets[id]
		out.Item = append(out.Item, xmlSubnet{SubnetID: sn.ID, VpcID: sn.VPC, State: "available", CidrBlock: sn.CIDR.String(),
			AvailableIPAddressCount: sn.free(), AvailabilityZone: sn.AZ, TagSet: tagsXML(sn.Tags)})
	}
	return withToken([]field{{"subnetSet", out}}, next), nil
}

func (s *Server) describeSecurityGroups(f url.Values) ([]field, error) {
	filters := parseFilters(f)
	wanted := list(f, "GroupId")
	for _, id := range wanted {
		if _, ok := s.sgs[id]; !ok {
			return nil, apiError{status: 400, code: "InvalidGroup.NotFound", msg: fmt.Sprintf("The security group '%s' does not exist", id)}
		}
	}
	var ids []string
	for _, id := range sortedKeys(s.sgs) {
		if len(wanted) > 0 && !contains(wanted, id) {
			continue
		}
		g := s.sgs[id]
		ok, err := match(filters, func(name string) ([]string, bool) {
			switch name {
			case "group-id":
				return []string{g.ID}, true
			case "group-name":
				return []string{g.Name}, true
			case "vpc-id":
				return []string{g.VPC}, true
			}
			return tagFields(g.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, id)
		}
	}
	pg, next, err := page(f, "DescribeSecurityGroups", ids, 1000)
	if err != nil {
		return nil, err
	}
	var out items[xmlSecurityGroup]
	for _, id := range pg {
		g := s.sgs[id]
		out.Item = append(out.Item, xmlSecurityGroup{GroupID: g.ID, GroupName: g.Name, VpcID: g.VPC, OwnerID: ownerID, TagSet: tagsXML(g.Tags)})
	}
	return withToken([]field{{"securityGroupInfo", out}}, next), nil
}

func (s *Server) describeVpcs(f url.Values) ([]field, error) {
	filters := parseFilters(f)
	wanted := list(f, "VpcId")
	var ids []string
	for _, id := range sortedKeys(s.vpcs) {
		if len(wanted) > 0 && !contains(wanted, id) {
			continue
		}
		v := s.vpcs[id]
		ok, err := match(filters, func(name string) ([]string, bool) {
			if name == "vpc-id" {
				return []string{v.ID}, true
			}
			return tagFields(v.Tags, name)
		})
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, id)
		}
	}
	pg, next, err := page(f, "DescribeVpcs", ids, 1000)
	if err != nil {
		return nil, err
	}
	var out items[xmlVpc]
	for _, id := range pg {
		v := s.vpcs[id]
		out.Item = append(out.Item, xmlVpc{VpcID: v.ID, CidrBlock: v.CIDR.String(), State: "available", TagSet: tagsXML(v.Tags)})
	}
	return withToken([]field{{"vpcSet", out}}, next), nil
}

func (s *Server) describeInstanceTypes(f url.Values) ([]field, error) {
	filters := parseFilters(f)
	wanted := list(f, "InstanceType")
	for _, t := range wanted {
		if _, ok := s.types[t]; !ok {
			return nil, apiError{status: 400, code: "InvalidInstanceType", msg: fmt.Sprintf("The following supplied instance types do not exist: [%s]", t)}
		}
	}
	var ids []string
	for _, t := range sortedKeys(s.types) {
		if len(wanted) > 0 && !contains(wanted, t) {
			continue
		}
		ok, err := match(filters, func(name string) ([]string, bool) {
			if name == "instance-type" {
				return []string{t}, true
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, t)
		}
	}
	pg, next, err := page(f, "DescribeInstanceTypes", ids, 100)
	if err != nil {
		return nil, err
	}
	var out items[xmlInstanceType]
	for _, t := range pg {
		l := s.types[t]
		ni := xmlNetworkInfo{MaximumNetworkInterfaces: l.ENIs, MaximumNetworkCards: 1, IPv4AddressesPerInterface: l.IPv4PerENI,
			IPv6AddressesPerInterface: l.IPv6PerENI, IPv6Supported: l.IPv6PerENI > 0}
		ni.NetworkCards.Item = []xmlNetworkCard{{NetworkCardIndex: 0, MaximumNetworkInterfaces: l.ENIs}}
		hv := l.Hypervisor
		if hv == "" {
			hv = Nitro
		}
		out.Item = append(out.Item, xmlInstanceType{InstanceType: t, Hypervisor: hv, NetworkInfo: ni})
	}
	return withToken([]field{{"instanceTypeSet", out}}, next), nil
}

// mutating actions ------------------------------------------------------------------------

func (s *Server) createNetworkInterface(f url.Values) ([]field, error) {
	subnetID := f.Get("SubnetId")
	if subnetID == "" {
		return nil, missing("SubnetId")
	}
	sn, ok := s.subnets[subnetID]
	if !ok {
		return nil, notFound("InvalidSubnetID.NotFound", "subnet", subnetID)
	}
	if tok := f.Get("ClientToken"); tok != "" {
		// Idempotency: the same token answers the ENI the first call created.
		for _, k := range sortedKeys(s.enis) {
			if e := s.enis[k]; e.clientToken == tok {
				return []field{{"networkInterface", s.eniXML(e)}}, nil
			}
		}
	}
	sgs := list(f, "SecurityGroupId")
	for _, g := range sgs {
		sg, ok := s.sgs[g]
		if !ok {
			return nil, apiError{status: 400, code: "InvalidGroup.NotFound", msg: fmt.Sprintf("The security group '%s' does not exist", g)}
		}
		if sg.VPC != sn.VPC {
			return nil, apiError{status: 400, code: "InvalidParameter", msg: fmt.Sprintf("Security group %s and subnet %s belong to different networks.", g, sn.ID)}
		}
	}
	count, err := intParam(f, "SecondaryPrivateIpAddressCount", 0)
	if err != nil {
		return nil, err
	}
	if count < 0 || count > 49 {
		return nil, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Value (%d) for parameter secondaryPrivateIpAddressCount is invalid.", count)}
	}
	var tags map[string]string
	for i := 1; ; i++ {
		p := "TagSpecification." + strconv.Itoa(i)
		rt, ok := f[p+".ResourceType"]
		if !ok {
			break
		}
		if rt[0] != "network-interface" {
			return nil, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("'%s' is not a valid taggable resource type for this operation.", rt[0])}
		}
		for k, v := range tagList(f, p+".Tag") {
			if tags == nil {
				tags = map[string]string{}
			}
			tags[k] = v
		}
	}
	e, err := s.createENI(sn, sgs, f.Get("Description"), tags, count, nil)
	if err != nil {
		return nil, err
	}
	e.clientToken = f.Get("ClientToken")
	return []field{{"networkInterface", s.eniXML(e)}}, nil
}

func (s *Server) eniParam(f url.Values) (*ENI, error) {
	id := f.Get("NetworkInterfaceId")
	if id == "" {
		return nil, missing("NetworkInterfaceId")
	}
	e, ok := s.enis[id]
	if !ok {
		return nil, notFound("InvalidNetworkInterfaceID.NotFound", "networkInterface", id)
	}
	return e, nil
}

func (s *Server) attachNetworkInterface(f url.Values) ([]field, error) {
	e, err := s.eniParam(f)
	if err != nil {
		return nil, err
	}
	instID := f.Get("InstanceId")
	if instID == "" {
		return nil, missing("InstanceId")
	}
	inst, ok := s.instances[instID]
	if !ok {
		return nil, notFound("InvalidInstanceID.NotFound", "instance", instID)
	}
	if f.Get("DeviceIndex") == "" {
		return nil, missing("DeviceIndex")
	}
	idx, err := intParam(f, "DeviceIndex", 0)
	if err != nil {
		return nil, err
	}
	if e.Attachment != nil {
		return nil, apiError{status: 400, code: "InvalidNetworkInterface.InUse", msg: fmt.Sprintf("Interface: %s in use.", e.ID)}
	}
	if e.AZ != inst.AZ {
		return nil, apiError{status: 400, code: "InvalidParameterCombination",
			msg: "You may not attach a network interface to an instance if they are not in the same availability zone"}
	}
	lim := s.types[inst.Type]
	att := s.attached(inst.ID)
	for _, o := range att {
		if o.Attachment.DeviceIndex == idx {
			return nil, apiError{status: 400, code: "InvalidParameterValue",
				msg: fmt.Sprintf("Instance '%s' already has an interface attached at device index '%d'.", inst.ID, idx)}
		}
	}
	if len(att) >= lim.ENIs {
		return nil, apiError{status: 400, code: "AttachmentLimitExceeded",
			msg: fmt.Sprintf("Interface count %d exceeds the limit for %s", len(att)+1, inst.Type)}
	}
	if 1+len(e.Secondary) > lim.IPv4PerENI {
		return nil, apiError{status: 400, code: "PrivateIpAddressLimitExceeded",
			msg: fmt.Sprintf("Number of private addresses on %s exceeds the limit of %d for %s", e.ID, lim.IPv4PerENI, inst.Type)}
	}
	e.Attachment = &Attachment{ID: s.newID("eni-attach"), InstanceID: inst.ID, DeviceIndex: idx}
	return []field{{"attachmentId", e.Attachment.ID}, {"networkCardIndex", 0}}, nil
}

func (s *Server) deleteNetworkInterface(f url.Values) ([]field, error) {
	e, err := s.eniParam(f)
	if err != nil {
		return nil, err
	}
	if e.Attachment != nil {
		return nil, apiError{status: 400, code: "InvalidNetworkInterface.InUse", msg: fmt.Sprintf("Interface: %s in use.", e.ID)}
	}
	s.releaseAll(e)
	delete(s.enis, e.ID)
	return []field{{"return", true}}, nil
}

func (s *Server) modifyNetworkInterfaceAttribute(f url.Values) ([]field, error) {
	e, err := s.eniParam(f)
	if err != nil {
		return nil, err
	}
	if attID := f.Get("Attachment.AttachmentId"); attID != "" {
		if e.Attachment == nil || e.Attachment.ID != attID {
			return nil, apiError{status: 400, code: "InvalidAttachmentID.NotFound", msg: fmt.Sprintf("The attachment ID '%s' does not exist", attID)}
		}
		if v := f.Get("Attachment.DeleteOnTermination"); v != "" {
			e.Attachment.DeleteOnTermination = v == "true"
		}
		return []field{{"return", true}}, nil
	}
	if d := f.Get("Description.Value"); d != "" {
		e.Description = d
		return []field{{"return", true}}, nil
	}
	if sgs := list(f, "SecurityGroupId"); len(sgs) > 0 {
		e.SecurityGroups = sgs
		sort.Strings(e.SecurityGroups)
		return []field{{"return", true}}, nil
	}
	return nil, apiError{status: 400, code: "MissingParameter", msg: "No attribute specified."}
}

func (s *Server) assignPrivateIPAddresses(f url.Values) ([]field, error) {
	e, err := s.eniParam(f)
	if err != nil {
		return nil, err
	}
	count, err := intParam(f, "SecondaryPrivateIpAddressCount", 0)
	if err != nil {
		return nil, err
	}
	var explicit []netip.Addr
	for _, v := range list(f, "PrivateIpAddress") {
		a, err := netip.ParseAddr(v)
		if err != nil || !a.Is4() {
			return nil, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Invalid IPv4 address: %s", v)}
		}
		explicit = append(explicit, a)
	}
	pcount, err := intParam(f, "Ipv4PrefixCount", 0)
	if err != nil {
		return nil, err
	}
	prefixes, err := prefixList(f, "Ipv4Prefix", prefixBits4)
	if err != nil {
		return nil, err
	}
	if pcount > 0 || len(prefixes) > 0 {
		if count != 0 || len(explicit) > 0 || (pcount > 0) == (len(prefixes) > 0) || pcount < 0 {
			return nil, apiError{status: 400, code: "InvalidParameterCombination",
				msg: "Exactly one of SecondaryPrivateIpAddressCount, PrivateIpAddress, Ipv4PrefixCount and Ipv4Prefix must be given."}
		}
		return s.assignIPv4Prefixes(e, pcount, prefixes)
	}
	if (count > 0) == (len(explicit) > 0) || count < 0 {
		return nil, apiError{status: 400, code: "InvalidParameterCombination",
			msg: "Exactly one of SecondaryPrivateIpAddressCount and PrivateIpAddress must be given."}
	}
	n := count + len(explicit)
	limit := 50
	if e.Attachment != nil {
		limit = s.types[s.instances[e.Attachment.InstanceID].Type].IPv4PerENI
	}
	if e.slotsUsed()+n > limit {
		return nil, apiError{status: 400, code: "PrivateIpAddressLimitExceeded",
			msg: fmt.Sprintf("Number of private addresses will exceed limit of %d for %s.", limit, e.ID)}
	}
	sn := s.subnets[e.Subnet]
	if sn.free() < uint64(n) {
		return nil, apiError{status: 400, code: "InsufficientFreeAddressesInSubnet",
			msg: fmt.Sprintf("The specified subnet %s does not have enough free addresses to satisfy the request.", sn.ID)}
	}
	var assigned items[xmlAssigned]
	for i, a := range explicit {
		if err := sn.takeExact(a, e.ID); err != nil {
			for _, b := range explicit[:i] {
				delete(sn.used, b)
			}
			return nil, apiError{status: 400, code: "InvalidParameterValue", msg: err.Error()}
		}
	}
	for _, a := range explicit {
		e.Secondary = append(e.Secondary, a)
		assigned.Item = append(assigned.Item, xmlAssigned{a.String()})
	}
	for i := 0; i < count; i++ {
		a, _ := sn.take(e.ID)
		e.Secondary = append(e.Secondary, a)
		assigned.Item = append(assigned.Item, xmlAssigned{a.String()})
	}
	return []field{{"networkInterfaceId", e.ID}, {"assignedPrivateIpAddressesSet", assigned}}, nil
}

func (s *Server) unassignPrivateIPAddresses(f url.Values) ([]field, error) {
	e, err := s.eniParam(f)
	if err != nil {
		return nil, err
	}
	addrs := list(f, "PrivateIpAddress")
	prefixes, err := prefixList(f, "Ipv4Prefix", prefixBits4)
	if err != nil {
		return nil, err
	}
	if len(prefixes) > 0 && len(addrs) == 0 {
		return s.unassignIPv4Prefixes(e, prefixes)
	}
	if len(addrs) == 0 {
		return nil, missing("PrivateIpAddress")
	}
	drop := map[netip.Addr]bool{}
	for _, v := range addrs {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Invalid IPv4 address: %s", v)}
		}
		if a == e.PrimaryIP {
			return nil, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("The primary private IP address %s cannot be unassigned.", a)}
		}
		if !containsAddr(e.Secondary, a) {
			return nil, apiError{status: 400, code: "InvalidParameterValue",
				msg: fmt.Sprintf("Some of the specified addresses are not assigned to interface %s", e.ID)}
		}
		drop[a] = true
	}
	sn := s.subnets[e.Subnet]
	kept := e.Secondary[:0]
	for _, a := range e.Secondary {
		if drop[a] {
			delete(sn.used, a)
			continue
		}
		kept = append(kept, a)
	}
	e.Secondary = kept
	return []field{{"return", true}}, nil
}

func (s *Server) createTags(f url.Values) ([]field, error) {
	ids := list(f, "ResourceId")
	if len(ids) == 0 {
		return nil, missing("ResourceId")
	}
	tags := tagList(f, "Tag")
	if len(tags) == 0 {
		return nil, missing("Tag")
	}
	targets := make([]*map[string]string, 0, len(ids))
	for _, id := range ids {
		switch {
		case s.enis[id] != nil:
			targets = append(targets, &s.enis[id].Tags)
		case s.subnets[id] != nil:
			targets = append(targets, &s.subnets[id].Tags)
		case s.instances[id] != nil:
			targets = append(targets, &s.instances[id].Tags)
		case s.sgs[id] != nil:
			targets = append(targets, &s.sgs[id].Tags)
		case s.vpcs[id] != nil:
			targets = append(targets, &s.vpcs[id].Tags)
		default:
			return nil, apiError{status: 400, code: "InvalidID", msg: fmt.Sprintf("The ID '%s' is not valid", id)}
		}
	}
	for _, t := range targets {
		if *t == nil {
			*t = map[string]string{}
		}
		for k, v := range tags {
			(*t)[k] = v
		}
	}
	return []field{{"return", true}}, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, v := range list {
		if v == a {
			return true
		}
	}
	return false
}
