// Command dpbench compares the built-in datapaths (none, iptables, ebpf)
// through the test topology (pod → node → external, see test/datapath/topo)
// and prints a table with ratios:
//
//   - TCP throughput, single stream (iperf3)
//   - UDP 64-byte packets per second received (iperf3 -u -l 64 -b 0)
//   - TCP connections per second (connect, 1-byte request/response, close;
//     test/datapath/connrate)
//   - the eBPF programs' own cost per packet (run_time_ns / run_cnt with
//     BPF statistics enabled for the duration of the ebpf run only)
//
// Each datapath gets a fresh topology so that no state (conntrack hooks,
// TIME_WAIT sockets) carries over from the previous one. Needs root and
// iperf3 (Debian package iperf3).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allot-ipam/allot/plugins/datapath/ebpf"
	"github.com/allot-ipam/allot/plugins/datapath/iptables"
	"github.com/allot-ipam/allot/plugins/datapath/none"
	"github.com/allot-ipam/allot/sdk/datapath"
	"github.com/allot-ipam/allot/test/datapath/connrate"
	"github.com/allot-ipam/allot/test/datapath/topo"
	cebpf "github.com/cilium/ebpf"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

var (
	duration  = flag.Duration("duration", 5*time.Second, "length of each measurement")
	workers   = flag.Int("workers", 4, "parallel connection loops for conn/s")
	only      = flag.String("only", "none,iptables,ebpf", "datapaths to measure, comma-separated")
	verbose   = flag.Bool("v", false, "log datapath messages")
	rounds    = flag.Int("rounds", 3, "measurement rounds; the best of each figure is kept")
	iperfPort = 5201
	crrPort   = 9000
)

type figures struct {
	tcpGbps   float64
	udpKpps   float64
	connPerS  float64
	connFail  int64
	connP99   time.Duration
	nsPerPkt  float64 // egress+ingress combined; 0 when not applicable
	egressNs  float64
	ingressNs float64
	runCnt    uint64
	phaseNs   [3]float64 // ns/packet during the tcp, udp and conn/s phases
}

