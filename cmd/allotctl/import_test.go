package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestImportLocal maps the importers' test data without a cluster (--local): the allot
// objects on stdout, the warnings on stderr.
func TestImportLocal(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRoot(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"import", "--local", "-f", "../../core/importer/testdata"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: IPPool\nmetadata:\n  name: mars", "kind: AllotNode\nmetadata:\n  name: worker-1",
		"name: v4-172.18.41.10", "kind: ClusterCIDRConfig\nmetadata:\n  name: racks-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if w := errOut.String(); strings.Count(w, "warning: ") != 2 || !strings.Contains(w, "warning: Node legacy-node: spec.podCIDRs[0]") {
		t.Errorf("warnings:\n%s", w)
	}
}

func TestImportFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "--local"}, "--local: needs -f"},
		{[]string{"import", "--local", "--dry-run", "-f", "x"}, "--local and --dry-run"},
		{[]string{"import", "--local", "-f", "does-not-exist.yaml"}, "-f does-not-exist.yaml:"},
	} {
		var out bytes.Buffer
		root := newRoot(&out)
		root.SetArgs(tc.args)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
