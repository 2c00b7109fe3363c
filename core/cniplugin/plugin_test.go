package cniplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/allot-ipam/allot/core/api"
)

// rig is a fake allotd behind the real API server and client, and a plugin talking to it.
type rig struct {
	t    *testing.T
	svc  *fakeService
	sock string
	p    *Plugin
	out  *bytes.Buffer
}

func newRig(t *testing.T) *rig {
	svc := newFakeService()
	out := &bytes.Buffer{}
	return &rig{t: t, svc: svc, sock: serveFake(t, svc), p: &Plugin{Stdout: out}, out: out}
}

// netconf is a bridge-style network config whose ipam points at the rig's socket; ipam
// holds extra ipam keys (",\"pools\":[...]"), extra more top-level keys.
func (r *rig) netconf(ipam string, extra ...string) []byte {
	return conf(fmt.Sprintf(`{"type":"allot-cni","socket":%q,"timeout":"5s"%s}`, r.sock, ipam), extra...)
}

func cmd(id string, stdin []byte, cniArgs string) *CmdArgs {
	return &CmdArgs{ContainerID: id, Netns: "/var/run/netns/x", IfName: "eth0", Args: cniArgs, Path: "/opt/cni/bin", StdinData: stdin}
}

// add runs ADD and returns the printed result.
func (r *rig) add(args *CmdArgs) (*current.Result, error) {
	r.out.Reset()
	if err := r.p.Add(args); err != nil {
		return nil, err
	}
	raw := append([]byte(nil), r.out.Bytes()...)
	res, err := current.NewResult(raw)
	if err != nil {
		r.t.Fatalf("ADD printed an unparseable result %s: %v", raw, err)
	}
	return res.(*current.Result), nil
}

