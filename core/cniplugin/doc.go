// Package cniplugin is allot-cni: a CNI IPAM plugin (spec 1.1.0) that asks allotd for
// addresses over its local API (core/api). cmd/allot-cni only calls Plugin.Main (the CNI
// protocol of the library's skel, checked against it), so everything here runs
// in-process in tests.
//
// The binary is exec'd once per CNI call, so this package keeps start-up cheap: no package
// level state beyond constants, no registries, nothing done before the command is known.
//
// Configuration is the network's "ipam" block:
//
//	"ipam": {"type": "allot-cni", "socket": "/run/allot/allotd.sock",
//	         "pools": ["default-v4", "default-v6"],
//	         "default_ipv4_ippool": [], "default_ipv6_ippool": [], "timeout": "30s"}
//
// Requested addresses come from runtimeConfig.ips (capability "ips"), args.cni.ips and
// CNI_ARGS IP= (comma separated); the pod from CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME and
// K8S_POD_UID. The owner of an allocation is (CNI_CONTAINERID, CNI_IFNAME); the network is
// the configuration's "name".
//
// Errors are CNI errors (types.Error) with these codes:
//
//	 1  incompatible CNI version (checked by Main)
//	 3  CHECK: allotd holds nothing for the container
//	 4  bad CNI_ARGS, or an address requested by CNI_ARGS IP= refused as invalid
//	 6  stdin cannot be decoded: a field has the wrong JSON type (the field is named)
//	 7  bad configuration value (the field is named), or a named pool does not exist
//	11  allotd is not reachable, timed out, or cannot serve now: try again later
//	50  STATUS: allotd is not reachable or not ready
//	101 no free address in the candidate pools
//	102 a requested address is held by another owner
//	103 the pool policy found no pool for the request
//	104 CHECK: the addresses in prevResult differ from what allotd holds
//	999 unexpected failure
package cniplugin
