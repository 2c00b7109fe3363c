// Command cnibench measures the real CNI path side by side: N ADDs then N DELs with W
// parallel workers, each an exec of the IPAM plugin binary with the CNI environment and
// stdin a runtime would give it, for allot-cni (against a freshly started allotd on a temp
// store, fsync on) and for host-local, the reference CNI IPAM. Both hand out one IPv4 and
// one IPv6 address per ADD. A third row is the floor: a trivial static Go binary, built here,
// that reads stdin and prints a fixed result, exec'd the same way; no IPAM can beat it. It
// prints a table and the ratios allot/host-local and allot/floor of the same run.
//
//	go run ./test/cnibench -n 1000 -workers 8          (make bench-cni)
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/allot-ipam/allot/core/api/client"
)

type options struct {
	n, workers int
	allotCNI   string
	allotd     string
	hostLocal  string
	dir        string
	only       string
	startup    int
	rounds     int
	noSync     bool
}

func main() {
	var o options
	home, _ := os.UserHomeDir()
	cache := os.Getenv("ALLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(home, ".cache", "allot")
	}
	flag.IntVar(&o.n, "n", 1000, "ADDs (then as many DELs) per plugin")
	flag.IntVar(&o.workers, "workers", 8, "parallel workers, each exec'ing the plugin")
	flag.StringVar(&o.allotCNI, "allot-cni", "", "allot-cni binary (default: go build ./cmd/allot-cni)")
	flag.StringVar(&o.allotd, "allotd", "", "allotd binary (default: go build ./cmd/allotd)")
	flag.StringVar(&o.hostLocal, "host-local", filepath.Join(cache, "cni-v1.9.1", "host-local"), "host-local binary (hack/install-cni-tools.sh)")
	flag.StringVar(&o.dir, "dir", "", "where stores and data dirs go (default: a new temp dir; must be a real disk for fsync to count)")
	flag.StringVar(&o.only, "only", "", "run only these, comma separated: \"allot\", \"host-local\", \"floor\"")
	flag.IntVar(&o.startup, "startup", 200, "also time this many VERSION execs per plugin (start-up cost alone); 0 skips")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds, each running every plugin in turn; the table shows medians")
	flag.BoolVar(&o.noSync, "nosync", false, "run allotd without fsync (store.noSync), to measure fsync's share")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "cnibench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.n <= 0 || o.workers <= 0 || o.rounds <= 0 {
		return errors.New("-n, -workers and -rounds must be positive")
	}
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "allot-cnibench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fs := fsType(dir); fs == "tmpfs" || fs == "ramfs" {
		fmt.Fprintf(os.Stderr, "cnibench: warning: %s is on %s, fsync costs nothing there; use -dir on a disk\n", dir, fs)
	}

	type contender struct {
		name string
		run  func() (*phaseResult, error)
		bin  *string
	}
	floorBin := ""
	var contenders []contender
	for _, c := range []contender{
		{"allot", func() (*phaseResult, error) { return runAllot(&o, dir) }, &o.allotCNI},
		{"host-local", func() (*phaseResult, error) { return runHostLocal(o, dir) }, &o.hostLocal},
		{"floor", func() (*phaseResult, error) { return runFloor(o, dir, &floorBin) }, &floorBin},
	} {
		if o.only == "" || slices.Contains(strings.Split(o.only, ","), c.name) {
			contenders = append(contenders, c)
		}
	}
	// Rounds alternate the contenders, so a burst of load elsewhere hits them alike.
	rounds := make([][]*phaseResult, len(contenders))
	for round := range o.rounds {
		for i, c := range contenders {
			fmt.Fprintf(os.Stderr, "cnibench: round %d/%d\n", round+1, o.rounds)
			r, err := c.run()
			if err != nil {
				return err
			}
			rounds[i] = append(rounds[i], r)
			// host-local leaves thousands of dirty files: written back later, they would
			// slow the fdatasyncs of whoever runs next. Flush them outside the timing.
			syscall.Sync()
		}
	}
	var startups []*phaseResult
	for i, c := range contenders {
		if o.startup <= 0 {
			break
		}
		so := o
		so.n = o.startup
		s, err := runPhase(so, *c.bin, "VERSION", nil)
		if err != nil {
			return fmt.Errorf("%s VERSION: %w", c.name, err)
		}
		s.plugin = rounds[i][0].plugin
		startups = append(startups, s)
	}
	printTable(o, dir, rounds, startups)
	return nil
}

