package awseni_test

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/eni"
	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// benchTypes is the benchmark's fleet, cycled over the nodes.
var benchTypes = []string{"m5.xlarge", "c5.4xlarge", "m5.2xlarge", "m5.4xlarge"}

// minimumCalls is the fewest EC2 calls that give a node of type typ need addresses with
// first-interface-index 0 and delete-on-termination: one AssignPrivateIpAddresses on eth0,
// then per extra ENI CreateNetworkInterface (carrying its addresses), AttachNetworkInterface
// and ModifyNetworkInterfaceAttribute. Reads are counted cluster-wide: one paged
// DescribeInstances, DescribeNetworkInterfaces and DescribeSubnets.
func minimumCalls(typ string, need int) int {
	per := ec2fake.DefaultTypeLimits[typ].IPv4PerENI - 1
	calls := 1
	need -= min(need, per)
	for need > 0 {
		calls += 3
		need -= min(need, per)
	}
	return calls
}

type benchRow struct {
	name               string
	qps                float64
	burst              int
	scale              float64
	nodes, need        int
	real               time.Duration
	passes, calls, min int
	throttles, errors  int
	addresses, dups    int
}

// BenchmarkENIConverge is `make bench-eni`: ALLOT_BENCH_ENI_NODES nodes (default 1,000)
// each needing 30 addresses, against the fake throttling like AWS (per-action buckets of
// 100, refilling 5/s for mutating actions and 20/s for Describe) with its clock scaled by
// ALLOT_BENCH_ENI_SCALE (default 25) so a run takes about a minute; client rate, backoff and
// injected latency (100 ms per call, AWS-like) are scaled by the same factor, so "scaled"
// times are what the same run would take against AWS's rates.
func BenchmarkENIConverge(b *testing.B) {
	nodes := envInt("ALLOT_BENCH_ENI_NODES", 1000)
	scale := float64(envInt("ALLOT_BENCH_ENI_SCALE", 25))
	var rows []benchRow
	for i := 0; i < b.N; i++ {
		rows = rows[:0]
		rows = append(rows, runBench(b, benchRow{name: "client 4 qps / burst 20 (default)", qps: 4, burst: 20, scale: scale, nodes: nodes, need: 30}))
		rows = append(rows, runBench(b, benchRow{name: "client 20 qps / burst 100", qps: 20, burst: 100, scale: scale, nodes: nodes, need: 30}))
	}
	fmt.Printf("\nENI convergence: %d nodes x %d addresses, fleet %v, first-interface-index 0, delete-on-termination\n", nodes, 30, benchTypes)
	fmt.Printf("fake: AWS-sized token buckets, clock x%.0f; 100 ms latency per call (scaled)\n\n", scale)
	fmt.Printf("%-34s %10s %12s %7s %11s %9s %8s %10s %9s %6s %5s\n", "client limit", "real", "scaled(AWS)", "passes", "calls/node", "min/node", "ratio", "throttles", "5xx/err", "addrs", "dups")
	for _, r := range rows {
		fmt.Printf("%-34s %10s %12s %7d %11.2f %9.2f %8.3f %10d %9d %6d %5d\n", r.name, r.real.Round(time.Millisecond),
			time.Duration(float64(r.real)*r.scale).Round(time.Second), r.passes,
			float64(r.calls)/float64(r.nodes), float64(r.min)/float64(r.nodes), float64(r.calls)/float64(r.min),
			r.throttles, r.errors, r.addresses, r.dups)
	}
	fmt.Println()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func runBench(b *testing.B, r benchRow) benchRow {
	b.Helper()
	h := newHarness(b, setup{
		fake:    ec2fake.Options{Throttle: true, TimeScale: r.scale, Latency: time.Duration(float64(100*time.Millisecond) / r.scale)},
		subnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/14"), netip.MustParsePrefix("10.4.0.0/14")},
		types:   benchTypes,
		nodes:   r.nodes,
		ecfg: func(c *eni.Config) {
			c.Params = eni.Params{PreAllocate: r.need}
			c.Workers = 32
		},
		bcfg: func(c *awseni.Config) {
			c.QPS, c.Burst = r.qps*r.scale, r.burst
			c.MaxBackoff = awseni.Duration{Duration: time.Duration(float64(20*time.Second) / r.scale)}
			c.MaxAttempts = 20
		},
	})
	for _, n := range h.nodes {
		r.min += minimumCalls(n.ref.InstanceType, r.need)
	}
	r.min += 3
	h.fake.ResetStats()
	start := time.Now()
	for {
		h.engine.Pass(h.ctx)
		r.passes++
		done := true
		for _, n := range h.nodes {
			if st, _ := h.engine.Status(n.ref.Name); st.Needed != 0 {
				done = false
			}
		}
		if done || r.passes > 50 {
			break
		}
		time.Sleep(time.Duration(float64(time.Second) / r.scale)) // sleep: paces the benchmark: at most one pass per (scaled) second
	}
	r.real = time.Since(start)
	for _, st := range h.fake.Stats() {
		r.calls += st.Calls
		r.throttles += st.Throttled
		for code, c := range st.Errors {
			if code != "RequestLimitExceeded" {
				r.errors += c
			}
		}
	}
	seen := map[netip.Addr]bool{}
	for _, e := range h.fake.ENIs() {
		if e.Attachment == nil {
			continue
		}
		for _, a := range e.Secondary {
			if seen[a] {
				r.dups++
			}
			seen[a] = true
			r.addresses++
		}
	}
	if err := h.fake.CheckInvariants(); err != nil {
		b.Fatal(err)
	}
	if r.addresses != r.nodes*r.need {
		b.Errorf("%s: %d addresses assigned, want exactly %d", r.name, r.addresses, r.nodes*r.need)
	}
	return r
}
