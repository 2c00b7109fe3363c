// Command policyplugin is the test plugin of core/pluginhost/process: labelpolicy, plus
// misbehaviour on demand (pod name "crash", "hang", "panic", "print"; env
// TEST_PLUGIN_STDOUT_GARBAGE for output before serving); with ALLOT_TEST_ECHO_PLUGIN=1 it
// serves the benchmarks' gRPC echo instead.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/allot-ipam/allot/core/pluginhost/process/testdata/echo"
	"github.com/allot-ipam/allot/core/pluginhost/process/testdata/labelpolicy"
	"github.com/allot-ipam/allot/sdk/pluginrpc"
	"github.com/allot-ipam/allot/sdk/policy"
)

type faulty struct{ labelpolicy.Policy }

func (f faulty) SelectPodPools(ctx context.Context, req *policy.PodRequest) (policy.PodDecision, error) {
	switch req.Pod.Name {
	case "crash":
		os.Exit(3)
	case "hang":
		<-make(chan struct{}) // ignores ctx on purpose
	case "panic":
		panic("test panic")
	case "print":
		fmt.Println("garbage on stdout during a call")
		_, _ = os.NewFile(1, "fd1").WriteString("garbage on fd 1 during a call\n")
	case "pid":
		return policy.PodDecision{Code: policy.NoFit, Reason: fmt.Sprint(os.Getpid())}, nil
	}
	return f.Policy.SelectPodPools(ctx, req)
}

func main() {
	if os.Getenv("TEST_PLUGIN_STDOUT_GARBAGE") != "" {
		fmt.Println("garbage on stdout before serving")
		_, _ = os.NewFile(1, "fd1").WriteString("1|2|garbage|that|looks|like|a|handshake\n")
	}
	if path := os.Getenv("TEST_PLUGIN_CPUPROFILE"); path != "" {
		// For benchmark diagnosis: profile until the host closes the plugin.
		if f, err := os.Create(path); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if os.Getenv(echo.EnvVar) == "1" {
		echo.Serve() // the benchmarks' transport floor, from the same binary
		return
	}
	pluginrpc.ServePoolPolicy(faulty{}, pluginrpc.Info{Name: "test-policy", Version: "1.2.3"})
}
