package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/allot-ipam/allot/sdk/pluginrpc"
	"github.com/allot-ipam/allot/sdk/policy"
)

// TestServedAsPlugin builds the binary and talks to it the way allotd does: go-plugin,
// gRPC, AutoMTLS, then the same answer as the in-process policy.
func TestServedAsPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: builds and runs the plugin binary")
	}
	bin := filepath.Join(t.TempDir(), "process-policy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginrpc.Handshake,
		Plugins:          pluginrpc.HostPlugins(),
		Cmd:              exec.Command(bin),
		AutoMTLS:         true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
	})
	defer client.Kill()
	rpcClient, err := client.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rpcClient.Dispense(string(pluginrpc.KindPoolPolicy))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := raw.(pluginrpc.Describer).PluginInfo(ctx)
	if err != nil || info.Name != "process-policy" || info.Kind != pluginrpc.KindPoolPolicy || info.ContractVersion != policy.ContractVersion {
		t.Fatalf("PluginInfo = %+v, %v", info, err)
	}
	pol := raw.(policy.PoolPolicy)
	for _, labels := range []map[string]string{nil, {DefaultLabel: "blue"}, {DefaultLabel: "nope"}} {
		req := &policy.PodRequest{Pod: policy.Pod{Name: "p", Labels: labels}, Pools: pools()}
		want, _ := LabelPolicy{}.SelectPodPools(ctx, req)
		got, err := pol.SelectPodPools(ctx, req)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("labels %v: plugin = %+v, %v; in-process = %+v", labels, got, err, want)
		}
	}
}
