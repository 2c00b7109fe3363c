//go:build linux

package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api/client"
	"github.com/allot-ipam/allot/core/api/server"
	"github.com/allot-ipam/allot/internal/testenv"
)

// The peer tests run a client in a helper process under another uid: the test binary
// itself, re-executed with peerHelperEnv set, calls the API on the socket given in the
// environment and prints what it got.
const (
	peerHelperEnv = "ALLOT_TEST_PEER_HELPER" // framed, http, curl or hold
	peerSocketEnv = "ALLOT_TEST_PEER_SOCKET"
	nobody        = 65534
	// otherGID is a gid no account has: the helper gets it as a supplementary group.
	otherGID = 4242
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(peerHelperEnv); mode != "" {
		os.Exit(peerHelper(mode, os.Getenv(peerSocketEnv)))
	}
	os.Exit(m.Run())
}

// peerHelper prints "ok" after a successful call, else the error as the client reports it;
// curl prints the HTTP status and body as they came; hold connects and stays silent.
func peerHelper(mode, sock string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	switch mode {
	case "framed", "http":
		c := client.NewWithOptions(sock, client.Options{HTTP: mode == "http"})
		defer c.Close()
		_, err = c.Status(ctx)
	case "curl":
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
		var resp *http.Response
		if resp, err = hc.Get("http://allotd/v1/status"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Printf("%d %s", resp.StatusCode, body)
			return 0
		}
	case "hold":
		var c net.Conn
		if c, err = net.Dial("unix", sock); err == nil {
			fmt.Println("connected")
			time.Sleep(3 * time.Second) // sleep: a child process holding its connection open
			c.Close()
			return 0
		}
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Print(err)
		return 1
	}
	fmt.Print("ok")
	return 0
}

// peerRig is a server on a socket in a directory every uid may enter, and a copy of the
// test binary every uid may run (go test's own lies in a directory only root can enter).
type peerRig struct {
	sock, bin string
}

func newPeerRig(t *testing.T, a server.Access) *peerRig {
	t.Helper()
	dir, err := os.MkdirTemp("", "allot-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &peerRig{sock: filepath.Join(dir, "allotd.sock"), bin: filepath.Join(dir, "helper")}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	a.Log = quiet
	l, err := server.ListenAccess(r.sock, a)
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, l, &svc{})
	return r
}

// run runs the helper in mode as uid/gid nobody with the supplementary groups given.
func (r *peerRig) run(t *testing.T, mode string, groups ...uint32) (string, error) {
	t.Helper()
	cmd := r.cmd(mode, groups...)
	out, err := cmd.Output()
	return string(out), err
}

func (r *peerRig) cmd(mode string, groups ...uint32) *exec.Cmd {
	cmd := exec.Command(r.bin, "-test.run=^$")
	cmd.Env = []string{peerHelperEnv + "=" + mode, peerSocketEnv + "=" + r.sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: groups}}
	return cmd
}

// TestPeerRefused: a peer that is not root and not in the socket's group is refused with a
// message naming its uid, in both protocols, even when the socket file's mode would let it
// in (the check does not rely on the mode).
func TestPeerRefused(t *testing.T) {
	testenv.RequireRoot(t, "runs helper processes as uid 65534")
	for _, tc := range []struct {
		name   string
		access server.Access
		want   string
	}{
		{"no group", server.Access{}, "allotd: permission denied: uid 65534 is not root"},
		{"other group", server.Access{Group: &server.Group{ID: otherGID}}, "allotd: permission denied: uid 65534 is not root or in group 4242"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPeerRig(t, tc.access)
			if err := os.Chmod(r.sock, 0o666); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []string{"framed", "http"} {
				out, err := r.run(t, mode)
				if err == nil || out != tc.want {
					t.Errorf("%s client as uid %d: got %q (%v), want %q", mode, nobody, out, err, tc.want)
				}
			}
			out, err := r.run(t, "curl")
			want := `403 {"code":"permission_denied","message":"` + tc.want + `"}` + "\n"
			if err != nil || out != want {
				t.Errorf("plain HTTP as uid %d: got %q (%v), want %q", nobody, out, err, want)
			}
		})
	}
}

// TestPeerInGroup: with a socket group, the socket is 0660 and that group's members get in,
// whether it is their primary group or a supplementary one.
func TestPeerInGroup(t *testing.T) {
	testenv.RequireRoot(t, "runs helper processes as uid 65534")
	for _, tc := range []struct {
		name   string
		gid    uint32
		groups []uint32
	}{
		{"primary", nobody, nil},
		{"supplementary", otherGID, []uint32{otherGID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPeerRig(t, server.Access{Group: &server.Group{ID: tc.gid}})
			st, err := os.Stat(r.sock)
			if err != nil {
				t.Fatal(err)
			}
			if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o660 || sys.Gid != tc.gid || sys.Uid != 0 {
				t.Fatalf("socket: mode %v owner %d:%d, want 0660 0:%d", st.Mode().Perm(), sys.Uid, sys.Gid, tc.gid)
			}
			for _, mode := range []string{"framed", "http"} {
				if out, err := r.run(t, mode, tc.groups...); err != nil || out != "ok" {
					t.Errorf("%s client as uid %d, groups %v: got %q (%v)", mode, nobody, tc.groups, out, err)
				}
			}
		})
	}
}

// TestPeerRoot: root gets in, whatever the group.
func TestPeerRoot(t *testing.T) {
	testenv.RequireRoot(t, "runs helper processes as uid 65534")
	r := newPeerRig(t, server.Access{Group: &server.Group{ID: otherGID}})
	for _, o := range []client.Options{{}, {HTTP: true}} {
		c := client.NewWithOptions(r.sock, o)
		if _, err := c.Status(context.Background()); err != nil {
			t.Errorf("root, %+v: %v", o, err)
		}
		c.Close()
	}
}

// TestRefusalDoesNotBlockAccept: a refused peer that connects and sends nothing does not
// hold up the next connection.
func TestRefusalDoesNotBlockAccept(t *testing.T) {
	testenv.RequireRoot(t, "runs helper processes as uid 65534")
	r := newPeerRig(t, server.Access{})
	if err := os.Chmod(r.sock, 0o666); err != nil {
		t.Fatal(err)
	}
	cmd := r.cmd("hold")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != "connected" {
		t.Fatalf("helper: %q %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := client.New(r.sock)
	defer c.Close()
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("root while a refused peer stays silent: %v", err)
	}
}