func main() {
	flag.Parse()
	if reason := topo.CheckPrivileges(); reason != "" {
		fmt.Fprintln(os.Stderr, "dpbench: skipped:", reason)
		os.Exit(0)
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		fmt.Fprintln(os.Stderr, "dpbench: needs iperf3 (apt-get install iperf3)")
		os.Exit(1)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var names []string
	for _, name := range strings.Split(*only, ",") {
		name = strings.TrimSpace(name)
		if name == "iptables" {
			if _, err := exec.LookPath("iptables"); err != nil {
				fmt.Fprintln(os.Stderr, "dpbench: iptables not on PATH, skipping")
				continue
			}
		}
		names = append(names, name)
	}
	// Rounds interleave the datapaths so that a burst of load from
	// elsewhere on the machine does not land on one datapath only; the
	// table keeps each datapath's best round.
	results := map[string]figures{}
	for round := 1; round <= *rounds; round++ {
		for _, name := range names {
			var dp datapath.Datapath
			switch name {
			case "none":
				dp = none.New(log)
			case "iptables":
				dp = iptables.New(log)
			case "ebpf":
				dp = ebpf.New(log)
			default:
				fmt.Fprintf(os.Stderr, "dpbench: unknown datapath %q\n", name)
				os.Exit(2)
			}
			f, err := measure(name, dp)
			if err != nil {
				fmt.Fprintf(os.Stderr, "dpbench: %s: %v\n", name, err)
				os.Exit(1)
			}
			fmt.Fprintf(os.Stderr, "dpbench: round %d %-8s tcp %.2f Gbit/s, udp %.1f kpps, %.0f conn/s (%d failed), %.0f ns/packet\n",
				round, name, f.tcpGbps, f.udpKpps, f.connPerS, f.connFail, f.nsPerPkt)
			results[name] = best(results[name], f, round == 1)
		}
	}
	order := names
	printTable(order, results)
}

func measure(name string, dp datapath.Datapath) (f figures, err error) {
	ctx := context.Background()
	tp, err := topo.New()
	if err != nil {
		return f, err
	}
	defer tp.Close()
	if name == "none" {
		// Nothing masquerades: route the pod CIDR back, as in a routed
		// (native-routing) cluster.
		if err := tp.RouteBack(); err != nil {
			return f, err
		}
	}

	// Servers in the external namespace.
	var iperfSrv *exec.Cmd
	if err := topo.In(tp.Ext, func() error {
		iperfSrv = exec.Command("iperf3", "-s", "-p", fmt.Sprint(iperfPort))
		return iperfSrv.Start()
	}); err != nil {
		return f, fmt.Errorf("iperf3 server: %w", err)
	}
	defer func() { _ = iperfSrv.Process.Kill(); _ = iperfSrv.Wait() }()
	var ln net.Listener
	if err := topo.In(tp.Ext, func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", crrPort))
		return err
	}); err != nil {
		return f, err
	}
	defer ln.Close()
	go func() { _ = connrate.Serve(ln) }()

	cfg := datapath.Config{
		PodCIDRs:           []netip.Prefix{topo.PodCIDR4, topo.PodCIDR6},
		NonMasqueradeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
	}
	if err := topo.In(tp.Node, func() error { return dp.Apply(ctx, cfg) }); err != nil {
		return f, fmt.Errorf("apply: %w", err)
	}
	defer func() {
		if rerr := topo.In(tp.Node, func() error { return dp.Remove(ctx) }); rerr != nil && err == nil {
			err = fmt.Errorf("remove: %w", rerr)
		}
	}()

	var progs []*cebpf.Program
	if e, ok := dp.(*ebpf.Datapath); ok {
		eg, in := e.Programs()
		progs = []*cebpf.Program{eg, in}
		// Statistics cost a little per run; on only while measuring, and
		// off again when the returned handle is closed.
		stats, err := cebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			return f, fmt.Errorf("enable bpf stats: %w", err)
		}
		defer stats.Close()
	}
	before := progStats(progs)

	time.Sleep(200 * time.Millisecond) // iperf3 server start-up
	ext := topo.Ext4.String()
	out, err := iperfClient(tp, "-c", ext, "-p", fmt.Sprint(iperfPort), "-t", secs(*duration), "-J")
	if err != nil {
		return f, fmt.Errorf("iperf3 tcp: %w", err)
	}
	f.tcpGbps = out.End.SumReceived.BitsPerSecond / 1e9
	mark := progStats(progs)
	f.phaseNs[0] = nsPerRun(before, mark)

	out, err = iperfClient(tp, "-c", ext, "-p", fmt.Sprint(iperfPort), "-u", "-l", "64", "-b", "0", "-t", secs(*duration), "-J")
	if err != nil {
		return f, fmt.Errorf("iperf3 udp: %w", err)
	}
	if s := out.End.Sum; s.Seconds > 0 {
		f.udpKpps = float64(s.Packets-s.LostPackets) / s.Seconds / 1e3
	}
	mark2 := progStats(progs)
	f.phaseNs[1] = nsPerRun(mark, mark2)

	dst := netip.AddrPortFrom(topo.Ext4, uint16(crrPort)).String()
	d := net.Dialer{Timeout: 5 * time.Second}
	wrap := func(fn func()) {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := netns.Set(tp.Pods[0]); err != nil {
			panic(err)
		}
		fn()
	}
	r := connrate.Run(ctx, func() (net.Conn, error) { return d.Dial("tcp", dst) }, wrap, *workers, *duration)
	f.connPerS, f.connFail, f.connP99 = r.PerSecond(), r.Failed, r.P99

	after := progStats(progs)
	f.phaseNs[2] = nsPerRun(mark2, after)
	if len(progs) == 2 {
		var rt, cnt [2]float64
		for i := range 2 {
			rt[i] = float64(after[i].Runtime - before[i].Runtime)
			cnt[i] = float64(after[i].RunCount - before[i].RunCount)
		}
		if cnt[0] > 0 {
			f.egressNs = rt[0] / cnt[0]
		}
		if cnt[1] > 0 {
			f.ingressNs = rt[1] / cnt[1]
		}
		if cnt[0]+cnt[1] > 0 {
			f.nsPerPkt = (rt[0] + rt[1]) / (cnt[0] + cnt[1])
		}
		f.runCnt = uint64(cnt[0] + cnt[1])
	}
	if st, err := dp.Status(ctx); err == nil && name == "ebpf" && *verbose {
		fmt.Fprintf(os.Stderr, "dpbench: ebpf status: %v\n", st.Detail)
	}
	return f, nil
}