func resultAddrs(res *current.Result) []string {
	var out []string
	for _, ip := range res.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

func TestAddCheckDel(t *testing.T) {
	r := newRig(t)
	nc := r.netconf("")
	args := cmd("c1", nc, "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0;K8S_POD_UID=uid-1;FOO=bar")
	res, err := r.add(args)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if got, want := resultAddrs(res), []string{"192.0.2.2/29", "2001:db8::2/64"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("addresses %v, want %v", got, want)
	}
	if res.CNIVersion != "1.1.0" || len(res.Interfaces) != 0 {
		t.Fatalf("result version %q interfaces %v", res.CNIVersion, res.Interfaces)
	}
	if res.IPs[0].Interface != nil || res.IPs[0].Gateway.String() != "192.0.2.1" || res.IPs[1].Gateway.String() != "2001:db8::1" {
		t.Fatalf("bad IP configs %+v %+v", res.IPs[0], res.IPs[1])
	}
	var routes []string
	for _, rt := range res.Routes {
		routes = append(routes, rt.String())
	}
	if len(res.Routes) != 3 || res.Routes[0].Dst.String() != "0.0.0.0/0" || res.Routes[2].GW.String() != "2001:db8::fe" {
		t.Fatalf("routes %v", routes)
	}
	req := r.svc.lastAlloc
	wantReq := &api.AllocateRequest{Owner: api.Owner{ContainerID: "c1", IfName: "eth0"}, Network: "net1",
		Pod: api.PodRef{Namespace: "ns1", Name: "web-0", UID: "uid-1"}}
	if !reflect.DeepEqual(req, wantReq) {
		t.Fatalf("request %+v, want %+v", req, wantReq)
	}

	// A second ADD of the same owner gets the same addresses.
	again, err := r.add(args)
	if err != nil || !reflect.DeepEqual(resultAddrs(again), resultAddrs(res)) {
		t.Fatalf("second ADD: %v %v", err, again)
	}

	// CHECK with the ADD result as prevResult passes; with other addresses it names one.
	prev, _ := json.Marshal(res)
	withPrev := func(p string) *CmdArgs {
		return cmd("c1", r.netconf("", `"prevResult":`+p), "")
	}
	if err := r.p.Check(withPrev(string(prev))); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	foreign := `{"cniVersion":"1.1.0","ips":[{"address":"192.0.2.2/29"},{"address":"2001:db8::2/64"},{"address":"198.51.100.7/24"}]}`
	if err := r.p.Check(withPrev(foreign)); err != nil {
		t.Fatalf("CHECK with another plugin's address: %v", err)
	}
	checks := []struct{ prev, msg string }{
		{`{"cniVersion":"1.1.0","ips":[{"address":"192.0.2.2/29"}]}`, "address 2001:db8::2/64: allotd holds it for c1/eth0 but prevResult does not list it"},
		{`{"cniVersion":"1.1.0","ips":[{"address":"192.0.2.2/29"},{"address":"2001:db8::2/64"},{"address":"192.0.2.5/29"}]}`, "address 192.0.2.5/29: prevResult lists it but allotd does not hold it"},
		{`{"cniVersion":"1.1.0","ips":[{"address":"192.0.2.2/24"},{"address":"2001:db8::2/64"}]}`, "address 192.0.2.2: prevResult has prefix length /24"},
	}
	for _, c := range checks {
		wantCNIError(t, r.p.Check(withPrev(c.prev)), ErrCheckMismatch, c.msg)
	}
	wantCNIError(t, r.p.Check(cmd("c1", r.netconf(""), "")), types.ErrInvalidNetworkConfig, "prevResult: missing")
	wantCNIError(t, r.p.Check(withPrev(`{"ips":[{"address":"x"}]}`)), types.ErrInvalidNetworkConfig, "prevResult.ips[0].address")

	// DEL frees, twice is fine, and CHECK then finds nothing.
	for i := range 2 {
		if err := r.p.Del(cmd("c1", nc, "")); err != nil {
			t.Fatalf("DEL %d: %v", i, err)
		}
	}
	if n := len(r.svc.allocs); n != 0 {
		t.Fatalf("%d allocations left after DEL", n)
	}
	wantCNIError(t, r.p.Check(withPrev(string(prev))), types.ErrUnknownContainer, "c1/eth0 holds no addresses")
	// DEL of an owner that never held anything succeeds.
	if err := r.p.Del(cmd("never", nc, "")); err != nil {
		t.Fatalf("DEL of nothing: %v", err)
	}
}

func TestAddResultVersions(t *testing.T) {
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			r := newRig(t)
			nc := bytes.Replace(r.netconf(""), []byte(`"1.1.0"`), []byte(`"`+v+`"`), 1)
			r.out.Reset()
			if err := r.p.Add(cmd("c1", nc, "")); err != nil {
				t.Fatal(err)
			}
			var got struct {
				CNIVersion string `json:"cniVersion"`
				IPs        []struct {
					Address string `json:"address"`
				} `json:"ips"`
			}
			if err := json.Unmarshal(r.out.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.CNIVersion != v || len(got.IPs) != 2 {
				t.Fatalf("result %s", r.out.Bytes())
			}
		})
	}
}