// runAllot runs allot-cni against a fresh allotd, building both when no path is given.
func runAllot(o *options, dir string) (*phaseResult, error) {
	if err := buildIfEmpty(&o.allotCNI, dir, "./cmd/allot-cni"); err != nil {
		return nil, err
	}
	if err := buildIfEmpty(&o.allotd, dir, "./cmd/allotd"); err != nil {
		return nil, err
	}
	d, err := startDaemon(o.allotd, filepath.Join(dir, "allotd"), o.noSync)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	cpu0, commits0 := d.cpu(), d.commits()
	var addCommits commitStats
	r, err := benchPlugin(*o, "allot-cni", o.allotCNI, d.netconf(), func() { addCommits = d.commits().minus(commits0) })
	if err != nil {
		return nil, err
	}
	r.daemonCPU = d.cpu() - cpu0
	r.commits, r.delCommits = addCommits, d.commits().minus(commits0).minus(addCommits)
	return r, d.expectAllocations(0)
}

func runHostLocal(o options, dir string) (*phaseResult, error) {
	if _, err := os.Stat(o.hostLocal); err != nil {
		return nil, fmt.Errorf("host-local: %w (run hack/install-cni-tools.sh or pass -host-local)", err)
	}
	dataDir := filepath.Join(dir, "host-local")
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"bench","ipam":{"type":"host-local","dataDir":%q,`+
		`"ranges":[[{"subnet":"10.129.0.0/16"}],[{"subnet":"fd00:129::/64"}]]}}`, dataDir)
	return benchPlugin(o, "host-local v1.9.1", o.hostLocal, []byte(conf), nil)
}

// floorSource is the floor: what any exec'd IPAM plugin does at the least (read the
// configuration, print a dual-stack result), with nothing behind it.
const floorSource = `package main

import (
	"io"
	"os"
)

const result = ` + "`" + `{"cniVersion":"1.1.0","ips":[{"address":"10.130.0.2/16","gateway":"10.130.0.1"},` +
	`{"address":"fd00:130::2/64","gateway":"fd00:130::1"}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}],"dns":{}}` + "`" + `

func main() {
	if _, err := io.ReadAll(os.Stdin); err != nil {
		os.Exit(1)
	}
	if os.Getenv("CNI_COMMAND") == "ADD" {
		os.Stdout.WriteString(result)
	}
}
`

// runFloor builds the floor binary (static: CGO_ENABLED=0) in its own module, once, and
// runs it.
func runFloor(o options, dir string, bin *string) (*phaseResult, error) {
	if *bin == "" {
		if err := buildFloor(dir, bin); err != nil {
			return nil, err
		}
	}
	return benchPlugin(o, "floor (static Go, no work)", *bin, []byte(`{"cniVersion":"1.1.0","name":"bench","ipam":{"type":"floor"}}`), nil)
}

func buildFloor(dir string, bin *string) error {
	src := filepath.Join(dir, "floor")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module cnibench/floor\n\ngo 1.22\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(floorSource), 0o644); err != nil {
		return err
	}
	*bin = filepath.Join(dir, "bin", "floor")
	cmd := exec.Command("go", "build", "-o", *bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build floor: %v\n%s", err, b)
	}
	return nil
}

// phaseResult is one plugin's run: the ADD phase and the DEL phase.
type phaseResult struct {
	plugin   string
	total    time.Duration
	lat      []time.Duration // sorted
	cpu      time.Duration   // user+system time of all the plugin processes
	delTotal time.Duration
	delLat   []time.Duration
	delCPU   time.Duration
	// daemonCPU is allotd's user+system time over both phases (allot-cni only).
	daemonCPU time.Duration
	// commits and delCommits are allotd's store group commits in the ADD and the DEL
	// phase (allot-cni only).
	commits, delCommits commitStats
}

