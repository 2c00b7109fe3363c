package spiderpoolpriority

import "github.com/allot-ipam/allot/internal/spiderpoolanno"

// The annotations this policy reads are Spiderpool's; their parsing is shared with the
// operator's subnet controller and lives in internal/spiderpoolanno.
const (
	AnnoSubnet        = spiderpoolanno.AnnoSubnet
	AnnoSubnets       = spiderpoolanno.AnnoSubnets
	AnnoIPPool        = spiderpoolanno.AnnoIPPool
	AnnoIPPools       = spiderpoolanno.AnnoIPPools
	AnnoNSDefaultIPv4 = spiderpoolanno.AnnoNSDefaultIPv4
	AnnoNSDefaultIPv6 = spiderpoolanno.AnnoNSDefaultIPv6
)

// Selection is one parsed entry of the ippool/ippools/subnet/subnets pod annotations.
type Selection = spiderpoolanno.Selection

// Parsers of the annotations, re-exported for callers of this package.
var (
	ParseIPPoolAnnotation      = spiderpoolanno.ParseIPPoolAnnotation
	ParseIPPoolsAnnotation     = spiderpoolanno.ParseIPPoolsAnnotation
	ParseSubnetAnnotation      = spiderpoolanno.ParseSubnetAnnotation
	ParseSubnetsAnnotation     = spiderpoolanno.ParseSubnetsAnnotation
	ParseNamespaceDefaultPools = spiderpoolanno.ParseNamespaceDefaultPools
)

func validateName(n, what string) error { return spiderpoolanno.ValidateName(n, what) }