// best keeps the better of each figure (failed connections are summed).
func best(a, b figures, first bool) figures {
	if first {
		return b
	}
	a.tcpGbps = max(a.tcpGbps, b.tcpGbps)
	a.udpKpps = max(a.udpKpps, b.udpKpps)
	a.connPerS = max(a.connPerS, b.connPerS)
	a.connFail += b.connFail
	a.connP99 = min(a.connP99, b.connP99)
	if b.nsPerPkt > 0 && (a.nsPerPkt == 0 || b.nsPerPkt < a.nsPerPkt) {
		a.nsPerPkt, a.egressNs, a.ingressNs, a.runCnt = b.nsPerPkt, b.egressNs, b.ingressNs, b.runCnt
	}
	for i := range a.phaseNs {
		if b.phaseNs[i] > 0 && (a.phaseNs[i] == 0 || b.phaseNs[i] < a.phaseNs[i]) {
			a.phaseNs[i] = b.phaseNs[i]
		}
	}
	return a
}

func progStats(progs []*cebpf.Program) []cebpf.ProgramStats {
	out := make([]cebpf.ProgramStats, len(progs))
	for i, p := range progs {
		if s, err := p.Stats(); err == nil {
			out[i] = *s
		}
	}
	return out
}

func nsPerRun(a, b []cebpf.ProgramStats) float64 {
	var rt, cnt float64
	for i := range a {
		rt += float64(b[i].Runtime - a[i].Runtime)
		cnt += float64(b[i].RunCount - a[i].RunCount)
	}
	if cnt == 0 {
		return 0
	}
	return rt / cnt
}

func secs(d time.Duration) string { return fmt.Sprint(max(1, int(d.Seconds()))) }

type iperfOut struct {
	End struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		Sum struct {
			Seconds     float64 `json:"seconds"`
			Packets     int64   `json:"packets"`
			LostPackets int64   `json:"lost_packets"`
		} `json:"sum"`
	} `json:"end"`
	Error string `json:"error"`
}

// iperfClient runs iperf3 in pod1's namespace.
func iperfClient(tp *topo.Topology, args ...string) (iperfOut, error) {
	var out iperfOut
	var raw []byte
	err := topo.In(tp.Pods[0], func() error {
		var err error
		raw, err = exec.Command("iperf3", args...).Output()
		return err
	})
	if jerr := json.Unmarshal(raw, &out); jerr != nil && err == nil {
		err = jerr
	}
	if out.Error != "" {
		err = errors.Join(err, errors.New(out.Error))
	}
	return out, err
}

func printTable(order []string, res map[string]figures) {
	fmt.Printf("best of %d rounds, %s per measurement, %d conn/s workers\n", *rounds, *duration, *workers)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "figure\t")
	for _, n := range order {
		fmt.Fprintf(w, "%s\t", n)
	}
	fmt.Fprint(w, "ebpf/iptables\tebpf/none\t\n")
	row := func(label string, get func(figures) float64, format string) {
		fmt.Fprintf(w, "%s\t", label)
		for _, n := range order {
			fmt.Fprintf(w, format+"\t", get(res[n]))
		}
		ratio := func(other string) string {
			e, ok1 := res["ebpf"]
			o, ok2 := res[other]
			if !ok1 || !ok2 || get(o) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f", get(e)/get(o))
		}
		fmt.Fprintf(w, "%s\t%s\t\n", ratio("iptables"), ratio("none"))
	}
	row("TCP throughput (Gbit/s)", func(f figures) float64 { return f.tcpGbps }, "%.2f")
	row("UDP 64B received (kpps)", func(f figures) float64 { return f.udpKpps }, "%.1f")
	row("TCP conn/s", func(f figures) float64 { return f.connPerS }, "%.0f")
	row("failed connections (all rounds)", func(f figures) float64 { return float64(f.connFail) }, "%.0f")
	row("conn p99 (ms)", func(f figures) float64 { return float64(f.connP99.Microseconds()) / 1e3 }, "%.2f")
	w.Flush()
	if e, ok := res["ebpf"]; ok {
		fmt.Printf("\neBPF program cost: %.0f ns/packet (egress %.0f ns, ingress %.0f ns, %d runs; target <= 300)\n",
			e.nsPerPkt, e.egressNs, e.ingressNs, e.runCnt)
		fmt.Printf("  by phase: TCP stream %.0f ns, UDP 64B %.0f ns, conn/s %.0f ns\n", e.phaseNs[0], e.phaseNs[1], e.phaseNs[2])
	}
}