// benchPlugin runs the ADD phase, then between (if not nil), then the DEL phase.
func benchPlugin(o options, name, bin string, conf []byte, between func()) (*phaseResult, error) {
	fmt.Fprintf(os.Stderr, "cnibench: %s: %d ADDs with %d workers...\n", name, o.n, o.workers)
	add, err := runPhase(o, bin, "ADD", conf)
	if err != nil {
		return nil, fmt.Errorf("%s ADD: %w", name, err)
	}
	if between != nil {
		between()
	}
	fmt.Fprintf(os.Stderr, "cnibench: %s: %d DELs...\n", name, o.n)
	del, err := runPhase(o, bin, "DEL", conf)
	if err != nil {
		return nil, fmt.Errorf("%s DEL: %w", name, err)
	}
	return &phaseResult{plugin: name, total: add.total, lat: add.lat, cpu: add.cpu, delTotal: del.total, delLat: del.lat, delCPU: del.cpu}, nil
}

// runPhase execs the plugin n times with the command, spread over the workers, and fails on
// the first error.
func runPhase(o options, bin, command string, conf []byte) (*phaseResult, error) {
	var next atomic.Int64
	lat := make([]time.Duration, o.n)
	var cpu atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= o.n {
					return
				}
				d, c, err := execPlugin(bin, command, i, conf)
				cpu.Add(int64(c))
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("call %d: %w", i, err) })
					next.Store(int64(o.n))
					return
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	total := time.Since(start)
	if firstErr != nil {
		return nil, firstErr
	}
	slices.Sort(lat)
	return &phaseResult{total: total, lat: lat, cpu: time.Duration(cpu.Load())}, nil
}

// execPlugin runs one CNI call the way a runtime does (ipam only: no netns is needed, so
// CNI_NETNS names one that does not exist).
func execPlugin(bin, command string, i int, conf []byte) (wall, cpu time.Duration, err error) {
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"CNI_COMMAND=" + command,
		fmt.Sprintf("CNI_CONTAINERID=bench-%06d", i),
		"CNI_NETNS=/var/run/netns/cnibench-none",
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + filepath.Dir(bin),
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-%d;K8S_POD_UID=uid-%d", i, i),
	}
	cmd.Stdin = bytes.NewReader(conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	wall = time.Since(start)
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return 0, cpu, fmt.Errorf("%v: %s", err, strings.TrimSpace(out.String()))
	}
	if command == "ADD" && !bytes.Contains(out.Bytes(), []byte(`"ips"`)) {
		return 0, cpu, fmt.Errorf("ADD printed no addresses: %s", out.Bytes())
	}
	return wall, cpu, nil
}

func printTable(o options, dir string, rounds [][]*phaseResult, startups []*phaseResult) {
	fmt.Printf("\nCNI path: %d ADDs then %d DELs, %d workers, one exec of the plugin per call, dual stack (IPv4 + IPv6 per ADD)\n", o.n, o.n, o.workers)
	sync := "with fsync"
	if o.noSync {
		sync = "WITHOUT fsync (-nosync)"
	}
	fmt.Printf("stores and data dirs in %s (%s); allotd %s; CNI_ARGS as Kubernetes runtimes pass them\n", dir, fsType(dir), sync)
	if o.rounds > 1 {
		fmt.Printf("%d rounds, the plugins in turn: totals are medians, latencies over all rounds\n", o.rounds)
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "plugin\tADD total\tDEL total\ttotal\tADD/s\tADD p50\tADD p99\tDEL p50\tDEL p99\tplugin CPU/call\tallotd CPU/call\t")
	for _, rs := range rounds {
		r := merge(rs)
		calls := time.Duration(2 * o.n * len(rs))
		daemonCPU := "-"
		if r.daemonCPU > 0 {
			daemonCPU = round(r.daemonCPU / calls)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.plugin, round(r.total), round(r.delTotal), round(r.total+r.delTotal),
			float64(o.n)/r.total.Seconds(), round(pct(r.lat, 50)), round(pct(r.lat, 99)), round(pct(r.delLat, 50)), round(pct(r.delLat, 99)),
			round((r.cpu+r.delCPU)/calls), daemonCPU)
	}
	w.Flush()
	if len(startups) > 0 {
		fmt.Printf("\nstart-up alone: %d VERSION execs per plugin, %d workers\n", startups[0].n(), o.workers)
		w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "plugin\tp50\tp99\t")
		for _, r := range startups {
			fmt.Fprintf(w, "%s\t%s\t%s\t\n", r.plugin, round(pct(r.lat, 50)), round(pct(r.lat, 99)))
		}
		w.Flush()
	}
	for _, rs := range rounds {
		m := merge(rs)
		for i, c := range []commitStats{m.commits, m.delCommits} {
			if c.commits > 0 {
				fmt.Printf("%sallotd's store, %s phase: %.0f writes in %.0f group commits (%.1f writes per commit, one fdatasync each), %s per commit on average\n",
					map[bool]string{true: "\n"}[i == 0], []string{"ADD", "DEL"}[i], c.ops, c.commits, c.ops/c.commits, round(time.Duration(c.seconds/c.commits*float64(time.Second))))
			}
		}
	}
	printRatios(rounds)
}

