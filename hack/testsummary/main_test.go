package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/run.jsonl is go test -json of four packages: a (a pass, a failure with output,
// a skip, subtests passing, failing and skipping), b (a test killed by -timeout), c (a
// build failure) and d (no test files).

func TestStreamShowsWhatGoTestShows(t *testing.T) {
	f, err := os.Open("testdata/run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out, saved bytes.Buffer
	r := newRun(&out)
	if err := r.read(f, &saved); err != nil {
		t.Fatal(err)
	}
	r.finish()
	got := out.String()
	for _, want := range []string{
		"c/c_test.go:5:33: undefined: undefined\n",
		"printed\n    a_test.go:6: before\n    a_test.go:6: boom\n        second line\n--- FAIL: TestFail (0.00s)\n",
		"    a_test.go:10: sub failed\n--- FAIL: TestSub/bad (0.00s)\n--- FAIL: TestSub (0.00s)\n",
		"FAIL\ttsdemo/a\t0.056s\n",
		"?   \ttsdemo/d\t[no test files]\n",
		"    b_test.go:6: hanging\npanic: test timed out after 3s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"=== RUN", "--- PASS", "--- SKIP", "needs the moon", "quiet"} {
		if strings.Contains(got, not) {
			t.Errorf("output has %q:\n%s", not, got)
		}
	}
	if i, j := strings.Index(got, "panic: test timed out"), strings.Index(got, "FAIL\ttsdemo/b"); i > j {
		t.Errorf("the hung test's output comes after its package's verdict:\n%s", got)
	}
	in, _ := os.ReadFile("testdata/run.jsonl")
	if !bytes.Equal(saved.Bytes(), in) {
		t.Errorf("saved events differ from the input")
	}
}

func TestReport(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("ALLOT_NO_SKIP", "")
	var out bytes.Buffer
	err := runReport(&out, []string{"testdata/run.jsonl"})
	if err == nil || err.Error() != "4 failed" {
		t.Errorf("runReport = %v, want 4 failed", err)
	}
	want := `
SUMMARY of tsdemo/...
PACKAGE    RUN   SKIP   FAIL
a            5      2      2
b            1      0      1
c            0      0      0
SKIPPED (2)
  a TestSkip: a_test.go:7: needs the moon
  a TestSub/skip: a_test.go:11: sub skipped
FAILED (4)
  a TestFail
  a TestSub/bad
  c (build failed)
  b TestHang (did not finish)
TOTAL 4 packages (1 without tests): 6 tests run, 2 skipped, 4 failed
`
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}

// A skip fails the run only where every test must run.
func TestSkipFailsWhenStrict(t *testing.T) {
	events := `{"Action":"start","Package":"m/p"}
{"Action":"run","Package":"m/p","Test":"TestRoot"}
{"Action":"output","Package":"m/p","Test":"TestRoot","Output":"=== RUN   TestRoot\n"}
{"Action":"output","Package":"m/p","Test":"TestRoot","Output":"    p_test.go:9: needs root: creates namespaces\n"}
{"Action":"output","Package":"m/p","Test":"TestRoot","Output":"--- SKIP: TestRoot (0.00s)\n"}
{"Action":"skip","Package":"m/p","Test":"TestRoot"}
{"Action":"run","Package":"m/p","Test":"TestOK"}
{"Action":"pass","Package":"m/p","Test":"TestOK"}
{"Action":"output","Package":"m/p","Output":"ok  \tm/p\t0.1s\n"}
{"Action":"pass","Package":"m/p"}
`
	file := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(file, []byte(events), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		ci, noSkip string
		fail       bool
	}{{"", "", false}, {"true", "", true}, {"", "1", true}, {"false", "0", false}} {
		t.Setenv("CI", tt.ci)
		t.Setenv("ALLOT_NO_SKIP", tt.noSkip)
		var out bytes.Buffer
		err := runReport(&out, []string{file})
		if (err != nil) != tt.fail {
			t.Errorf("CI=%q ALLOT_NO_SKIP=%q: runReport = %v, want failure %v", tt.ci, tt.noSkip, err, tt.fail)
		}
		if !strings.Contains(out.String(), "  p TestRoot: p_test.go:9: needs root: creates namespaces\n") {
			t.Errorf("report lacks the skip and its reason:\n%s", out.String())
		}
	}
}

func TestCommonDir(t *testing.T) {
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"a/b/c"}, "a/b/"},
		{[]string{"m/x/core/a", "m/x/core/b", "m/x/sdk/c"}, "m/x/"},
		{[]string{"m/x", "m/x/core"}, "m/"},
		{[]string{"a/b", "c/d"}, ""},
	} {
		if got := commonDir(tt.names); got != tt.want {
			t.Errorf("commonDir(%q) = %q, want %q", tt.names, got, tt.want)
		}
	}
}
