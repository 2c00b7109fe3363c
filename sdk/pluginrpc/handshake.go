package pluginrpc

import (
	"fmt"
	"runtime"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Handshake is the go-plugin handshake between allotd and its process plugins. The magic
// cookie only keeps a plugin binary from being run by hand by mistake; it is no security
// measure (the sha256 pin and AutoMTLS are). ProtocolVersion is the version of this package's
// wire protocol (services and framing); contract versions are checked separately via Meta.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "ALLOT_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "b1f5e4a0-allot-ipam-plugin-v1",
}

// Kind is a plugin kind, also the name under which go-plugin dispenses it.
type Kind string

const (
	KindPoolPolicy   Kind = "pool-policy"
	KindCloudBackend Kind = "cloud-backend"
	KindDatapath     Kind = "datapath"
)

// Kinds lists every kind, in a fixed order.
var Kinds = []Kind{KindPoolPolicy, KindCloudBackend, KindDatapath}

// ContractVersion is the version of the sdk contract of kind k that this build speaks.
func (k Kind) ContractVersion() string {
	switch k {
	case KindPoolPolicy:
		return policy.ContractVersion
	case KindCloudBackend:
		return cloud.ContractVersion
	case KindDatapath:
		return datapath.ContractVersion
	}
	return ""
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k.ContractVersion() != "" }

// ParseKind parses a kind name as written in configuration.
func ParseKind(s string) (Kind, error) {
	k := Kind(s)
	if !k.Valid() {
		return "", fmt.Errorf("pluginrpc: unknown plugin kind %q (want pool-policy, cloud-backend or datapath)", s)
	}
	return k, nil
}

// Info describes a plugin; the author fills Name and Version, the Serve helpers add the kind
// and contract version.
type Info struct {
	// Name of the plugin, e.g. "by-label".
	Name string
	// Version of the plugin itself, semver recommended, e.g. "0.3.1".
	Version string
}

// RemoteInfo is what a plugin says about itself through Meta.
type RemoteInfo struct {
	Name            string
	Version         string
	Kind            Kind
	ContractVersion string
}

// HostPlugins is the go-plugin plugin set a host passes in ClientConfig.Plugins: every kind,
// client side only. Dispensing kind k yields a *PoolPolicyClient, *CloudBackendClient or
// *DatapathClient, all of which also implement Describer.
func HostPlugins() plugin.PluginSet {
	return plugin.PluginSet{
		string(KindPoolPolicy):   &poolPolicyPlugin{},
		string(KindCloudBackend): &cloudBackendPlugin{},
		string(KindDatapath):     &datapathPlugin{},
	}
}

// transportWindow is the fixed HTTP/2 flow-control window of both ends (see
// PluginServerOptions and HostDialOptions).
const transportWindow = 1 << 20

// goPluginStreams is how many streams go-plugin keeps open for a connection's life (its
// broker's StartStream and its stdio's StreamStdio); each holds a gRPC stream worker.
const goPluginStreams = 2

// PluginServerOptions are the transport options of the plugin's gRPC server, which the
// Serve helpers use (a plugin serving through Serve with its own server should pass them
// too):
//   - a fixed flow-control window turns off gRPC's BDP estimation, whose pings cost an
//     extra encrypted write and wake-up on each side for many calls (a local pipe needs no
//     flow-control tuning);
//   - stream workers run calls on reused goroutines, one per P beside the ones go-plugin's
//     long-lived streams hold. With fewer, every call found them all busy and started a
//     goroutine, whose stack then grew (copied) on the way to the policy: ~4% of a pool
//     policy plugin's CPU time per call.
func PluginServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(transportWindow),
		grpc.InitialConnWindowSize(transportWindow),
		grpc.NumStreamWorkers(uint32(max(1, runtime.GOMAXPROCS(0)) + goPluginStreams)),
	}
}

// HostDialOptions are the gRPC dial options a host passes in go-plugin's
// ClientConfig.GRPCDialOptions: the hand-written codec is per call, these set the
// transport. A fixed window turns off BDP estimation pings (one extra encrypted write and
// wake-up on each side for many calls).
func HostDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(transportWindow),
		grpc.WithInitialConnWindowSize(transportWindow),
	}
}