// merge sums up one plugin's rounds: median totals, latencies of every call, CPU summed.
func merge(rs []*phaseResult) *phaseResult {
	m := &phaseResult{plugin: rs[0].plugin}
	var totals, delTotals []time.Duration
	for _, r := range rs {
		totals, delTotals = append(totals, r.total), append(delTotals, r.delTotal)
		m.lat, m.delLat = append(m.lat, r.lat...), append(m.delLat, r.delLat...)
		m.cpu, m.delCPU, m.daemonCPU = m.cpu+r.cpu, m.delCPU+r.delCPU, m.daemonCPU+r.daemonCPU
		m.commits, m.delCommits = m.commits.plus(r.commits), m.delCommits.plus(r.delCommits)
	}
	m.total, m.delTotal = median(totals), median(delTotals)
	slices.Sort(m.lat)
	slices.Sort(m.delLat)
	return m
}

func median[T cmp.Ordered](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// printRatios compares allot-cni with host-local and with the floor: each ratio is taken
// within a round (the plugins ran back to back), then the median over the rounds.
func printRatios(rounds [][]*phaseResult) {
	var a, h, f []*phaseResult
	for _, rs := range rounds {
		switch {
		case strings.HasPrefix(rs[0].plugin, "allot"):
			a = rs
		case strings.HasPrefix(rs[0].plugin, "host-local"):
			h = rs
		case strings.HasPrefix(rs[0].plugin, "floor"):
			f = rs
		}
	}
	if a == nil {
		return
	}
	// ratio is the median over the rounds of num(round)/den(round).
	ratio := func(num, den []*phaseResult, v func(*phaseResult) float64) float64 {
		var rs []float64
		for i := range num {
			rs = append(rs, v(num[i])/v(den[i]))
		}
		return median(rs)
	}
	total := func(r *phaseResult) float64 { return (r.total + r.delTotal).Seconds() }
	add := func(r *phaseResult) float64 { return r.total.Seconds() }
	del := func(r *phaseResult) float64 { return r.delTotal.Seconds() }
	p50 := func(r *phaseResult) float64 { return pct(r.lat, 50).Seconds() }
	p99 := func(r *phaseResult) float64 { return pct(r.lat, 99).Seconds() }
	fmt.Println()
	if h != nil {
		totalRatio, addRatio, p50Ratio := ratio(h, a, total), ratio(h, a, add), ratio(h, a, p50)
		fmt.Printf("ratio host-local/allot: total %.1fx, ADD phase %.1fx, DEL phase %.1fx, ADD p50 %.1fx, ADD p99 %.1fx\n",
			totalRatio, addRatio, ratio(h, a, del), p50Ratio, ratio(h, a, p99))
		fmt.Printf("targets: ADD phase >= 5x shorter: %s; total >= 5x shorter: %s; ADD p50 no worse: %s\n",
			verdict(addRatio >= 5), verdict(totalRatio >= 5), verdict(p50Ratio >= 1))
	}
	if f != nil {
		totalRatio, addRatio := ratio(a, f, total), ratio(a, f, add)
		fmt.Printf("ratio allot/floor: total %.2fx, ADD phase %.2fx, DEL phase %.2fx, ADD p50 %.2fx\n",
			totalRatio, addRatio, ratio(a, f, del), ratio(a, f, p50))
		fmt.Printf("target: ADD phase <= 2x the floor's: %s; total <= 2x: %s\n", verdict(addRatio <= 2), verdict(totalRatio <= 2))
	}
}

func (r *phaseResult) n() int { return len(r.lat) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[min(i, len(sorted)-1)]
}

func round(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(time.Microsecond).String()
}

func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case 0x01021994:
		return "tmpfs"
	case 0x858458f6:
		return "ramfs"
	case 0xef53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683e:
		return "btrfs"
	case 0x794c7630:
		return "overlayfs"
	}
	return fmt.Sprintf("fs 0x%x", st.Type)
}

