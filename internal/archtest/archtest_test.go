package archtest

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// The repository keeps its dependency rules.
func TestRepositoryKeepsTheRules(t *testing.T) {
	for _, m := range []struct {
		dir   string
		rules []Rule
	}{{"../..", RepoRules}, {"../../sdk", SDKRules}} {
		got, err := Check(context.Background(), m.dir, Root, m.rules)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 {
			t.Errorf("module %s breaks the dependency rules of ARCHITECTURE.md:\n%s", m.dir, strings.Join(got, "\n"))
		}
	}
}

// The checker fails a module that breaks each kind of rule: testdata/violating is a small
// module laid out like this one, with a core package depending on a plugin (directly and
// through another core package), a plugin importing core, and an sdk package importing
// core.
func TestCheckerFindsViolations(t *testing.T) {
	rules := append(slices.Clone(RepoRules), SDKRules...)
	got, err := Check(context.Background(), "testdata/violating", "example.com/violating/", rules)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"core depends on no plugin and no main: core/daemon imports plugins/policy",
		"core depends on no plugin and no main: core/operator imports plugins/policy",
		"plugins import the sdk, other plugins, internal/ and bpf, not core: plugins/policy imports core/store",
		"sdk imports nothing of the root module: sdk/policy imports core/store",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAllowedEdges(t *testing.T) {
	r := RepoRules[1]
	for _, tc := range []struct {
		from, to string
		denied   bool
	}{
		{"plugins/builtin", "core/registry", false},
		{"plugins/policy/static", "core/registry", true},
		{"plugins/cloud/awseni", "core/eni", false},
		{"plugins/cloud/awseni", "core/eninode", true}, // a prefix of a name is not its parent
		{"plugins/datapath/ebpf", "bpf", false},
	} {
		if got := r.denies(tc.from, tc.to); got != tc.denied {
			t.Errorf("%s -> %s: denied %v, want %v", tc.from, tc.to, got, tc.denied)
		}
	}
}
