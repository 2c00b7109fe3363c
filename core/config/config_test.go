package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func writeFile(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "allotd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const minimal = `
pools:
  - name: v4
    cidrs: ["10.0.0.0/24"]
    default: true
`

func TestShippedDefaultConfigIsValid(t *testing.T) {
	c, err := load("../../conf/allotd.yaml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pools) != 2 || c.Pools[0].Name != "default-v4" || c.Pools[1].Name != "default-v6" {
		t.Fatalf("shipped config is not the dual-stack default: %+v", c.Pools)
	}
	if c.Socket != "/run/allot/allotd.sock" || c.HTTP.Address != "127.0.0.1:9464" {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

// TestAPIDefaultsKeptPerField: a file naming one api field keeps the defaults of the others.
func TestAPIDefaultsKeptPerField(t *testing.T) {
	c, err := load(writeFile(t, minimal+"api: {maxInFlight: 16}"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultAPI()
	want.MaxInFlight = 16
	if c.API != want {
		t.Fatalf("api %+v, want %+v", c.API, want)
	}
}

func TestPrecedenceFileEnvFlags(t *testing.T) {
	p := writeFile(t, minimal+"socket: /tmp/from-file.sock\nlog: {level: debug}\n")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--socket=/tmp/from-flag.sock"}); err != nil {
		t.Fatal(err)
	}
	env := []string{"ALLOT_SOCKET=/tmp/from-env.sock", "ALLOT_STORE_PATH=/tmp/env.db", "ALLOT_TYPO=1", "ALLOT_CONFIG=x", "PATH=/bin"}
	c, err := load(p, env, fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Socket != "/tmp/from-flag.sock" {
		t.Errorf("flag must win: %s", c.Socket)
	}
	if c.Store.Path != "/tmp/env.db" {
		t.Errorf("env must override default: %s", c.Store.Path)
	}
	if c.Log.Level != "debug" {
		t.Errorf("file must override default: %s", c.Log.Level)
	}
	if c.HTTP.Address != "127.0.0.1:9464" {
		t.Errorf("an unset flag must not override: %s", c.HTTP.Address)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "ALLOT_TYPO") {
		t.Errorf("unknown variable not reported: %v", c.Warnings)
	}
}

func TestValidationNamesTheField(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"no pools", "pools: []", "pools: at least one pool"},
		{"bad cidr", "pools: [{name: a, cidrs: [10.0.0.0/33]}]", "pools[0].cidrs[0]: \"10.0.0.0/33\" is not a CIDR"},
		{"host bits", "pools: [{name: a, cidrs: [10.0.0.1/24]}]", "pools[0].cidrs[0]: 10.0.0.1/24 has host bits set; did you mean 10.0.0.0/24?"},
		{"mixed family", "pools: [{name: a, cidrs: [10.0.0.0/24, 'fd00::/64']}]", "pools[0].cidrs[1]"},
		{"overlap across pools", "pools: [{name: a, cidrs: [10.0.0.0/16]}, {name: b, cidrs: [10.0.5.0/24]}]", `pools[1].cidrs[0]: 10.0.5.0/24 of pool "b" overlaps pools[0].cidrs[0] (10.0.0.0/16 of pool "a")`},
		{"overlap within pool", "pools: [{name: a, cidrs: [10.0.0.0/16, 10.0.0.0/24]}]", "overlaps"},
		{"exclusion outside", "pools: [{name: a, cidrs: [10.0.0.0/24], exclude: [10.0.1.5]}]", "pools[0].exclude[0]: 10.0.1.5 lies outside the pool's CIDRs"},
		{"exclusion garbage", "pools: [{name: a, cidrs: [10.0.0.0/24], exclude: [nope]}]", "pools[0].exclude[0]"},
		{"gateway outside", "pools: [{name: a, cidrs: [10.0.0.0/24], gateway: 10.9.9.9}]", "pools[0].gateway: 10.9.9.9 lies outside"},
		{"duplicate name", "pools: [{name: a, cidrs: [10.0.0.0/24]}, {name: a, cidrs: [10.1.0.0/24]}]", `pools[1].name: "a" is already the name of pools[0]`},
		{"bad name", "pools: [{name: 'A B', cidrs: [10.0.0.0/24]}]", "pools[0].name"},
		{"route family", "pools: [{name: a, cidrs: [10.0.0.0/24], routes: [{dst: '::/0'}]}]", "pools[0].routes[0].dst"},
		{"metrics not loopback", minimal + "http: {address: '0.0.0.0:9464'}", "http.address: 0.0.0.0:9464 is not a loopback address"},
		{"metrics address host", minimal + "http: {metricsAddress: 'node:9962'}", `http.metricsAddress: "node:9962": host "node" is not an IP address`},
		{"metrics address port", minimal + "http: {metricsAddress: ':99620'}", `http.metricsAddress: ":99620": port "99620" is not a number from 0 to 65535`},
		{"metrics address no port", minimal + "http: {metricsAddress: '0.0.0.0'}", `http.metricsAddress: "0.0.0.0" is not host:port`},
		{"metrics address shared", minimal + "http: {address: '127.0.0.1:9464', metricsAddress: '127.0.0.1:9464'}", "http.metricsAddress: 127.0.0.1:9464 is http.address too"},
		{"relative socket", minimal + "socket: run/x.sock", "socket: \"run/x.sock\" must be an absolute path"},
		{"socket group", minimal + "socketGroup: 'al lot'", "socketGroup: \"al lot\" is neither a group name nor a numeric gid"},
		{"socket gid -1", minimal + "socketGroup: 4294967295", "socketGroup: 4294967295 is not a valid gid"},
		{"log level", minimal + "log: {level: loud}", "log.level"},
		{"unknown key", minimal + "sockett: /x", "sockett"},
		{"mode", minimal + "mode: cluster", "mode: \"cluster\" is not supported (supported: standalone, agent, operator)"},
		{"empty chain", minimal + "policy: {default: {chain: []}}", "policy.default.chain: must name at least one policy"},
		{"plugin transport", minimal + "plugins: [{name: p, kind: pool-policy, transport: carrier-pigeon, path: /x}]", "plugins[0].transport"},
		{"wasm datapath", minimal + "plugins: [{name: p, kind: datapath, transport: wasm, path: /x}]", "wasm is only for pool-policy"},
		{"sha", minimal + "plugins: [{name: p, kind: pool-policy, transport: wasm, path: /x, sha256: abc}]", "plugins[0].sha256"},
		{"api in flight", minimal + "api: {maxInFlight: 0}", "api.maxInFlight: 0 must be between 1 and 65536"},
		{"api queue", minimal + "api: {maxQueued: -1}", "api.maxQueued: -1 must be between 0 and 1048576"},
		{"api wait", minimal + "api: {queueWait: 30s}", "api.queueWait: 30s must be between 0 and 20s"},
		{"whole pool excluded", "pools: [{name: a, cidrs: [10.0.0.0/30], exclude: [10.0.0.0/30]}]", "pools[0]"},
		{"store rebuild standalone", minimal + "store: {onCorruption: rebuild}", `store.onCorruption: "rebuild" is for agent mode only`},
		{"store on corruption", minimal + "store: {onCorruption: ignore}", `store.onCorruption: "ignore" is not rebuild or fail`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(writeFile(t, c.yaml), nil, nil)
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error does not say %q:\n%v", c.want, err)
			}
		})
	}
}

// TestSocketGroup: socketGroup is a name (resolved on the machine at start) or a gid (taken
// as it is, named if the machine knows it), from the file or ALLOT_SOCKET_GROUP.
func TestSocketGroup(t *testing.T) {
	c, err := load(writeFile(t, minimal+"socketGroup: 0\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := c.ResolveSocketGroup(); err != nil || g == nil || g.GID != 0 || g.Name != "root" {
		t.Errorf("gid 0: %+v %v", g, err)
	}
	c, err = load(writeFile(t, minimal), []string{"ALLOT_SOCKET_GROUP=root"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := c.ResolveSocketGroup(); err != nil || g == nil || g.GID != 0 {
		t.Errorf("group root: %+v %v", g, err)
	}
	c.SocketGroup = "no-such-group-here"
	if _, err := c.ResolveSocketGroup(); err == nil || !strings.Contains(err.Error(), `socketGroup: group "no-such-group-here" does not exist`) {
		t.Errorf("unknown group: %v", err)
	}
	c.SocketGroup = ""
	if g, err := c.ResolveSocketGroup(); g != nil || err != nil {
		t.Errorf("unset: %+v %v", g, err)
	}
}

func TestStoreOnCorruptionDefault(t *testing.T) {
	for _, c := range []struct{ mode, set, want string }{
		{"standalone", "", OnCorruptionFail},
		{"agent", "", OnCorruptionRebuild},
		{"agent", OnCorruptionFail, OnCorruptionFail},
		{"operator", "", OnCorruptionFail},
	} {
		cfg := Config{Mode: c.mode, Store: StoreConfig{OnCorruption: c.set}}
		if got := cfg.StoreOnCorruption(); got != c.want {
			t.Errorf("mode %s, store.onCorruption %q: %q, want %q", c.mode, c.set, got, c.want)
		}
	}
}

func TestValidationReportsEveryProblem(t *testing.T) {
	_, err := load(writeFile(t, "socket: rel\npools: [{name: a, cidrs: [bad]}]\nlog: {format: xml}"), nil, nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"socket", "pools[0].cidrs[0]", "log.format"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

// FuzzLoad feeds arbitrary YAML to the loader: it must never panic, and whatever it
// accepts must pass validation again (no half-validated config gets through).
func FuzzLoad(f *testing.F) {
	f.Add(minimal)
	f.Add("pools: [{name: a, cidrs: ['fd00::/64'], exclude: ['fd00::1-fd00::ff'], gateway: 'fd00::1'}]")
	f.Add("pools: [{name: a, cidrs: [10.0.0.0/8]}, {name: b, cidrs: [11.0.0.0/8]}]\npolicy: {networks: {x: {chain: [a]}}}")
	f.Add("::: not yaml")
	f.Add(`mode: agent
cluster: {nodeName: n, eni: {backend: aws-eni, ipv6PrefixDelegation: true}}
cni: {confDir: /etc/cni/net.d, conflist: '{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"ptp","mtu":9001,"ipam":{"type":"allot-cni"}}]}'}`)
	f.Fuzz(func(t *testing.T, body string) {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := load(p, nil, nil)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted a config that fails validation: %v", err)
		}
		for _, pl := range c.Pools {
			if _, err := pl.AllocatorConfig(); err != nil {
				t.Fatalf("accepted pool %q that the allocator refuses: %v", pl.Name, err)
			}
		}
	})
}
