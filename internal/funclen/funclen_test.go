package funclen

import (
	"maps"
	"slices"
	"testing"
)

func TestLonger(t *testing.T) {
	got, err := Longer("testdata/src", Max)
	if err != nil {
		t.Fatal(err)
	}
	want := []Func{
		{File: "a.go", Line: 8, Name: "Sixty", Lines: 61},
		{File: "a.go", Line: 73, Name: "T.M", Lines: 62},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Longer = %v, want %v (test files skipped)", got, want)
	}
}

// allowed are the functions under core/ still over Max lines, each waiting for the
// change that splits it. The list only shrinks: TestCoreFunctionLength fails for a long
// function not in it, and names the entries no longer long so that they are removed (it
// does not fail for those: a split must not break the build of a parallel change).
var allowed = map[string]string{}

// TestCoreFunctionLength keeps every non-test function under core/ at most Max lines.
func TestCoreFunctionLength(t *testing.T) {
	long, err := Longer("../../core", Max)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range long {
		seen[f.Key()] = true
		if _, ok := allowed[f.Key()]; !ok {
			t.Errorf("core/%s: split it into named steps, each one idea", f)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(allowed)) {
		if !seen[k] {
			t.Logf("core/%s is no longer over %d lines (or is gone): remove it from allowed", k, Max)
		}
	}
}
