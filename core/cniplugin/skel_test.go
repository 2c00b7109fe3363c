package cniplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// TestMain lets the test binary act as allot-cni (Plugin.Main) when re-exec'd with
// ALLOT_CNI_TEST_AS_PLUGIN=1, so the protocol's parts (environment, version checks, error
// printing) are tested without building the real binary.
func TestMain(m *testing.M) {
	switch os.Getenv("ALLOT_CNI_TEST_AS_PLUGIN") {
	case "1":
		p := &Plugin{}
		p.Main(About("test"))
		os.Exit(0)
	case "skel":
		// The library's dispatcher around the same functions, for TestMainMatchesSkel.
		p := &Plugin{}
		adapt := func(f func(*CmdArgs) error) func(*skel.CmdArgs) error {
			return func(a *skel.CmdArgs) error {
				return f(&CmdArgs{ContainerID: a.ContainerID, Netns: a.Netns, IfName: a.IfName, Args: a.Args, Path: a.Path, NetnsOverride: a.NetnsOverride, StdinData: a.StdinData})
			}
		}
		funcs := skel.CNIFuncs{Add: adapt(p.Add), Del: adapt(p.Del), Check: adapt(p.Check), GC: adapt(p.GC), Status: adapt(p.Status)}
		skel.PluginMainFuncs(funcs, version.PluginSupports(SupportedVersions...), About("test"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// execPlugin runs the test binary as the plugin with CNI environment env and stdin.
func execPlugin(t *testing.T, env map[string]string, stdin []byte) (stdout []byte, exitErr error) {
	t.Helper()
	out, stderr, err := execAs(t, "1", env, stdin)
	if len(stderr) > 0 && err == nil {
		t.Logf("stderr: %s", stderr)
	}
	return out, err
}

// execAs runs the test binary as the plugin: as allot-cni ("1") or through the library's
// skel ("skel").
func execAs(t *testing.T, as string, env map[string]string, stdin []byte) (stdout, stderr []byte, exitErr error) {
	t.Helper()
	c := exec.Command(os.Args[0])
	c.Env = []string{"ALLOT_CNI_TEST_AS_PLUGIN=" + as}
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	c.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	return out.Bytes(), errOut.Bytes(), err
}

func cniEnv(command string) map[string]string {
	return map[string]string{
		"CNI_COMMAND": command, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/nonexistent",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin",
		"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u",
	}
}

func TestSkelMain(t *testing.T) {
	if testing.Short() {
		t.Skip("short: re-execs the test binary")
	}
	r := newRig(t)
	good := r.netconf("")
	tests := []struct {
		name  string
		env   map[string]string
		stdin []byte
		code  uint   // 0: success
		msg   string // in stdout
	}{
		{name: "add", env: cniEnv("ADD"), stdin: good, msg: `"address": "192.0.2.2/29"`},
		{name: "del", env: cniEnv("DEL"), stdin: good},
		// No cniVersion: 0.1.0, whose result has "ip4" instead of "ips".
		{name: "add without cniVersion", env: cniEnv("ADD"), stdin: bytes.Replace(good, []byte(`"cniVersion":"1.1.0",`), nil, 1), msg: `"ip4": {`},
		{name: "del without cniVersion", env: cniEnv("DEL"), stdin: bytes.Replace(good, []byte(`"cniVersion":"1.1.0",`), nil, 1)},
		{name: "status", env: cniEnv("STATUS"), stdin: good},
		{name: "gc", env: cniEnv("GC"), stdin: r.netconf("", `"cni.dev/valid-attachments":[]`)},
		{name: "version", env: map[string]string{"CNI_COMMAND": "VERSION"}, msg: `"supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]`},
		{name: "unknown cniVersion", env: cniEnv("ADD"), stdin: bytes.Replace(good, []byte(`"1.1.0"`), []byte(`"7.0.0"`), 1), code: types.ErrIncompatibleCNIVersion, msg: "incompatible CNI versions"},
		{name: "GC needs 1.1.0", env: cniEnv("GC"), stdin: bytes.Replace(good, []byte(`"1.1.0"`), []byte(`"1.0.0"`), 1), code: types.ErrIncompatibleCNIVersion, msg: "config version does not allow GC"},
		{name: "malformed stdin", env: cniEnv("ADD"), stdin: []byte(`{"cniVersion":`), code: types.ErrDecodingFailure, msg: "error unmarshall network config"},
		{name: "missing name", env: cniEnv("ADD"), stdin: []byte(`{"cniVersion":"1.1.0","ipam":{}}`), code: types.ErrInvalidNetworkConfig, msg: "missing network name"},
		{name: "missing ipam", env: cniEnv("ADD"), stdin: conf(""), code: types.ErrInvalidNetworkConfig, msg: "ipam: missing"},
		{name: "missing env", env: map[string]string{"CNI_COMMAND": "ADD", "CNI_PATH": "/x"}, stdin: good, code: types.ErrInvalidEnvironmentVariables, msg: "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME] missing"},
		{name: "bad CNI_ARGS", env: func() map[string]string { e := cniEnv("ADD"); e["CNI_ARGS"] = "K8S_POD_NAME=p;X=1"; return e }(), stdin: good, code: types.ErrInvalidEnvironmentVariables, msg: `CNI_ARGS: unknown key \"X\"`},
		{name: "daemon down", env: cniEnv("ADD"), stdin: conf(`{"socket":"/nonexistent/a.sock"}`), code: types.ErrTryAgainLater, msg: "allotd is not reachable at /nonexistent/a.sock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := execPlugin(t, tt.env, tt.stdin)
			if tt.code == 0 {
				if err != nil {
					t.Fatalf("exit %v, stdout %s", err, out)
				}
			} else {
				if err == nil {
					t.Fatalf("succeeded, want code %d; stdout %s", tt.code, out)
				}
				var e types.Error
				if jerr := json.Unmarshal(out, &e); jerr != nil {
					t.Fatalf("stdout is not a CNI error: %s", out)
				}
				if e.Code != tt.code {
					t.Fatalf("code %d, want %d: %s", e.Code, tt.code, out)
				}
			}
			if !strings.Contains(string(out), tt.msg) {
				t.Fatalf("stdout %s does not contain %s", out, tt.msg)
			}
		})
	}
	if n := len(r.svc.allocs); n != 0 {
		t.Fatalf("%d allocations left", n)
	}
	if fmt.Sprint(r.svc.lastAlloc.Pod) != "{ns p u}" {
		t.Fatalf("pod %+v", r.svc.lastAlloc.Pod)
	}
}

// TestMainMatchesSkel runs Plugin.Main and the library's skel around the same functions
// on the protocol's edge cases: same stdout, stderr and exit status.
func TestMainMatchesSkel(t *testing.T) {
	if testing.Short() {
		t.Skip("short: re-execs the test binary")
	}
	down := conf(`{"socket":"/nonexistent/a.sock"}`) // every call fails alike, after dispatch
	withVersion := func(v string) []byte { return bytes.Replace(down, []byte(`"1.1.0"`), []byte(v), 1) }
	env := func(cmd string, kv ...string) map[string]string {
		e := cniEnv(cmd)
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(e, kv[i])
			} else {
				e[kv[i]] = kv[i+1]
			}
		}
		return e
	}
	here, err := os.Readlink("/proc/self/ns/net")
	if err != nil || here == "" {
		t.Fatalf("own netns: %v", err)
	}
	tests := []struct {
		name  string
		env   map[string]string
		stdin []byte
	}{
		{"add", env("ADD"), down},
		{"del", env("DEL"), down},
		{"del without netns", env("DEL", "CNI_NETNS", ""), down},
		{"check", env("CHECK"), down},
		{"check 0.3.1", env("CHECK"), withVersion(`"0.3.1"`)},
		{"check 2.0.0", env("CHECK"), withVersion(`"2.0.0"`)},
		{"gc 1.0.0", env("GC"), withVersion(`"1.0.0"`)},
		{"status", env("STATUS"), down},
		{"status 0.4.0", env("STATUS"), withVersion(`"0.4.0"`)},
		{"gc bad version", env("GC"), withVersion(`"1.x"`)},
		{"add 7.0.0", env("ADD"), withVersion(`"7.0.0"`)},
		{"add version not a string", env("ADD"), withVersion(`1`)},
		{"version", map[string]string{"CNI_COMMAND": "VERSION"}, nil},
		{"about", map[string]string{}, nil},
		{"unknown command", env("FROB"), down},
		{"missing env", map[string]string{"CNI_COMMAND": "ADD"}, down},
		{"missing path on GC", env("GC", "CNI_PATH", ""), down},
		{"bad container id", env("ADD", "CNI_CONTAINERID", "-x"), down},
		{"bad container id char", env("ADD", "CNI_CONTAINERID", "a/b"), down},
		{"long ifname", env("ADD", "CNI_IFNAME", "eth0123456789012"), down},
		{"dot ifname", env("DEL", "CNI_IFNAME", ".."), down},
		{"ifname with colon", env("ADD", "CNI_IFNAME", "eth0:1"), down},
		{"malformed stdin", env("ADD"), []byte(`{"cniVersion":`)},
		{"missing name", env("ADD"), []byte(`{"cniVersion":"1.1.0","ipam":{}}`)},
		{"bad name", env("ADD"), bytes.Replace(down, []byte(`"name":"net1"`), []byte(`"name":"a b"`), 1)},
		{"own netns", env("ADD", "CNI_NETNS", "/proc/self/ns/net"), down},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := execAs(t, "1", tt.env, tt.stdin)
			sout, serrOut, serr := execAs(t, "skel", tt.env, tt.stdin)
			if string(out) != string(sout) || string(errOut) != string(serrOut) || (err == nil) != (serr == nil) {
				t.Fatalf("Main: exit %v, stdout %s, stderr %s\nskel: exit %v, stdout %s, stderr %s", err, out, errOut, serr, sout, serrOut)
			}
		})
	}
}

