package e2e

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestBadInput feeds the real binary bad stdin and environment: each call must fail with a
// CNI error JSON on stdout carrying the right code and a message naming what is wrong.
// None of these reach the daemon, so none needs it.
func TestBadInput(t *testing.T) {
	needCNI(t)
	const good = `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"allot-cni","socket":"/nonexistent/allotd.sock"}}`
	baseEnv := func(extra ...string) []string {
		e := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/run/netns/none", "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin"}
		return append(e, extra...)
	}
	tests := []struct {
		name  string
		stdin string
		env   []string
		code  uint
		msg   string
	}{
		{"malformed stdin", `{"cniVersion":"1.1.0",`, nil, types.ErrDecodingFailure, "error unmarshall network config"},
		{"not an object", `["x"]`, nil, types.ErrDecodingFailure, "error unmarshall network config"},
		{"empty stdin", ``, nil, types.ErrDecodingFailure, "error unmarshall network config"},
		{"unknown cniVersion", `{"cniVersion":"9.9.9","name":"n","ipam":{"type":"allot-cni"}}`, nil, types.ErrIncompatibleCNIVersion, "incompatible CNI versions"},
		{"bad cniVersion", `{"cniVersion":"one","name":"n","ipam":{}}`, nil, types.ErrIncompatibleCNIVersion, "incompatible CNI versions"},
		{"missing name", `{"cniVersion":"1.1.0","ipam":{"type":"allot-cni"}}`, nil, types.ErrInvalidNetworkConfig, "missing network name"},
		{"missing ipam", `{"cniVersion":"1.1.0","name":"n"}`, nil, types.ErrInvalidNetworkConfig, "ipam: missing"},
		{"ipam wrong type", `{"cniVersion":"1.1.0","name":"n","ipam":"allot-cni"}`, nil, types.ErrDecodingFailure, "ipam: expected an object, got string"},
		{"pools wrong type", `{"cniVersion":"1.1.0","name":"n","ipam":{"pools":"default-v4"}}`, nil, types.ErrDecodingFailure, "ipam.pools: expected an array, got string"},
		{"empty pool name", `{"cniVersion":"1.1.0","name":"n","ipam":{"pools":["default-v4",""]}}`, nil, types.ErrInvalidNetworkConfig, "ipam.pools[1]: must be a non-empty string"},
		{"unknown ipam field", `{"cniVersion":"1.1.0","name":"n","ipam":{"pool":["a"]}}`, nil, types.ErrInvalidNetworkConfig, "ipam.pool: unknown field"},
		{"relative socket", `{"cniVersion":"1.1.0","name":"n","ipam":{"socket":"allotd.sock"}}`, nil, types.ErrInvalidNetworkConfig, "ipam.socket: must be an absolute path"},
		{"bad timeout", `{"cniVersion":"1.1.0","name":"n","ipam":{"timeout":"fast"}}`, nil, types.ErrInvalidNetworkConfig, `ipam.timeout: "fast" is not a duration`},
		{"bad requested IP", `{"cniVersion":"1.1.0","name":"n","ipam":{},"runtimeConfig":{"ips":["10.0.0.1/24","nope"]}}`, nil, types.ErrInvalidNetworkConfig, `runtimeConfig.ips[1]: "nope" is not an IP address or CIDR`},
		{"missing CNI_CONTAINERID", good, []string{"CNI_COMMAND=ADD", "CNI_NETNS=/x", "CNI_IFNAME=eth0", "CNI_PATH=/x"}, types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID"},
		{"missing CNI_IFNAME", good, []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=c1", "CNI_PATH=/x"}, types.ErrInvalidEnvironmentVariables, "CNI_IFNAME"},
		{"unknown command", good, []string{"CNI_COMMAND=FROB", "CNI_PATH=/x"}, types.ErrInvalidEnvironmentVariables, "unknown CNI_COMMAND: FROB"},
		{"bad CNI_ARGS pair", good, baseEnv("CNI_ARGS=K8S_POD_NAME"), types.ErrInvalidEnvironmentVariables, `CNI_ARGS: pair 0 "K8S_POD_NAME" is not KEY=VALUE`},
		{"unknown CNI_ARGS key", good, baseEnv("CNI_ARGS=K8S_POD_NAME=p;COLOR=blue"), types.ErrInvalidEnvironmentVariables, `CNI_ARGS: unknown key "COLOR"`},
		{"bad IP arg", good, baseEnv("CNI_ARGS=IgnoreUnknown=1;IP=10.0.0.300"), types.ErrInvalidEnvironmentVariables, `CNI_ARGS IP[0]: "10.0.0.300" is not an IP address or CIDR`},
		{"bad IgnoreUnknown", good, baseEnv("CNI_ARGS=IgnoreUnknown=maybe"), types.ErrInvalidEnvironmentVariables, `CNI_ARGS IgnoreUnknown: "maybe" is not a boolean`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.env
			if e == nil {
				e = baseEnv()
			}
			out := execCNI(t, cniCall{Env: e, Stdin: []byte(tt.stdin)})
			wantCode(t, out, tt.code, tt.msg)
			t.Logf("code %d: %s", out.Err.Code, out.Err.Error())
		})
	}
}
