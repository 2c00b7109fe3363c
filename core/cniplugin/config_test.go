package cniplugin

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/allot-ipam/allot/core/api"
)

// conf builds a network config around an ipam block and extra top-level keys.
func conf(ipam string, extra ...string) []byte {
	s := `{"cniVersion":"1.1.0","name":"net1","type":"bridge"`
	if ipam != "" {
		s += `,"ipam":` + ipam
	}
	for _, e := range extra {
		s += "," + e
	}
	return []byte(s + "}")
}

func wantCNIError(t *testing.T, err error, code uint, msgPart string) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want *types.Error code %d", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("code = %d (%q), want %d", e.Code, e.Msg, code)
	}
	if !strings.Contains(e.Msg, msgPart) {
		t.Fatalf("msg = %q, want it to contain %q", e.Msg, msgPart)
	}
}

func TestParseConfigValid(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want Config
	}{
		{
			name: "minimal uses defaults",
			in:   conf(`{"type":"allot-cni"}`),
			want: Config{CNIVersion: "1.1.0", Network: "net1", Socket: api.DefaultSocket, Timeout: DefaultTimeout},
		},
		{
			name: "everything",
			in: conf(`{"type":"allot-cni","socket":"/tmp/a.sock","pools":["default-v4","default-v6"],
				"default_ipv4_ippool":["v4a"],"default_ipv6_ippool":["v6a","v6b"],"timeout":"2s"}`,
				`"runtimeConfig":{"ips":["10.0.0.5/24","fd00::5"],"portMappings":[]}`,
				`"args":{"cni":{"ips":["10.0.0.5","10.0.0.6"],"mac":"x"}}`,
				`"prevResult":{"ips":[]}`,
				`"cni.dev/valid-attachments":[{"containerID":"b","ifname":"eth0"},{"containerID":"a","ifname":"eth1"}]`),
			want: Config{
				CNIVersion: "1.1.0", Network: "net1", Socket: "/tmp/a.sock", Timeout: 2 * time.Second,
				Pools: []string{"default-v4", "default-v6"}, DefaultIPv4Pools: []string{"v4a"}, DefaultIPv6Pools: []string{"v6a", "v6b"},
				IPs: []RequestedIP{
					{Value: "10.0.0.5/24", Addr: mustAddr("10.0.0.5"), Field: "runtimeConfig.ips[0]"},
					{Value: "fd00::5", Addr: mustAddr("fd00::5"), Field: "runtimeConfig.ips[1]"},
					{Value: "10.0.0.6", Addr: mustAddr("10.0.0.6"), Field: "args.cni.ips[1]"},
				},
				PrevResult:       []byte(`{"ips":[]}`),
				ValidAttachments: []api.Owner{{ContainerID: "a", IfName: "eth1"}, {ContainerID: "b", IfName: "eth0"}},
			},
		},
		{
			name: "nulls are absent",
			in:   conf(`{"socket":null,"pools":null,"timeout":null}`, `"runtimeConfig":null`, `"args":{"cni":null}`, `"prevResult":null`),
			want: Config{CNIVersion: "1.1.0", Network: "net1", Socket: api.DefaultSocket, Timeout: DefaultTimeout},
		},
		{
			name: "old attachments key",
			in:   conf(`{}`, `"cni.dev/attachments":[{"containerID":"a","ifname":"eth0"}]`),
			want: Config{CNIVersion: "1.1.0", Network: "net1", Socket: api.DefaultSocket, Timeout: DefaultTimeout,
				ValidAttachments: []api.Owner{{ContainerID: "a", IfName: "eth0"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(tt.in)
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

// TestParseConfigNoVersion: no cniVersion reads as 0.1.0, as libcni does.
func TestParseConfigNoVersion(t *testing.T) {
	c, err := ParseConfig([]byte(`{"name":"n","ipam":{"type":"allot-cni"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.CNIVersion != "0.1.0" {
		t.Fatalf("cniVersion %q, want 0.1.0", c.CNIVersion)
	}
}

func TestParseConfigErrors(t *testing.T) {
	const dec, inv = types.ErrDecodingFailure, types.ErrInvalidNetworkConfig
	tests := []struct {
		name string
		in   []byte
		code uint
		msg  string
	}{
		{"not json", []byte(`{`), dec, "network configuration: not valid JSON"},
		{"empty", []byte(``), dec, "network configuration: not valid JSON"},
		{"array", []byte(`[]`), dec, "network configuration: expected an object, got array"},
		{"cniVersion type", []byte(`{"cniVersion":1,"name":"n","ipam":{}}`), dec, "cniVersion: expected a string, got number"},
		{"name type", []byte(`{"cniVersion":"1.1.0","name":[],"ipam":{}}`), dec, "name: expected a string, got array"},
		{"name missing", []byte(`{"cniVersion":"1.1.0","ipam":{}}`), inv, "name: missing"},
		{"ipam missing", conf(""), inv, "ipam: missing"},
		{"ipam null", conf("null"), inv, "ipam: missing"},
		{"ipam type", conf(`"allot-cni"`), dec, "ipam: expected an object, got string"},
		{"ipam unknown key", conf(`{"pool":["a"]}`), inv, "ipam.pool: unknown field"},
		{"ipam.type type", conf(`{"type":7}`), dec, "ipam.type: expected a string, got number"},
		{"socket type", conf(`{"socket":true}`), dec, "ipam.socket: expected a string, got boolean"},
		{"socket empty", conf(`{"socket":""}`), inv, "ipam.socket: must not be empty"},
		{"socket relative", conf(`{"socket":"run/a.sock"}`), inv, "ipam.socket: must be an absolute path"},
		{"socket NUL", conf(`{"socket":"/run/a\u0000.sock"}`), inv, "ipam.socket: must not contain NUL"},
		{"timeout type", conf(`{"timeout":30}`), dec, "ipam.timeout: expected a string, got number"},
		{"timeout bad", conf(`{"timeout":"soon"}`), inv, `ipam.timeout: "soon" is not a duration`},
		{"timeout zero", conf(`{"timeout":"0s"}`), inv, "ipam.timeout: must be positive"},
		{"timeout negative", conf(`{"timeout":"-1s"}`), inv, "ipam.timeout: must be positive"},
		{"pools type", conf(`{"pools":"default"}`), dec, "ipam.pools: expected an array, got string"},
		{"pools element type", conf(`{"pools":["a",1]}`), dec, "ipam.pools[1]: expected a string, got number"},
		{"pools element null", conf(`{"pools":["a",null]}`), dec, "ipam.pools[1]: expected a string, got null"},
		{"pools element empty", conf(`{"pools":["a",""]}`), inv, "ipam.pools[1]: must be a non-empty string"},
		{"pools element blank", conf(`{"pools":[" "]}`), inv, "ipam.pools[0]: must be a non-empty string"},
		{"pools element spaces", conf(`{"pools":[" a"]}`), inv, "ipam.pools[0]: \" a\" has leading or trailing spaces"},
		{"pools duplicate", conf(`{"pools":["a","b","a"]}`), inv, `ipam.pools[2]: "a" is already ipam.pools[0]`},
		{"default v4 type", conf(`{"default_ipv4_ippool":{}}`), dec, "ipam.default_ipv4_ippool: expected an array, got object"},
		{"default v4 empty", conf(`{"default_ipv4_ippool":[""]}`), inv, "ipam.default_ipv4_ippool[0]: must be a non-empty string"},
		{"default v6 element", conf(`{"default_ipv6_ippool":["x",false]}`), dec, "ipam.default_ipv6_ippool[1]: expected a string, got boolean"},
		{"default v6 duplicate", conf(`{"default_ipv6_ippool":["x","x"]}`), inv, "ipam.default_ipv6_ippool[1]"},
		{"runtimeConfig type", conf(`{}`, `"runtimeConfig":[]`), dec, "runtimeConfig: expected an object, got array"},
		{"runtimeConfig.ips type", conf(`{}`, `"runtimeConfig":{"ips":"10.0.0.1"}`), dec, "runtimeConfig.ips: expected an array, got string"},
		{"runtimeConfig.ips element type", conf(`{}`, `"runtimeConfig":{"ips":[1]}`), dec, "runtimeConfig.ips[0]: expected a string, got number"},
		{"runtimeConfig.ips bad", conf(`{}`, `"runtimeConfig":{"ips":["10.0.0.1","10.0.0.300"]}`), inv, `runtimeConfig.ips[1]: "10.0.0.300" is not an IP address or CIDR`},
		{"runtimeConfig.ips zone", conf(`{}`, `"runtimeConfig":{"ips":["fe80::1%eth0"]}`), inv, "runtimeConfig.ips[0]"},
		{"args type", conf(`{}`, `"args":"x"`), dec, "args: expected an object, got string"},
		{"args.cni type", conf(`{}`, `"args":{"cni":1}`), dec, "args.cni: expected an object, got number"},
		{"args.cni.ips type", conf(`{}`, `"args":{"cni":{"ips":{}}}`), dec, "args.cni.ips: expected an array, got object"},
		{"args.cni.ips bad", conf(`{}`, `"args":{"cni":{"ips":["nope"]}}`), inv, `args.cni.ips[0]: "nope" is not an IP address or CIDR`},
		{"attachments type", conf(`{}`, `"cni.dev/valid-attachments":{}`), dec, "cni.dev/valid-attachments: expected an array, got object"},
		{"attachment type", conf(`{}`, `"cni.dev/valid-attachments":["a"]`), dec, "cni.dev/valid-attachments[0]: expected an object, got string"},
		{"attachment id type", conf(`{}`, `"cni.dev/valid-attachments":[{"containerID":1,"ifname":"e"}]`), dec, "cni.dev/valid-attachments[0].containerID: expected a string"},
		{"attachment id missing", conf(`{}`, `"cni.dev/valid-attachments":[{"ifname":"e"}]`), inv, "cni.dev/valid-attachments[0].containerID: missing"},
		{"attachment ifname missing", conf(`{}`, `"cni.dev/valid-attachments":[{"containerID":"a"}]`), inv, "cni.dev/valid-attachments[0].ifname: missing"},
		{"attachment ifname type", conf(`{}`, `"cni.dev/attachments":[{"containerID":"a","ifname":[]}]`), dec, "cni.dev/attachments[0].ifname: expected a string, got array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(tt.in)
			wantCNIError(t, err, tt.code, tt.msg)
		})
	}
}

func TestPrevResultIPs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
		code uint
		msg  string
	}{
		{name: "ok", in: `{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"},{"address":"fd00::5/64"}]}`, want: []string{"10.0.0.5/24", "fd00::5/64"}},
		{name: "no ips", in: `{"cniVersion":"1.1.0"}`, want: []string{}},
		{name: "not object", in: `[1]`, code: types.ErrDecodingFailure, msg: "prevResult: expected an object"},
		{name: "ips type", in: `{"ips":{}}`, code: types.ErrDecodingFailure, msg: "prevResult.ips: expected an array"},
		{name: "ip type", in: `{"ips":[1]}`, code: types.ErrDecodingFailure, msg: "prevResult.ips[0]: expected an object"},
		{name: "address type", in: `{"ips":[{"address":1}]}`, code: types.ErrDecodingFailure, msg: "prevResult.ips[0].address: expected a string"},
		{name: "address bad", in: `{"ips":[{"address":"10.0.0.5/24"},{"address":"10.0.0.6"}]}`, code: types.ErrInvalidNetworkConfig, msg: "prevResult.ips[1].address: \"10.0.0.6\" is not an address with prefix length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := prevResultIPs([]byte(tt.in))
			if tt.code != 0 {
				wantCNIError(t, err, tt.code, tt.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			strs := []string{}
			for _, p := range got {
				strs = append(strs, p.String())
			}
			if !reflect.DeepEqual(strs, tt.want) {
				t.Fatalf("got %v, want %v", strs, tt.want)
			}
		})
	}
}

// FuzzParseConfig feeds arbitrary stdin to the parser: it must never panic, must answer
// either a config or a CNI error of code 6 or 7 naming a field, and a config it accepts
// must satisfy the validation rules.
func FuzzParseConfig(f *testing.F) {
	seeds := [][]byte{
		conf(`{"type":"allot-cni"}`),
		conf(`{"type":"allot-cni","socket":"/run/allot/allotd.sock","pools":["default-v4","default-v6"],"default_ipv4_ippool":[],"default_ipv6_ippool":[],"timeout":"30s"}`),
		conf(`{}`, `"runtimeConfig":{"ips":["10.0.0.5/24"]}`, `"args":{"cni":{"ips":["fd00::1"]}}`),
		conf(`{}`, `"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]`, `"prevResult":{"ips":[{"address":"10.0.0.1/24"}]}`),
		conf(`{"pools":["a",""]}`),
		conf(`{"timeout":"-5m"}`),
		[]byte(`{"cniVersion":"1.1.0","name":"n","ipam":{"pools":[null]}}`),
		[]byte(`{`), []byte(`null`), []byte(``), []byte(`"x"`), []byte(` {"a":1} `),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			var e *types.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is %T, not *types.Error", err, err)
			}
			if e.Code != types.ErrDecodingFailure && e.Code != types.ErrInvalidNetworkConfig {
				t.Fatalf("code %d for %q", e.Code, e.Msg)
			}
			if !strings.Contains(e.Msg, ": ") {
				t.Fatalf("message %q names no field", e.Msg)
			}
			return
		}
		if c.CNIVersion == "" || c.Network == "" || c.Socket == "" || c.Timeout <= 0 {
			t.Fatalf("accepted config without required values: %+v", c)
		}
		for _, list := range [][]string{c.Pools, c.DefaultIPv4Pools, c.DefaultIPv6Pools} {
			seen := map[string]bool{}
			for _, p := range list {
				if strings.TrimSpace(p) == "" || seen[p] {
					t.Fatalf("accepted bad pool list %q", list)
				}
				seen[p] = true
			}
		}
		for _, ip := range c.IPs {
			if !ip.Addr.IsValid() || ip.Field == "" {
				t.Fatalf("accepted bad requested IP %+v", ip)
			}
		}
	})
}