// TestStartupDeps guards allot-cni's start-up cost: net/http (and crypto/tls behind it) adds
// about 2 ms to every exec, the protobuf runtime (core/api/frame's generated codec, which
// builds its descriptors at start-up) about 0.5 ms, the CNI library's skel (with its
// version package, a regexp compiled at start-up and netlink's netns) about 0.2 ms, so
// nothing in allot-cni may import them.
func TestStartupDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("short: runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`,
		"github.com/allot-ipam/allot/cmd/allot-cni").Output()
	if err != nil {
		t.Fatalf("go list -deps allot-cni: %v", err)
	}
	banned := []string{"net/http", "google.golang.org/protobuf", "github.com/allot-ipam/allot/core/api/frame",
		"github.com/containernetworking/cni/pkg/skel", "github.com/containernetworking/cni/pkg/version"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "vendor/") {
			continue
		}
		for _, imp := range fields[1:] {
			for _, b := range banned {
				if (imp == b || strings.HasPrefix(imp, b+"/")) && !isBanned(fields[0], banned) {
					t.Errorf("%s imports %s into allot-cni", fields[0], imp)
				}
			}
		}
	}
}

// isBanned: a banned package's own imports are reported at the package that brought it in.
func isBanned(pkg string, banned []string) bool {
	for _, b := range banned {
		if pkg == b || strings.HasPrefix(pkg, b+"/") {
			return true
		}
	}
	return false
}
