package cniplugin

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/allot-ipam/allot/core/api"
)

// Args is what allot-cni reads from CNI_ARGS.
type Args struct {
	Pod api.PodRef
	// IPs are the addresses of IP= (comma separated), in order.
	IPs []RequestedIP
	// IgnoreUnknown is the runtime's IgnoreUnknown=1: keys meant for other plugins are
	// then skipped instead of refused.
	IgnoreUnknown bool
}

// ParseArgs parses CNI_ARGS ("K=V;K2=V2"). Errors are *types.Error with code 4 (invalid
// environment variables) naming the key. Unknown keys are an error unless IgnoreUnknown
// is true anywhere in the list, as the CNI conventions say.
func ParseArgs(s string) (*Args, error) {
	a := &Args{}
	if s == "" {
		return a, nil
	}
	var unknown []string
	for i, pair := range strings.Split(s, ";") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok || key == "" {
			return nil, invalidArgs("CNI_ARGS", "pair %d %q is not KEY=VALUE", i, pair)
		}
		switch key {
		case "IgnoreUnknown":
			switch strings.ToLower(value) {
			case "1", "true":
				a.IgnoreUnknown = true
			case "0", "false":
				a.IgnoreUnknown = false
			default:
				return nil, invalidArgs("CNI_ARGS IgnoreUnknown", "%q is not a boolean (want 1, true, 0 or false)", value)
			}
		case "K8S_POD_NAMESPACE":
			a.Pod.Namespace = value
		case "K8S_POD_NAME":
			a.Pod.Name = value
		case "K8S_POD_UID":
			a.Pod.UID = value
		case "K8S_POD_INFRA_CONTAINER_ID", "MAC":
			// Conventional keys for the runtime and the main plugin (bridge reads MAC):
			// known, so they never need IgnoreUnknown, but not ours to use.
		case "IP":
			a.IPs = a.IPs[:0]
			for j, v := range strings.Split(value, ",") {
				f := fmt.Sprintf("CNI_ARGS IP[%d]", j)
				v = strings.TrimSpace(v)
				addr, ok := parseIPOrCIDR(v)
				if !ok {
					return nil, invalidArgs(f, "%q is not an IP address or CIDR", v)
				}
				a.IPs = appendIP(a.IPs, RequestedIP{Value: v, Addr: addr, Field: f, FromEnv: true})
			}
		default:
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 && !a.IgnoreUnknown {
		return nil, invalidArgs("CNI_ARGS", "unknown key %q (the runtime should pass IgnoreUnknown=1 to skip keys meant for other plugins)", unknown[0])
	}
	return a, nil
}

func invalidArgs(field, format string, args ...any) *types.Error {
	return types.NewError(types.ErrInvalidEnvironmentVariables, field+": "+fmt.Sprintf(format, args...), "")
}