func TestAddRequestedIPs(t *testing.T) {
	r := newRig(t)
	nc := r.netconf(`,"pools":["v4"]`, `"runtimeConfig":{"ips":["192.0.2.5/29"]}`, `"args":{"cni":{"ips":["192.0.2.5"]}}`)
	res, err := r.add(cmd("c1", nc, "IgnoreUnknown=1;IP=192.0.2.5"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resultAddrs(res); !reflect.DeepEqual(got, []string{"192.0.2.5/29"}) {
		t.Fatalf("got %v", got)
	}
	if got := r.svc.lastAlloc.IPs; !reflect.DeepEqual(got, []string{"192.0.2.5/29"}) {
		t.Fatalf("requested %v, want the duplicates folded", got)
	}
	if got := r.svc.lastAlloc.Pools; !reflect.DeepEqual(got, []string{"v4"}) {
		t.Fatalf("pools %v", got)
	}
	// CNI_ARGS IP= alone.
	res, err = r.add(cmd("c2", r.netconf(`,"pools":["v4"]`), "IP=192.0.2.6"))
	if err != nil || !reflect.DeepEqual(resultAddrs(res), []string{"192.0.2.6/29"}) {
		t.Fatalf("IP= arg: %v %v", err, res)
	}
}

func TestErrorCodes(t *testing.T) {
	tests := []struct {
		name  string
		setup func(r *rig)
		run   func(r *rig) error
		code  uint
		msg   string
	}{
		{
			name: "daemon down",
			run: func(r *rig) error {
				sock := filepath.Join(t.TempDir(), "gone.sock")
				return r.p.Add(cmd("c1", conf(fmt.Sprintf(`{"socket":%q}`, sock)), ""))
			},
			code: types.ErrTryAgainLater, msg: "allotd is not reachable at ",
		},
		{
			name: "daemon down on DEL",
			run: func(r *rig) error {
				return r.p.Del(cmd("c1", conf(`{"socket":"/nonexistent/allotd.sock"}`), ""))
			},
			code: types.ErrTryAgainLater, msg: "allotd is not reachable at /nonexistent/allotd.sock: ",
		},
		{
			name: "daemon down on STATUS",
			run: func(r *rig) error {
				return r.p.Status(cmd("", conf(`{"socket":"/nonexistent/allotd.sock"}`), ""))
			},
			code: types.ErrPluginNotAvailable, msg: "allotd is not reachable at /nonexistent/allotd.sock: ",
		},
		{
			name:  "daemon unavailable",
			setup: func(r *rig) { r.svc.unavailable = true },
			run:   func(r *rig) error { return r.p.Add(cmd("c1", r.netconf(""), "")) },
			code:  types.ErrTryAgainLater, msg: "allotd cannot serve now: store is closing",
		},
		{
			name:  "timeout",
			setup: func(r *rig) { r.svc.delay = time.Second },
			run: func(r *rig) error {
				return r.p.Add(cmd("c1", conf(fmt.Sprintf(`{"socket":%q,"timeout":"50ms"}`, r.sock)), ""))
			},
			code: types.ErrTryAgainLater, msg: "did not answer within 50ms (ipam.timeout)",
		},
		{
			name: "exhausted",
			setup: func(r *rig) {
				for i := range 5 {
					if _, err := r.add(cmd(fmt.Sprint("fill", i), r.netconf(`,"pools":["v4"]`), "")); err != nil {
						t.Fatal(err)
					}
				}
			},
			run:  func(r *rig) error { return r.p.Add(cmd("c1", r.netconf(`,"pools":["v4"]`), "")) },
			code: ErrExhausted, msg: `pool "v4" has no free address`,
		},
		{
			name: "conflict via runtimeConfig",
			setup: func(r *rig) {
				if _, err := r.add(cmd("other", r.netconf(""), "")); err != nil {
					t.Fatal(err)
				}
			},
			run: func(r *rig) error {
				return r.p.Add(cmd("c1", r.netconf("", `"runtimeConfig":{"ips":["192.0.2.2/29"]}`), ""))
			},
			code: ErrConflict, msg: "runtimeConfig.ips[0]: 192.0.2.2 is held by other/eth0",
		},
		{
			name: "conflict via CNI_ARGS",
			setup: func(r *rig) {
				if _, err := r.add(cmd("other", r.netconf(""), "")); err != nil {
					t.Fatal(err)
				}
			},
			run:  func(r *rig) error { return r.p.Add(cmd("c1", r.netconf(""), "IP=2001:db8::2")) },
			code: ErrConflict, msg: "CNI_ARGS IP[0]: 2001:db8::2 is held by other/eth0",
		},
		{
			name: "requested address outside every pool (config)",
			run: func(r *rig) error {
				return r.p.Add(cmd("c1", r.netconf("", `"args":{"cni":{"ips":["10.9.9.9"]}}`), ""))
			},
			code: types.ErrInvalidNetworkConfig, msg: `args.cni.ips[0]: "10.9.9.9" is in no pool`,
		},
		{
			name: "requested address outside every pool (CNI_ARGS)",
			run:  func(r *rig) error { return r.p.Add(cmd("c1", r.netconf(""), "IP=10.9.9.9")) },
			code: types.ErrInvalidEnvironmentVariables, msg: `CNI_ARGS IP[0]: "10.9.9.9" is in no pool`,
		},
		{
			name: "no pool",
			run: func(r *rig) error {
				return r.p.Add(cmd("c1", r.netconf(`,"pools":["none"]`), "K8S_POD_NAMESPACE=a;K8S_POD_NAME=b"))
			},
			code: ErrNoPool, msg: "pool policy found no pool for pod a/b",
		},
		{
			name: "unknown pool",
			run:  func(r *rig) error { return r.p.Add(cmd("c1", r.netconf(`,"pools":["v4","blue"]`), "")) },
			code: types.ErrInvalidNetworkConfig, msg: `ipam.pools[1]: pool "blue" does not exist`,
		},
		{
			name: "bad CNI_ARGS on ADD",
			run:  func(r *rig) error { return r.p.Add(cmd("c1", r.netconf(""), "K8S_POD_NAME=p;COLOR=blue")) },
			code: types.ErrInvalidEnvironmentVariables, msg: `CNI_ARGS: unknown key "COLOR"`,
		},
		{
			name: "bad CNI_ARGS on DEL",
			run:  func(r *rig) error { return r.p.Del(cmd("c1", r.netconf(""), "IP=x")) },
			code: types.ErrInvalidEnvironmentVariables, msg: `CNI_ARGS IP[0]: "x" is not an IP address or CIDR`,
		},
		{
			name: "bad config value",
			run:  func(r *rig) error { return r.p.Add(cmd("c1", r.netconf(`,"pools":["v4",""]`), "")) },
			code: types.ErrInvalidNetworkConfig, msg: "ipam.pools[1]: must be a non-empty string",
		},
		{
			name: "malformed config",
			run:  func(r *rig) error { return r.p.Add(cmd("c1", r.netconf(`,"pools":"v4"`), "")) },
			code: types.ErrDecodingFailure, msg: "ipam.pools: expected an array, got string",
		},
		{
			name: "malformed GC attachments",
			run:  func(r *rig) error { return r.p.GC(cmd("", r.netconf("", `"cni.dev/valid-attachments":{}`), "")) },
			code: types.ErrDecodingFailure, msg: "cni.dev/valid-attachments: expected an array",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			if tt.setup != nil {
				tt.setup(r)
			}
			wantCNIError(t, tt.run(r), tt.code, tt.msg)
		})
	}
}

func TestGC(t *testing.T) {
	r := newRig(t)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := r.add(cmd(id, r.netconf(""), "")); err != nil {
			t.Fatal(err)
		}
	}
	other := bytes.Replace(r.netconf(""), []byte(`"net1"`), []byte(`"net2"`), 1)
	if _, err := r.add(cmd("d", other, "")); err != nil {
		t.Fatal(err)
	}
	gc := r.netconf("", `"cni.dev/valid-attachments":[{"containerID":"c","ifname":"eth0"},{"containerID":"a","ifname":"eth0"}]`)
	if err := r.p.GC(cmd("", gc, "")); err != nil {
		t.Fatal(err)
	}
	wantValid := []api.Owner{{ContainerID: "a", IfName: "eth0"}, {ContainerID: "c", IfName: "eth0"}}
	if !reflect.DeepEqual(r.svc.lastGC, &api.GCRequest{Network: "net1", Valid: wantValid}) {
		t.Fatalf("GC request %+v", r.svc.lastGC)
	}
	var left []string
	for o := range r.svc.allocs {
		left = append(left, o.ContainerID)
	}
	if len(left) != 3 || r.svc.allocs[api.Owner{ContainerID: "b", IfName: "eth0"}] != nil {
		t.Fatalf("left after GC: %v, want a, c and d", left)
	}
	// cnitool sends no attachment list at all: everything of the network goes.
	if err := r.p.GC(cmd("", r.netconf(""), "")); err != nil {
		t.Fatal(err)
	}
	if r.svc.lastGC.Valid == nil || len(r.svc.lastGC.Valid) != 0 {
		t.Fatalf("GC without attachments sent %+v, want an empty list", r.svc.lastGC.Valid)
	}
	if len(r.svc.allocs) != 1 || r.svc.allocs[api.Owner{ContainerID: "d", IfName: "eth0"}] == nil {
		t.Fatalf("left after second GC: %v, want only d (other network)", r.svc.allocs)
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name  string
		setup func(r *rig)
		ipam  string
		code  uint
		msg   string
	}{
		{name: "ready"},
		{name: "ready with pools", ipam: `,"pools":["v4","v6"]`},
		{name: "not ready", setup: func(r *rig) { r.svc.notReady = true }, code: types.ErrPluginNotAvailable, msg: "allotd is not ready: store is not open"},
		{name: "missing pool", ipam: `,"pools":["v4","blue"]`, code: types.ErrPluginNotAvailable, msg: `ipam.pools[1]: allotd has no pool "blue"`},
		{
			name: "exhausted pool", ipam: `,"pools":["v4"]`,
			setup: func(r *rig) {
				for i := range 5 {
					if _, err := r.add(cmd(fmt.Sprint("fill", i), r.netconf(""), "")); err != nil {
						t.Fatal(err)
					}
				}
			},
			code: types.ErrPluginNotAvailable, msg: `ipam.pools[0]: pool "v4" has no free address`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			if tt.setup != nil {
				tt.setup(r)
			}
			err := r.p.Status(cmd("", r.netconf(tt.ipam), ""))
			if tt.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCNIError(t, err, tt.code, tt.msg)
		})
	}
}

