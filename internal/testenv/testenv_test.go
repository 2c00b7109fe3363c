package testenv_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/internal/testenv"
)

// childEnv selects what TestChild requires when TestRule re-executes the test binary.
const childEnv = "ALLOT_TESTENV_CHILD"

// TestChild is a test with a requirement, run by TestRule in a child process. Run directly
// it has no requirement to check: returning instead of skipping keeps a strict run's
// summary free of skips.
func TestChild(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "missing":
		testenv.Need(t, false, "needs the moon")
	case "binary":
		testenv.RequireBinary(t, "allot-testenv-no-such-program", "nowhere")
	case "present":
		testenv.Need(t, true, "needs the ground")
	default:
		return
	}
	t.Log("ran")
}

// TestRule runs TestChild as `go test` would under each combination of CI, ALLOT_NO_SKIP
// and -short, and checks that a missing requirement skips only where a skip is allowed.
func TestRule(t *testing.T) {
	tests := []struct {
		name  string
		child string
		env   []string
		short bool
		want  string // "FAIL", "SKIP" or "PASS"
		msg   string // in the output
	}{
		{"CI fails", "missing", []string{"CI=true"}, false, "FAIL", "cannot run: needs the moon"},
		{"CI=1 fails", "missing", []string{"CI=1"}, false, "FAIL", "cannot run: needs the moon"},
		{"ALLOT_NO_SKIP fails", "missing", []string{"ALLOT_NO_SKIP=1"}, false, "FAIL", "cannot run: needs the moon"},
		{"CI binary fails", "binary", []string{"CI=true"}, false, "FAIL", "cannot run: needs allot-testenv-no-such-program on PATH (nowhere)"},
		{"CI -short skips", "missing", []string{"CI=true"}, true, "SKIP", "needs the moon"},
		{"ALLOT_NO_SKIP -short skips", "missing", []string{"ALLOT_NO_SKIP=1"}, true, "SKIP", "needs the moon"},
		{"locally skips", "missing", nil, false, "SKIP", "needs the moon"},
		{"CI=false skips", "missing", []string{"CI=false", "ALLOT_NO_SKIP=0"}, false, "SKIP", "needs the moon"},
		{"locally binary skips", "binary", nil, false, "SKIP", "needs allot-testenv-no-such-program on PATH"},
		{"CI present runs", "present", []string{"CI=true"}, false, "PASS", "ran"},
		{"-short present runs", "present", nil, true, "PASS", "ran"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"-test.run=^TestChild$", "-test.v", "-test.count=1"}
			if tt.short {
				args = append(args, "-test.short")
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(withoutStrictEnv(os.Environ()), append(tt.env, childEnv+"="+tt.child)...)
			out, err := cmd.CombinedOutput()
			if got := tt.want == "FAIL"; got != (err != nil) {
				t.Fatalf("exit error %v, want failure %v; output:\n%s", err, got, out)
			}
			if !strings.Contains(string(out), "--- "+tt.want+": TestChild") {
				t.Errorf("want --- %s: TestChild in output:\n%s", tt.want, out)
			}
			if !strings.Contains(string(out), tt.msg) {
				t.Errorf("want %q in output:\n%s", tt.msg, out)
			}
		})
	}
}

// withoutStrictEnv drops the variables that select the rule, which the parent (run by
// make test or CI) has set itself.
func withoutStrictEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, testenv.NoSkipEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}
