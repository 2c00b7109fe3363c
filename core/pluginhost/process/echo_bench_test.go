package process

import (
	"context"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/allot-ipam/allot/core/pluginhost/process/testdata/echo"
	"github.com/allot-ipam/allot/internal/benchutil"
	"github.com/allot-ipam/allot/sdk/pluginrpc"
	"github.com/allot-ipam/allot/sdk/wire"
)

// The transport floor: BenchmarkProcessEcho sends the bytes of the benchmark's pod request
// to a go-plugin process over the same transport (gRPC, AutoMTLS, unix socket, GOMAXPROCS=1
// in the plugin, the host's dial options; the test plugin binary, serving testdata/echo) and
// gets a 30-byte answer back, with no decoding and no policy on either side.
// BenchmarkProcessPolicyVsEcho measures a decision against it in the same run.

func BenchmarkProcessEcho(b *testing.B) {
	cc, pid := startEcho(b)
	req, err := wire.AppendPodRequest(nil, podRequest("bench", nil, 20))
	if err != nil {
		b.Fatal(err)
	}
	// With deadline, each call carries the per-call timeout as the host's calls do (a
	// grpc-timeout header and a timer on each side).
	for _, deadline := range []bool{false, true} {
		b.Run(map[bool]string{false: "bare", true: "deadline"}[deadline], func(b *testing.B) {
			benchEcho(b, cc, pid, req, echoCall, deadline)
		})
	}
}

// echoCall is the codec option of every echo call.
var echoCall = grpc.ForceCodecV2(echo.Codec{})

// startEcho starts the test plugin binary serving the echo as the host starts a plugin:
// go-plugin, AutoMTLS, gRPC over a unix socket, the host's dial options, GOMAXPROCS=1.
func startEcho(b *testing.B) (*grpc.ClientConn, int) {
	if testing.Short() {
		b.Skip("slow: runs a plugin process")
	}
	cmd := exec.Command(testBinary(b, "policyplugin"))
	cmd.Env = append(os.Environ(), echo.EnvVar+"=1", "GOMAXPROCS=1")
	if v := os.Getenv("BENCH_ECHO_ENV"); v != "" { // e.g. TEST_PLUGIN_CPUPROFILE=/tmp/echo.prof
		cmd.Env = append(cmd.Env, strings.Split(v, ",")...)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginrpc.Handshake,
		Plugins:          plugin.PluginSet{"echo": echo.Plugin{}},
		Cmd:              cmd,
		SkipHostEnv:      true,
		AutoMTLS:         true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		GRPCDialOptions:  pluginrpc.HostDialOptions(),
		Logger:           hclog.NewNullLogger(),
	})
	b.Cleanup(client.Kill)
	rpcClient, err := client.Client()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := rpcClient.Dispense("echo")
	if err != nil {
		b.Fatal(err)
	}
	return raw.(*grpc.ClientConn), client.ReattachConfig().Pid
}

