// Command testsummary reads `go test -json` and shows what plain `go test` shows (the output
// of failed tests and one line per package, like gotestsum's standard-quiet format), then a
// count of tests run, skipped and failed. make test runs every suite through it and ends with
// -report, one table for all of them:
//
//	go test -json ./... | testsummary [-save FILE]
//	testsummary [-save FILE] -- go test -json ./...
//	testsummary -report FILE...
//
// -save appends the events to FILE for -report. -report prints one line per package with
// its tests run, skipped and failed, every skipped test with its reason and every failure.
// Each form exits non-zero on a failure and, under CI=true or ALLOT_NO_SKIP=1, on a skip: a
// run that must cover everything cannot pass by skipping.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/internal/testenv"
)

func main() {
	save := flag.String("save", "", "append the events to this `file`")
	report := flag.Bool("report", false, "print the summary of the event files given as arguments")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go test -json ... | testsummary [-save file]\n       testsummary [-save file] -- go test -json ...\n       testsummary -report file...")
		flag.PrintDefaults()
	}
	flag.Parse()
	var err error
	if *report {
		err = runReport(os.Stdout, flag.Args())
	} else {
		err = runStream(os.Stdout, *save, flag.Args())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
}

// runStream shows the events of one go test run, from the command args when given, else
// from stdin, and saves them to save.
func runStream(w io.Writer, save string, args []string) error {
	var saved io.Writer = io.Discard
	if save != "" {
		if err := os.MkdirAll(filepath.Dir(save), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(save, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		saved = f
	}
	r := newRun(w)
	var cmdErr error
	if len(args) == 0 {
		if err := r.read(os.Stdin, saved); err != nil {
			return err
		}
	} else {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		readErr := r.read(out, saved)
		if cmdErr = cmd.Wait(); cmdErr != nil {
			cmdErr = fmt.Errorf("%s: %w", strings.Join(args, " "), cmdErr)
		}
		if readErr != nil {
			return readErr
		}
	}
	r.finish()
	fmt.Fprintf(w, "DONE %s\n", r.totals())
	if err := r.verdict(w, false); err != nil {
		return err
	}
	if cmdErr != nil && len(r.failed) == 0 {
		return cmdErr // a failure that left no event, e.g. go test's own usage error
	}
	return nil
}

// runReport prints the table of the saved runs in files.
func runReport(w io.Writer, files []string) error {
	if len(files) == 0 {
		return errors.New("-report needs event files")
	}
	r := newRun(nil)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = r.read(f, io.Discard)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	r.finish()
	r.table(w)
	return r.verdict(w, true)
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	ImportPath  string // build-output
	Test        string
	Output      string
	FailedBuild string
}

type pkgCount struct {
	run, skipped, failed int
	noTests, ended       bool
}

type skipped struct{ pkg, test, reason string }

// run follows one or more go test runs: counts, and when it has a writer, the output.
type run struct {
	w       io.Writer // nil: count only
	pkgs    map[string]*pkgCount
	out     map[string][]string // "pkg\x00test": output of a running test
	skipped []skipped
	failed  []string // "pkg Test", "pkg (build failed)", ...
}

func newRun(w io.Writer) *run {
	return &run{w: w, pkgs: map[string]*pkgCount{}, out: map[string][]string{}}
}

func (r *run) read(in io.Reader, saved io.Writer) error {
	br := bufio.NewReader(in)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var e event
			if bytes.HasPrefix(line, []byte("{")) && json.Unmarshal(line, &e) == nil && e.Action != "" {
				if _, err := saved.Write(line); err != nil {
					return err
				}
				r.event(e)
			} else {
				r.print(string(line)) // not an event: go test's own words
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (r *run) print(s string) {
	if r.w != nil {
		io.WriteString(r.w, s)
	}
}

func (r *run) pkg(name string) *pkgCount {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgCount{}
		r.pkgs[name] = p
	}
	return p
}

func (r *run) event(e event) {
	if e.Action == "build-output" {
		r.print(e.Output)
		return
	}
	if e.Package == "" {
		return
	}
	p := r.pkg(e.Package)
	if e.Test == "" {
		r.packageEvent(p, e)
		return
	}
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "output":
		r.out[key] = append(r.out[key], e.Output)
	case "pass":
		p.run++
	case "fail":
		p.run++
		// A test fails with its subtests: only the first failure down the tree counts.
		if n := len(r.failed); n == 0 || !strings.HasPrefix(r.failed[n-1], e.Package+" "+e.Test+"/") {
			p.failed++
			r.failed = append(r.failed, e.Package+" "+e.Test)
		}
		r.printTest(r.out[key])
	case "skip":
		p.skipped++
		r.skipped = append(r.skipped, skipped{e.Package, e.Test, skipReason(r.out[key])})
	}
	if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
		delete(r.out, key)
	}
}

func (r *run) packageEvent(p *pkgCount, e event) {
	switch e.Action {
	case "output":
		if strings.HasPrefix(e.Output, "FAIL") {
			r.unfinished(e.Package) // a timeout or a crash: show it before the verdict
		}
		if e.Output != "PASS\n" {
			r.print(e.Output)
		}
	case "pass":
		p.ended = true
	case "skip":
		p.ended, p.noTests = true, true
	case "fail":
		p.ended = true
		r.unfinished(e.Package)
		switch {
		case e.FailedBuild != "":
			r.failed = append(r.failed, e.Package+" (build failed)")
		case p.failed == 0:
			r.failed = append(r.failed, e.Package+" (failed outside any test: see its output)")
		}
	}
}

// unfinished shows the output of pkg's tests that never ended and counts them as failed.
func (r *run) unfinished(pkg string) {
	var keys []string
	for k := range r.out {
		if strings.HasPrefix(k, pkg+"\x00") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		test := strings.TrimPrefix(k, pkg+"\x00")
		r.pkg(pkg).failed++
		r.failed = append(r.failed, pkg+" "+test+" (did not finish)")
		r.printTest(r.out[k])
		delete(r.out, k)
	}
}

// printTest shows a failed test's output as go test without -v does.
func (r *run) printTest(lines []string) {
	for _, l := range lines {
		if !isProgress(l) {
			r.print(l)
		}
	}
}

func isProgress(l string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// logLine is the start of a t.Log line: "    file_test.go:12: ".
var logLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

// skipReason is the message of t.Skip: the last log line of the test and its continuation
// lines, as Skip logs its arguments last.
func skipReason(lines []string) string {
	start := -1
	for i, l := range lines {
		if logLine.MatchString(l) {
			start = i
		}
	}
	if start < 0 {
		return "(no reason given)"
	}
	var parts []string
	for _, l := range lines[start:] {
		if strings.HasPrefix(strings.TrimSpace(l), "--- SKIP") || isProgress(l) {
			break
		}
		parts = append(parts, strings.TrimSpace(l))
	}
	return strings.Join(parts, " ")
}

// finish counts packages that started but never ended, as when go test is killed.
func (r *run) finish() {
	for _, name := range r.names() {
		if !r.pkgs[name].ended {
			r.unfinished(name)
			r.failed = append(r.failed, name+" (did not finish)")
		}
	}
}

func (r *run) names() []string {
	names := make([]string, 0, len(r.pkgs))
	for n := range r.pkgs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (r *run) totals() string {
	var run, skip, noTests int
	for _, p := range r.pkgs {
		run += p.run
		skip += p.skipped
		if p.noTests {
			noTests++
		}
	}
	return fmt.Sprintf("%d packages (%d without tests): %d tests run, %d skipped, %d failed",
		len(r.pkgs), noTests, run, skip, len(r.failed))
}

// table prints one line per package with tests, the skips with their reasons, the failures
// and the totals.
func (r *run) table(w io.Writer) {
	names := r.names()
	prefix := commonDir(names)
	short := func(n string) string {
		if s := strings.TrimPrefix(n, prefix); s != "" {
			return s
		}
		return "."
	}
	width := len("PACKAGE")
	for _, n := range names {
		width = max(width, len(short(n)))
	}
	fmt.Fprintf(w, "\nSUMMARY of %s...\n%-*s %6s %6s %6s\n", prefix, width, "PACKAGE", "RUN", "SKIP", "FAIL")
	for _, n := range names {
		if p := r.pkgs[n]; !p.noTests {
			fmt.Fprintf(w, "%-*s %6d %6d %6d\n", width, short(n), p.run, p.skipped, p.failed)
		}
	}
	if len(r.skipped) > 0 {
		fmt.Fprintf(w, "SKIPPED (%d)\n", len(r.skipped))
		for _, s := range r.skipped {
			fmt.Fprintf(w, "  %s %s: %s\n", short(s.pkg), s.test, s.reason)
		}
	}
	if len(r.failed) > 0 {
		fmt.Fprintf(w, "FAILED (%d)\n", len(r.failed))
		for _, f := range r.failed {
			fmt.Fprintf(w, "  %s\n", strings.TrimPrefix(f, prefix))
		}
	}
	fmt.Fprintf(w, "TOTAL %s\n", r.totals())
}

// verdict is nil unless a test failed or, where every test must run, one skipped. Without
// the table it lists those skips itself.
func (r *run) verdict(w io.Writer, listed bool) error {
	if len(r.failed) > 0 {
		return fmt.Errorf("%d failed", len(r.failed))
	}
	if len(r.skipped) > 0 && testenv.Strict() {
		if !listed {
			for _, s := range r.skipped {
				fmt.Fprintf(w, "SKIP %s %s: %s\n", s.pkg, s.test, s.reason)
			}
		}
		return fmt.Errorf("%d tests skipped under CI or %s=1, where every test must run", len(r.skipped), testenv.NoSkipEnv)
	}
	return nil
}

// commonDir is the longest directory prefix ("a/b/") of all names that leaves each one a
// name of its own.
func commonDir(names []string) string {
	if len(names) == 0 {
		return ""
	}
	common := strings.Split(names[0], "/")
	for _, n := range names {
		parts := strings.Split(n, "/")
		common = common[:min(len(common), len(parts)-1)]
		for i := range common {
			if common[i] != parts[i] {
				common = common[:i]
				break
			}
		}
	}
	if len(common) == 0 {
		return ""
	}
	return strings.Join(common, "/") + "/"
}
