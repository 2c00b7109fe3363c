// Package cloud is the contract between allot's operator and cloud backends: where a node's
// addresses come from outside the cluster.
//
// A cloud backend is deliberately dumb. It reports what a node holds (Inventory) and carries
// out three primitive actions (Allocate, CreateInterface, Release); the operator owns every
// decision: the watermark arithmetic (pre-, min-, max-allocate, max-above-watermark, surge),
// the resync queue ordered by deficit, which interface to fill or create, which subnet to
// use, and the release handshake that keeps an address on its node while a pod may hold it.
// That split keeps backends small and testable, lets one operator drive AWS ENI, a static
// list or anything else, and puts every rule of Cilium's ENI IPAM that allot follows in one
// place.
//
// # Model
//
// A node has interfaces (AWS: ENIs; static: one pseudo interface). Each interface has an
// index (AWS device index; the operator never touches interfaces below the configured first
// interface index, by default the primary eth0), sits in a subnet and carries addresses.
// Subnets report their free addresses so the operator can pick the fullest-fitting one.
// Limits say how many interfaces a node may have and how many addresses each may carry
// (AWS: per instance type, built in, overridden by configuration, or read from the API).
//
// # Mapping to AWS ENI
//
//	Inventory       DescribeInstances + DescribeNetworkInterfaces + DescribeSubnets (+ limits)
//	Allocate        AssignPrivateIpAddresses / AssignIpv6Addresses on one ENI
//	CreateInterface CreateNetworkInterface + AttachNetworkInterface (+ ModifyNetworkInterfaceAttribute
//	                for delete-on-termination), with description and tags
//	Release         UnassignPrivateIpAddresses / UnassignIpv6Addresses
//
// # Mapping to a static list
//
// A static backend holds a fixed list of addresses. Inventory returns one interface per node
// (index 0, Subnet "static") with the addresses that node holds and a single subnet whose Free
// is the number of unassigned addresses; Allocate hands out the lowest free addresses;
// CreateInterface answers ErrUnsupported; Release returns addresses to the list.
//
// # Errors
//
// Backends wrap the sentinel errors below (errors.Is works across the process boundary:
// the go-plugin transport carries the sentinel's identity) so the operator can tell "retry
// later" (ErrThrottled) from "this node is full" (ErrLimitReached, ErrSubnetFull) from "this
// backend cannot do that" (ErrUnsupported); ErrNoFreePrefix (contract 1.2) says the subnet
// has no free block for a delegated prefix, and the operator falls back to addresses.
//
// Every answer from a backend is validated by the host (addresses parse, families match,
// counts are not exceeded) before the operator uses it.
package cloud