// buildIfEmpty builds pkg of this module into dir when *path is empty.
func buildIfEmpty(path *string, dir, pkg string) error {
	if *path != "" {
		return nil
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return fmt.Errorf("run inside the allot module or pass the binary paths: go env GOMOD: %v", err)
	}
	*path = filepath.Join(dir, "bin", filepath.Base(pkg))
	fmt.Fprintf(os.Stderr, "cnibench: go build %s\n", pkg)
	cmd := exec.Command("go", "build", "-o", *path, pkg)
	cmd.Dir = filepath.Dir(mod)
	if pkg == "./cmd/allot-cni" {
		// As make build and the image build it: static.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// daemon is the allotd the allot-cni run talks to.
type daemon struct {
	dir    string
	socket string
	// metrics is allotd's HTTP address, for its store's group-commit counters.
	metrics string
	cmd     *exec.Cmd
	done    chan error
	client  *client.Client
	log     *os.File
}

func startDaemon(bin, dir string, noSync bool) (*daemon, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, socket: filepath.Join(dir, "allotd.sock"), metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	cfg := fmt.Sprintf(`socket: %s
store: {path: %s, noSync: %t}
http: {address: %q}
log: {level: warn, format: text}
pools:
  - {name: bench-v4, cidrs: ["10.128.0.0/16"], gateway: 10.128.0.1, routes: [{dst: 0.0.0.0/0}], default: true}
  - {name: bench-v6, cidrs: ["fd00:128::/64"], gateway: "fd00:128::1", routes: [{dst: "::/0"}], default: true}
`, d.socket, filepath.Join(dir, "allot.db"), noSync, d.metrics)
	cfgPath := filepath.Join(dir, "allotd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "allotd.log"))
	if err != nil {
		return nil, err
	}
	d.log = log
	d.cmd = exec.Command(bin, "--config", cfgPath)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	d.done = make(chan error, 1)
	go func() { d.done <- d.cmd.Wait() }()
	// Do not leave allotd behind on ^C.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		d.stop()
		os.Exit(130)
	}()
	d.client = client.New(d.socket)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-d.done:
			b, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("allotd exited: %v\n%s", err, b)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := d.client.Status(ctx)
		cancel()
		if err == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("allotd not ready after 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpu is allotd's user+system time so far, from /proc (0 if unreadable).
func (d *daemon) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name: state is the first, utime the 12th and
	// stime the 13th, in clock ticks (USER_HZ, 100 on Linux).
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func (d *daemon) netconf() []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"bench","ipam":{"type":"allot-cni","socket":%q}}`, d.socket))
}

// expectAllocations checks that the daemon holds n owners (a sanity check that the DELs
// really freed).
func (d *daemon) expectAllocations(n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := d.client.Allocations(ctx)
	if err != nil {
		return err
	}
	if len(a) != n {
		return fmt.Errorf("allotd holds %d allocations after the run, want %d", len(a), n)
	}
	return nil
}

func (d *daemon) stop() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	d.client.Close()
	d.log.Close()
}

// commitStats are allotd's store counters (core/daemon/storemetrics.go).
type commitStats struct{ commits, ops, seconds float64 }

func (a commitStats) minus(b commitStats) commitStats {
	return commitStats{a.commits - b.commits, a.ops - b.ops, a.seconds - b.seconds}
}

func (a commitStats) plus(b commitStats) commitStats {
	return commitStats{a.commits + b.commits, a.ops + b.ops, a.seconds + b.seconds}
}

// commits scrapes the store's counters from allotd's metrics (zero if unreadable: the
// table then leaves the line out).
func (d *daemon) commits() commitStats {
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	if err != nil {
		return commitStats{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return commitStats{}
	}
	var c commitStats
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "allot_store_commits_total":
			c.commits = v
		case "allot_store_operations_total":
			c.ops = v
		case "allot_store_commit_seconds_total":
			c.seconds = v
		}
	}
	return c
}

// freePort is a loopback TCP port free a moment ago, for allotd's metrics.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
