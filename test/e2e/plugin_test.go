package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// k8sArgs is what Kubernetes runtimes put in CNI_ARGS.
const k8sArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=e2e;K8S_POD_NAME=pod;K8S_POD_UID=uid-1"

// cniCall is one exec of the allot-cni binary, as a runtime or a main plugin makes it.
type cniCall struct {
	Command     string
	ContainerID string
	IfName      string // default eth0
	Netns       string // default a path that does not exist (ipam only)
	Args        string
	Stdin       []byte
	// Env replaces the CNI environment entirely when set (bad-environment tests).
	Env []string
}

// cniOut is what the plugin answered.
type cniOut struct {
	Stdout []byte
	Result *current.Result // ADD success
	Err    *types.Error    // failure: the CNI error JSON on stdout
}

// execCNI runs allot-cni. A failure must come with a CNI error on stdout; anything else
// fails the test.
func execCNI(t testing.TB, c cniCall) cniOut {
	t.Helper()
	out, err := execCNIRaw(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func execCNIRaw(c cniCall) (cniOut, error) {
	cmd := exec.Command(env.allotCNI)
	if c.Env != nil {
		cmd.Env = c.Env
	} else {
		if c.IfName == "" {
			c.IfName = "eth0"
		}
		if c.Netns == "" {
			c.Netns = "/run/netns/allot-e2e-none"
		}
		cmd.Env = []string{
			"CNI_COMMAND=" + c.Command, "CNI_CONTAINERID=" + c.ContainerID, "CNI_NETNS=" + c.Netns,
			"CNI_IFNAME=" + c.IfName, "CNI_ARGS=" + c.Args, "CNI_PATH=" + env.cniPath,
		}
	}
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	out := cniOut{Stdout: stdout.Bytes()}
	var exitErr *exec.ExitError
	switch {
	case runErr == nil:
		if c.Command == "ADD" {
			r, err := current.NewResult(out.Stdout)
			if err != nil {
				return out, errors.New("ADD printed no result: " + err.Error() + ": " + string(out.Stdout))
			}
			out.Result = r.(*current.Result)
		}
	case errors.As(runErr, &exitErr):
		var e types.Error
		if err := json.Unmarshal(out.Stdout, &e); err != nil || e.Msg == "" {
			return out, errors.New("allot-cni failed without a CNI error on stdout: " + runErr.Error() +
				"\nstdout: " + string(out.Stdout) + "\nstderr: " + stderr.String())
		}
		out.Err = &e
	default:
		return out, runErr
	}
	return out, nil
}

// wantCode fails unless out is a CNI error with code and a message containing msg.
func wantCode(t testing.TB, out cniOut, code uint, msg string) {
	t.Helper()
	if out.Err == nil {
		t.Fatalf("succeeded, want CNI error %d; stdout %s", code, out.Stdout)
	}
	if out.Err.Code != code || !strings.Contains(out.Err.Msg, msg) {
		t.Fatalf("CNI error %d %q, want %d containing %q", out.Err.Code, out.Err.Msg, code, msg)
	}
}

// wantOK fails unless the call succeeded.
func wantOK(t testing.TB, out cniOut) {
	t.Helper()
	if out.Err != nil {
		t.Fatalf("CNI error %d: %s", out.Err.Code, out.Err.Error())
	}
}

func resultAddrs(r *current.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		out = append(out, ip.Address.String())
	}
	return sortStrings(out)
}

func sortStrings(s []string) []string {
	sort.Strings(s)
	return s
}