func benchEcho(b *testing.B, cc *grpc.ClientConn, pid int, req []byte, opt grpc.CallOption, deadline bool) {
	b.ReportAllocs()
	host0, plugin0 := cpuTime(b, 0), cpuTime(b, pid)
	hostSys0, pluginSys0 := syscalls(0), syscalls(pid)
	n := 0
	var out []byte
	for b.Loop() {
		in := req
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if deadline {
			ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		}
		err := cc.Invoke(ctx, echo.Method, &in, &out, opt)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
	if string(out) != string(echo.Answer) {
		b.Fatalf("answer %q", out)
	}
	reportSyscalls(b, n, syscalls(0)-hostSys0, syscalls(pid)-pluginSys0)
	host, plug := cpuTime(b, 0)-host0, cpuTime(b, pid)-plugin0
	b.ReportMetric(float64((host+plug).Nanoseconds())/float64(n), "cpu-ns/op")
	b.ReportMetric(float64(plug.Nanoseconds())/float64(n), "plugin-cpu-ns/op")
	b.ReportMetric(float64(len(req)), "req-bytes")
}

// BenchmarkProcessPolicyVsEcho is the pool-policy call measured against its transport floor
// in the same run: the supervised plugin's SelectPodPools (20 pools) and a bare gRPC unary
// echo of the same request bytes (BenchmarkProcessEcho's plugin: the same go-plugin
// handshake, AutoMTLS, unix socket and dial options). The two alternate in blocks, so load
// from other processes falls on both alike. Reported: each one's wall and CPU time per call
// (CPU: the host per block, each plugin process over the run; the CPU ratio adds both) and the ratios
// policy/echo, the figure the transport is held to.
func BenchmarkProcessPolicyVsEcho(b *testing.B) {
	// Each side's goroutines, its connection's included, carry a profiler label (-cpuprofile,
	// then pprof -tagfocus side=policy), so that one host profile shows both apart.
	var cc *grpc.ClientConn
	var echoPID int
	var p *Plugin
	pprof.Do(context.Background(), pprof.Labels("side", "echo"), func(context.Context) { cc, echoPID = startEcho(b) })
	pprof.Do(context.Background(), pprof.Labels("side", "policy"), func(context.Context) { p, _ = open(b, benchConfig(b)) })
	pol, polPID := p.PoolPolicy(), p.Status().PID
	req := podRequest("bench", nil, 20)
	raw, err := wire.AppendPodRequest(nil, req)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	echoes := func() error {
		in, out := raw, []byte(nil)
		return cc.Invoke(ctx, echo.Method, &in, &out, echoCall)
	}
	decide := func() error { _, err := pol.SelectPodPools(ctx, req); return err }
	var echoM, polM blockMeter
	echoCPU0, polCPU0 := cpuTime(b, echoPID), cpuTime(b, polPID)
	for b.Loop() {
		// Blocks of a few calls: host CPU time is read per block (getrusage is exact but
		// not free), and a block is short enough for both to see the same load.
		var err error
		pprof.Do(ctx, pprof.Labels("side", "echo"), func(context.Context) { err = echoM.run(echoes) })
		if err != nil {
			b.Fatal(err)
		}
		pprof.Do(ctx, pprof.Labels("side", "policy"), func(context.Context) { err = polM.run(decide) })
		if err != nil {
			b.Fatal(err)
		}
	}
	echoM.plugin = cpuTime(b, echoPID) - echoCPU0
	polM.plugin = cpuTime(b, polPID) - polCPU0
	echoM.report(b, "echo")
	polM.report(b, "policy")
	b.ReportMetric(float64(polM.wall)/float64(echoM.wall), "policy/echo-wall")
	b.ReportMetric(float64(polM.cpu+polM.plugin)/float64(echoM.cpu+echoM.plugin), "policy/echo-cpu")
}

// blockSize is the number of calls blockMeter.run makes per block.
const blockSize = 16

// blockMeter adds up the wall and host CPU time of blocks of calls.
type blockMeter struct {
	n         int
	wall, cpu time.Duration
	plugin    time.Duration // CPU time of the plugin process
}

func (m *blockMeter) run(call func() error) error {
	cpu0, t0 := benchutil.CPUTime(), time.Now()
	for range blockSize {
		if err := call(); err != nil {
			return err
		}
	}
	m.wall += time.Since(t0)
	m.cpu += benchutil.CPUTime() - cpu0
	m.n += blockSize
	return nil
}

func (m *blockMeter) report(b *testing.B, name string) {
	b.ReportMetric(float64(m.wall.Nanoseconds())/float64(m.n), name+"-ns/call")
	b.ReportMetric(float64(m.cpu.Nanoseconds())/float64(m.n), name+"-host-cpu-ns/call")
	b.ReportMetric(float64(m.plugin.Nanoseconds())/float64(m.n), name+"-plugin-cpu-ns/call")
}
