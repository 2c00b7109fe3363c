package cniplugin

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/allot-ipam/allot/core/api"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Args
	}{
		{name: "empty", in: "", want: Args{}},
		{
			name: "kubernetes runtime",
			in:   "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
			want: Args{IgnoreUnknown: true, Pod: api.PodRef{Namespace: "ns1", Name: "web-0", UID: "u-1"}},
		},
		{
			name: "unknown keys ignored when IgnoreUnknown comes later",
			in:   "FOO=bar;K8S_POD_NAME=p;IgnoreUnknown=true",
			want: Args{IgnoreUnknown: true, Pod: api.PodRef{Name: "p"}},
		},
		{
			name: "IP list",
			in:   "IP=10.0.0.5, fd00::5/64,10.0.0.5",
			want: Args{IPs: []RequestedIP{
				{Value: "10.0.0.5", Addr: mustAddr("10.0.0.5"), Field: "CNI_ARGS IP[0]", FromEnv: true},
				{Value: "fd00::5/64", Addr: mustAddr("fd00::5"), Field: "CNI_ARGS IP[1]", FromEnv: true},
			}},
		},
		{name: "MAC is known", in: "MAC=00:11:22:33:44:55", want: Args{}},
		{name: "empty value", in: "K8S_POD_NAME=", want: Args{}},
		{name: "IgnoreUnknown false", in: "IgnoreUnknown=0", want: Args{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		name, in, msg string
	}{
		{"no equals", "K8S_POD_NAME", `CNI_ARGS: pair 0 "K8S_POD_NAME" is not KEY=VALUE`},
		{"empty key", "=x", `CNI_ARGS: pair 0 "=x" is not KEY=VALUE`},
		{"trailing semicolon", "IgnoreUnknown=1;", `CNI_ARGS: pair 1 "" is not KEY=VALUE`},
		{"unknown key", "K8S_POD_NAME=p;FOO=bar", `CNI_ARGS: unknown key "FOO"`},
		{"IgnoreUnknown=0 keeps unknown an error", "IgnoreUnknown=0;FOO=bar", `CNI_ARGS: unknown key "FOO"`},
		{"bad bool", "IgnoreUnknown=yes", `CNI_ARGS IgnoreUnknown: "yes" is not a boolean`},
		{"bad IP", "IP=10.0.0.1,nope", `CNI_ARGS IP[1]: "nope" is not an IP address or CIDR`},
		{"empty IP", "IP=", `CNI_ARGS IP[0]: "" is not an IP address or CIDR`},
		{"bad CIDR", "IP=10.0.0.1/33", `CNI_ARGS IP[0]: "10.0.0.1/33"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseArgs(tt.in)
			wantCNIError(t, err, types.ErrInvalidEnvironmentVariables, tt.msg)
		})
	}
}

func TestMergeIPs(t *testing.T) {
	c, err := ParseConfig(conf(`{}`, `"runtimeConfig":{"ips":["10.0.0.5/24"]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseArgs("IP=10.0.0.5,10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	c.MergeIPs(a.IPs)
	var fields []string
	for _, ip := range c.IPs {
		fields = append(fields, ip.Field)
	}
	if want := []string{"runtimeConfig.ips[0]", "CNI_ARGS IP[1]"}; !reflect.DeepEqual(fields, want) {
		t.Fatalf("fields %v, want %v", fields, want)
	}
}
