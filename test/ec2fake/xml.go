package ec2fake

import (
	"bytes"
	"encoding/xml"
	"net/http"
	"net/netip"
	"sort"
)

const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

// field is one child element of an answer.
type field struct {
	name  string
	value any
}

// items is an EC2 "...Set" list: <xSet><item>..</item></xSet>.
type items[T any] struct {
	Item []T `xml:"item"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlGroup struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type xmlPrivateIP struct {
	PrivateIPAddress string `xml:"privateIpAddress"`
	Primary          bool   `xml:"primary"`
}

type xmlAttachment struct {
	AttachmentID        string `xml:"attachmentId"`
	InstanceID          string `xml:"instanceId"`
	InstanceOwnerID     string `xml:"instanceOwnerId"`
	DeviceIndex         int    `xml:"deviceIndex"`
	NetworkCardIndex    int    `xml:"networkCardIndex"`
	Status              string `xml:"status"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type xmlENI struct {
	NetworkInterfaceID string                `xml:"networkInterfaceId"`
	SubnetID           string                `xml:"subnetId"`
	VpcID              string                `xml:"vpcId"`
	AvailabilityZone   string                `xml:"availabilityZone"`
	Description        string                `xml:"description"`
	OwnerID            string                `xml:"ownerId"`
	Status             string                `xml:"status"`
	MacAddress         string                `xml:"macAddress"`
	PrivateIPAddress   string                `xml:"privateIpAddress"`
	SourceDestCheck    bool                  `xml:"sourceDestCheck"`
	InterfaceType      string                `xml:"interfaceType"`
	Groups             *items[xmlGroup]      `xml:"groupSet"`
	Attachment         *xmlAttachment        `xml:"attachment"`
	TagSet             *items[xmlTag]        `xml:"tagSet"`
	PrivateIPs         items[xmlPrivateIP]   `xml:"privateIpAddressesSet"`
	IPv4Prefixes       *items[xmlIPv4Prefix] `xml:"ipv4PrefixSet"`
	IPv6Prefixes       *items[xmlIPv6Prefix] `xml:"ipv6PrefixSet"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
}

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlInstance struct {
	InstanceID        string           `xml:"instanceId"`
	InstanceType      string           `xml:"instanceType"`
	Placement         xmlPlacement     `xml:"placement"`
	InstanceState     xmlState         `xml:"instanceState"`
	SubnetID          string           `xml:"subnetId"`
	VpcID             string           `xml:"vpcId"`
	PrivateIPAddress  string           `xml:"privateIpAddress"`
	Groups            *items[xmlGroup] `xml:"groupSet"`
	TagSet            *items[xmlTag]   `xml:"tagSet"`
	NetworkInterfaces items[xmlENI]    `xml:"networkInterfaceSet"`
}

type xmlReservation struct {
	ReservationID string             `xml:"reservationId"`
	OwnerID       string             `xml:"ownerId"`
	Instances     items[xmlInstance] `xml:"instancesSet"`
}

type xmlSubnet struct {
	SubnetID                string         `xml:"subnetId"`
	VpcID                   string         `xml:"vpcId"`
	State                   string         `xml:"state"`
	CidrBlock               string         `xml:"cidrBlock"`
	AvailableIPAddressCount uint64         `xml:"availableIpAddressCount"`
	AvailabilityZone        string         `xml:"availabilityZone"`
	TagSet                  *items[xmlTag] `xml:"tagSet"`
}

type xmlSecurityGroup struct {
	GroupID   string         `xml:"groupId"`
	GroupName string         `xml:"groupName"`
	VpcID     string         `xml:"vpcId"`
	OwnerID   string         `xml:"ownerId"`
	TagSet    *items[xmlTag] `xml:"tagSet"`
}

type xmlVpc struct {
	VpcID     string         `xml:"vpcId"`
	CidrBlock string         `xml:"cidrBlock"`
	State     string         `xml:"state"`
	TagSet    *items[xmlTag] `xml:"tagSet"`
}

type xmlNetworkCard struct {
	NetworkCardIndex         int `xml:"networkCardIndex"`
	MaximumNetworkInterfaces int `xml:"maximumNetworkInterfaces"`
}

type xmlNetworkInfo struct {
	MaximumNetworkInterfaces  int                   `xml:"maximumNetworkInterfaces"`
	MaximumNetworkCards       int                   `xml:"maximumNetworkCards"`
	DefaultNetworkCardIndex   int                   `xml:"defaultNetworkCardIndex"`
	IPv4AddressesPerInterface int                   `xml:"ipv4AddressesPerInterface"`
	IPv6AddressesPerInterface int                   `xml:"ipv6AddressesPerInterface"`
	IPv6Supported             bool                  `xml:"ipv6Supported"`
	NetworkCards              items[xmlNetworkCard] `xml:"networkCards"`
}

type xmlInstanceType struct {
	InstanceType string         `xml:"instanceType"`
	Hypervisor   string         `xml:"hypervisor"`
	NetworkInfo  xmlNetworkInfo `xml:"networkInfo"`
}

type xmlIPv4Prefix struct {
	IPv4Prefix string `xml:"ipv4Prefix"`
}

type xmlIPv6Prefix struct {
	IPv6Prefix string `xml:"ipv6Prefix"`
}

type xmlAssigned struct {
	PrivateIPAddress string `xml:"privateIpAddress"`
}

const ownerID = "123456789012"

func tagsXML(t map[string]string) *items[xmlTag] {
	if len(t) == 0 {
		return nil
	}
	out := &items[xmlTag]{}
	for _, k := range sortedKeys(t) {
		out.Item = append(out.Item, xmlTag{Key: k, Value: t[k]})
	}
	return out
}

func (s *Server) groupsXML(ids []string) *items[xmlGroup] {
	out := &items[xmlGroup]{}
	for _, id := range ids {
		name := id
		if g, ok := s.sgs[id]; ok {
			name = g.Name
		}
		out.Item = append(out.Item, xmlGroup{GroupID: id, GroupName: name})
	}
	return out
}

func (s *Server) eniXML(e *ENI) xmlENI {
	x := xmlENI{
		NetworkInterfaceID: e.ID, SubnetID: e.Subnet, VpcID: e.VPC, AvailabilityZone: e.AZ,
		Description: e.Description, OwnerID: ownerID, Status: "available", MacAddress: e.MAC,
		PrivateIPAddress: e.PrimaryIP.String(), SourceDestCheck: true, InterfaceType: "interface",
		Groups: s.groupsXML(e.SecurityGroups), TagSet: tagsXML(e.Tags),
	}
	x.PrivateIPs.Item = append(x.PrivateIPs.Item, xmlPrivateIP{PrivateIPAddress: e.PrimaryIP.String(), Primary: true})
	sec := append([]netip.Addr(nil), e.Secondary...)
	sort.Slice(sec, func(i, j int) bool { return sec[i].Less(sec[j]) })
	for _, a := range sec {
		x.PrivateIPs.Item = append(x.PrivateIPs.Item, xmlPrivateIP{PrivateIPAddress: a.String()})
	}
	if len(e.Prefixes4) > 0 {
		x.IPv4Prefixes = &items[xmlIPv4Prefix]{}
		for _, p := range e.Prefixes4 {
			x.IPv4Prefixes.Item = append(x.IPv4Prefixes.Item, xmlIPv4Prefix{p.String()})
		}
	}
	if len(e.Prefixes6) > 0 {
		x.IPv6Prefixes = &items[xmlIPv6Prefix]{}
		for _, p := range e.Prefixes6 {
			x.IPv6Prefixes.Item = append(x.IPv6Prefixes.Item, xmlIPv6Prefix{p.String()})
		}
	}
	if a := e.Attachment; a != nil {
		x.Status = "in-use"
		x.Attachment = &xmlAttachment{AttachmentID: a.ID, InstanceID: a.InstanceID, InstanceOwnerID: ownerID,
			DeviceIndex: a.DeviceIndex, Status: "attached", DeleteOnTermination: a.DeleteOnTermination}
	}
	return x
}

func writeOK(w http.ResponseWriter, action, reqID string, fields []field) {
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: xmlns}}}
	must(enc.EncodeToken(start))
	must(enc.EncodeElement(reqID, xml.StartElement{Name: xml.Name{Local: "requestId"}}))
	for _, f := range fields {
		must(enc.EncodeElement(f.value, xml.StartElement{Name: xml.Name{Local: f.name}}))
	}
	must(enc.EncodeToken(start.End()))
	must(enc.Flush())
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = w.Write(buf.Bytes())
}

type xmlErrorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Errors    []xmlErr `xml:"Errors>Error"`
	RequestID string   `xml:"RequestID"`
}

type xmlErr struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

func writeError(w http.ResponseWriter, e apiError, reqID string) {
	out, err := xml.Marshal(xmlErrorResponse{Errors: []xmlErr{{Code: e.code, Message: e.msg}}, RequestID: reqID})
	must(err)
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	_, _ = w.Write(append([]byte(xml.Header), out...))
}

// must panics on an encoding error, which can only be a bug in the fake's own types.
func must(err error) {
	if err != nil {
		panic("ec2fake: encoding answer: " + err.Error())
	}
}
