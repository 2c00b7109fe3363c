package pluginrpc

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/allot-ipam/allot/sdk/cloud"
	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/allot-ipam/allot/sdk/policy"
)

// ServePoolPolicy serves impl as a pool-policy plugin and returns when the host is done with
// it. Call it from main and nothing else after it.
func ServePoolPolicy(impl policy.PoolPolicy, info Info) {
	if impl == nil {
		fail("ServePoolPolicy: nil implementation")
	}
	serve(KindPoolPolicy, info, &poolPolicyPlugin{impl: impl, info: info})
}

// ServeCloudBackend serves impl as a cloud-backend plugin.
func ServeCloudBackend(impl cloud.CloudBackend, info Info) {
	if impl == nil {
		fail("ServeCloudBackend: nil implementation")
	}
	serve(KindCloudBackend, info, &cloudBackendPlugin{impl: impl, info: info})
}

// ServeDatapath serves impl as a datapath plugin.
func ServeDatapath(impl datapath.Datapath, info Info) {
	if impl == nil {
		fail("ServeDatapath: nil implementation")
	}
	serve(KindDatapath, info, &datapathPlugin{impl: impl, info: info})
}

func serve(kind Kind, info Info, p plugin.Plugin) {
	if info.Name == "" {
		fail("Serve: Info.Name is empty")
	}
	// The handshake line must be the first thing on the real stdout; everything written to
	// stdout before this point went to stderr instead (see stdout_unix.go).
	useRealStdout()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{string(kind): p},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts,
				grpc.ChainUnaryInterceptor(recoverUnary),
				// Hand-written protobuf for SelectPodPools (codec.go).
				serverCodec())
			return grpc.NewServer(append(opts, PluginServerOptions()...)...)
		},
		// JSON on stderr: the host parses it and re-logs each line with its level and fields.
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:       info.Name,
			Output:     pluginStderr,
			JSONFormat: true,
			Level:      hclog.Info,
		}),
	})
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "pluginrpc: "+msg)
	os.Exit(1)
}

// Serve is plugin.Serve for plugins that need go-plugin options the helpers above do not
// expose. A program importing this package must serve through it (or the helpers), never
// plugin.Serve directly: while running as a plugin, this package diverts stdout until the
// handshake (see stdout_unix.go), and only Serve hands the real stdout back to go-plugin.
func Serve(cfg *plugin.ServeConfig) {
	useRealStdout()
	plugin.Serve(cfg)
}
