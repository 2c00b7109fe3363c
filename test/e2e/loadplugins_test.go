package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/api"
)

// buildExample builds one of plugin-examples/ (each its own module) and returns the artefact's
// path and sha256.
func buildExample(t *testing.T, dir string, wasm bool) (string, string) {
	t.Helper()
	src := filepath.Join(env.root, "plugin-examples", dir)
	out := filepath.Join(t.TempDir(), dir)
	args := []string{"build", "-o", out, "."}
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	cmd.Env = os.Environ()
	if wasm {
		out += ".wasm"
		cmd.Args = []string{"go", "build", "-buildmode=c-shared", "-o", out, "."}
		cmd.Env = append(cmd.Env, "GOOS=wasip1", "GOARCH=wasm")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", dir, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return out, hex.EncodeToString(sum[:])
}

// TestExamplePluginsLoadedFromConfig is the plugin hosts' end-to-end test: allotd loads a WASM
// pool policy, a go-plugin process pool policy and a go-plugin cloud backend from its config
// file, reports them in allotctl plugins, and pod addresses flow through each of them.
func TestExamplePluginsLoadedFromConfig(t *testing.T) {
	needDaemon(t)
	wasmPath, wasmSum := buildExample(t, "wasm-label-policy", true)
	procPath, procSum := buildExample(t, "process-policy", false)
	cloudPath, cloudSum := buildExample(t, "static-cloud", false)
	cfg := fmt.Sprintf(`
  - {name: default-v4, cidrs: ["10.96.0.0/24"], default: true}
  - {name: blue-v4, cidrs: ["10.95.0.0/24"]}
plugins:
  - {name: wasm-label, kind: pool-policy, transport: wasm, path: %q, sha256: %s}
  - {name: proc-policy, kind: pool-policy, transport: process, path: %q, sha256: %s}
  - name: lab
    kind: cloud-backend
    transport: process
    path: %q
    sha256: %s
    args: ["-state", %q]
    env: ["STATIC_CLOUD_ADDRESSES=192.0.2.10-192.0.2.20"]
cloud:
  node: {name: node-a}
  pools:
    - {name: lab-v4, backend: lab, family: ipv4, addresses: 4}
policy:
  default: {chain: [static]}
  networks:
    wasmnet: {chain: [wasm-label], fallback: static}
    procnet: {chain: [proc-policy, static]}
`, wasmPath, wasmSum, procPath, procSum, cloudPath, cloudSum, filepath.Join(t.TempDir(), "static-cloud.json"))
	d := startDaemon(t, cfg)
	ctx := context.Background()

	plugins, err := d.client.Plugins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, p := range plugins {
		if !p.Healthy {
			t.Errorf("plugin %s unhealthy: %s", p.Name, p.LastError)
		}
		seen = append(seen, p.Name+"/"+p.Transport)
	}
	sort.Strings(seen)
	if strings.Join(seen, " ") != "lab/process proc-policy/process static/builtin wasm-label/wasm" {
		t.Fatalf("plugins: %v", seen)
	}
	out, err := exec.Command(filepath.Join(filepath.Dir(env.allotd), "allotctl"), "--socket", d.socket, "plugins").CombinedOutput()
	if err == nil && !strings.Contains(string(out), "wasm-label") {
		t.Errorf("allotctl plugins:\n%s", out)
	}

	alloc := func(id, network string, mod func(*api.AllocateRequest)) *api.Allocation {
		t.Helper()
		req := &api.AllocateRequest{Owner: api.Owner{ContainerID: id, IfName: "eth0"}, Network: network}
		if mod != nil {
			mod(req)
		}
		a, err := d.client.Allocate(ctx, req)
		if err != nil {
			t.Fatalf("%s on %s: %v", id, network, err)
		}
		return a
	}
	// WASM policy: no pod label in standalone mode, so it answers with the default pools.
	if a := alloc("w1", "wasmnet", nil); a.IPs[0].Pool != "default-v4" {
		t.Errorf("wasm policy: %+v", a.IPs)
	}
	// Process policy: the CNI config's default pool (its step 2).
	if a := alloc("p1", "procnet", func(r *api.AllocateRequest) { r.DefaultIPv4Pools = []string{"blue-v4"} }); a.IPs[0].Pool != "blue-v4" {
		t.Errorf("process policy: %+v", a.IPs)
	}
	// Cloud backend: the pool holds exactly the 4 addresses the backend assigned to node-a.
	lab := netip.MustParsePrefix("192.0.2.0/24")
	got := map[string]bool{}
	for i := range 4 {
		a := alloc(fmt.Sprintf("c%d", i), "default", func(r *api.AllocateRequest) { r.Pools = []string{"lab-v4"} })
		p := netip.MustParsePrefix(a.IPs[0].Address)
		if !lab.Contains(p.Addr()) || p.Addr().Compare(netip.MustParseAddr("192.0.2.10")) < 0 || p.Addr().Compare(netip.MustParseAddr("192.0.2.20")) > 0 {
			t.Errorf("cloud pool gave %s", p)
		}
		got[p.Addr().String()] = true
	}
	if len(got) != 4 {
		t.Errorf("cloud pool gave %v", got)
	}
	_, err = d.client.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "c9", IfName: "eth0"}, Network: "default", Pools: []string{"lab-v4"}})
	if api.CodeOf(err) != api.CodeExhausted {
		t.Errorf("fifth cloud address: %v", err)
	}

	// A restart keeps every address and finds the same cloud addresses again: the backend is
	// asked for the node's inventory, not for new addresses.
	d.stop()
	d.start()
	allocs := d.allocations()
	if len(allocs) != 6 {
		t.Fatalf("after restart %d allocations, want 6", len(allocs))
	}
	pools, err := d.client.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if p.Name == "lab-v4" && (p.Usable != 4 || p.Used != 4) {
			t.Errorf("after restart lab-v4 has %d usable, %d used; want the same 4 addresses, all in use", p.Usable, p.Used)
		}
	}
}