func TestMapFieldIndexScan(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		idx  int
		rest string
	}{
		{"ips[0]", true, 0, ""},
		{"ips[12].address", true, 12, ".address"},
		{"ips[]", false, 0, ""},
		{"ips[x]", false, 0, ""},
		{"ips", false, 0, ""},
		{"pools[1]", false, 0, ""},
	}
	for _, tt := range tests {
		var idx int
		var rest string
		ok := scanIndex(tt.in, "ips", &idx, &rest)
		if ok != tt.ok || (ok && (idx != tt.idx || rest != tt.rest)) {
			t.Errorf("scanIndex(%q) = %v %d %q", tt.in, ok, idx, rest)
		}
	}
}

func TestResultFromBadAnswers(t *testing.T) {
	tests := []struct {
		name string
		a    api.Allocation
		msg  string
	}{
		{"no ips", api.Allocation{}, "without addresses"},
		{"address", api.Allocation{IPs: []api.IPConfig{{Address: "10.0.0.1"}}}, `ips[0].address: "10.0.0.1"`},
		{"gateway", api.Allocation{IPs: []api.IPConfig{{Address: "10.0.0.1/24", Gateway: "x"}}}, `ips[0].gateway: "x"`},
		{"route dst", api.Allocation{IPs: []api.IPConfig{{Address: "10.0.0.1/24"}}, Routes: []api.Route{{Dst: "default"}}}, `routes[0].dst: "default"`},
		{"route gw", api.Allocation{IPs: []api.IPConfig{{Address: "10.0.0.1/24"}}, Routes: []api.Route{{Dst: "0.0.0.0/0", GW: "y"}}}, `routes[0].gw: "y"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resultFrom(&tt.a)
			wantCNIError(t, err, types.ErrInternal, tt.msg)
			if !strings.Contains(err.Error(), "allotd") {
				t.Fatalf("error %q does not say where the bad value came from", err)
			}
		})
	}
}

// TestPermissionDenied: allotd's refusal of the caller keeps its message (which already
// names allotd) and gets a code of its own, not "unexpected failure".
func TestPermissionDenied(t *testing.T) {
	c := &call{conf: &Config{}}
	const msg = "allotd: permission denied: uid 1000 is not root or in group allot"
	err := c.daemonError("ADD", api.Errorf(api.CodePermissionDenied, msg))
	wantCNIError(t, err, ErrPermissionDenied, msg)
	if e := err.(*types.Error); e.Msg != msg {
		t.Fatalf("msg = %q, want %q", e.Msg, msg)
	}
}
