package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/daemon"
	"github.com/allot-ipam/allot/plugins/builtin"
)

// startStandalone runs a standalone allotd with pool "small" (a /30: two addresses, the
// default) and pool "blue" (a /24), and returns its socket.
func startStandalone(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	c := config.Defaults()
	c.Socket = filepath.Join(dir, "allotd.sock")
	c.Store.Path = filepath.Join(dir, "allot.db")
	c.Store.NoSync = true
	c.HTTP.Address = "127.0.0.1:0"
	c.Datapath.Type = "none"
	c.Pools = []config.Pool{
		{Name: "blue", CIDRs: []string{"10.9.1.0/24"}},
		{Name: "small", CIDRs: []string{"10.9.0.0/30"}, Default: true},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, &c, builtin.Registry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c.Socket
}

// allotctl runs the command against socket; its output comes back with every run of white
// space made one space, so that tests do not depend on column widths.
func allotctl(t *testing.T, socket string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRoot(&out)
	root.SetArgs(append([]string{"--socket", socket}, args...))
	err := root.Execute()
	if len(args) > 0 && args[0] == "-o" {
		return out.String(), err
	}
	return squash(out.String()), err
}

func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

func add(t *testing.T, c *client.Client, pod, cid string, pools ...string) (*api.Allocation, error) {
	t.Helper()
	return c.Allocate(context.Background(), &api.AllocateRequest{Owner: api.Owner{ContainerID: cid, IfName: "eth0"},
		Network: "allot", Pod: api.PodRef{Namespace: "web", Name: pod}, Pools: pools})
}

// TestExplainStandalone: allotd in standalone mode, over its real socket, explains a pod that
// got an address (chain, verdicts, block), pods that failed (pool exhausted, pool that does
// not exist), and a dry run that names the address the next ADD then gets, having taken nothing.
func TestExplainStandalone(t *testing.T) {
	socket := startStandalone(t)
	c := client.New(socket)
	defer c.Close()
	if _, err := add(t, c, "a", "c-a"); err != nil {
		t.Fatal(err)
	}
	out, err := allotctl(t, socket, "explain", "pod", "web/a")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pod web/a, interface eth0", `Got 10.9.0.1/30 from pool "small" block 10.9.0.0/30`,
		"1. static", "Decided", "small ipv4 taken allocator 2/2", "blue ipv4 rejected static 254/254 NoMatch: not a default pool, and the CNI config (ipam.pools) names none"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain pod web/a: no %q in\n%s", want, out)
		}
	}

	// Dry run: the next address, nothing taken.
	manifest := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: d\n  namespace: web\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = allotctl(t, socket, "explain", "--dry-run", "-f", manifest)
	if err != nil || !strings.Contains(out, "Dry run (nothing taken or written): pod web/d") || !strings.Contains(out, "Would get 10.9.0.2/30") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if allocs, _ := c.Allocations(context.Background()); len(allocs) != 1 {
		t.Fatalf("the dry run took something: %d allocations", len(allocs))
	}
	if a, err := add(t, c, "b", "c-b"); err != nil || a.IPs[0].Address != "10.9.0.2/30" {
		t.Fatalf("the ADD after the dry run got %v, %v; the dry run said 10.9.0.2/30", a, err)
	}

	// Exhausted: the /30 has no third address.
	if _, err := add(t, c, "full", "c-full"); err == nil {
		t.Fatal("a third ADD from a /30 succeeded")
	}
	out, err = allotctl(t, socket, "explain", "pod", "web/full")
	if err != nil || !strings.Contains(out, "Failed (exhausted)") || !strings.Contains(out, "small ipv4 exhausted allocator 0/2 all 2 usable addresses in use") {
		t.Fatalf("explain exhausted: %v\n%s", err, out)
	}
	out, err = allotctl(t, socket, "explain", "--dry-run", "-f", manifest)
	if err != nil || !strings.Contains(out, "Would fail (exhausted)") {
		t.Fatalf("dry run on a full pool: %v\n%s", err, out)
	}

	// No pool matches: the CNI config names a pool that does not exist.
	if _, err := add(t, c, "lost", "c-lost", "green"); err == nil {
		t.Fatal("an ADD naming pool green succeeded")
	}
	out, err = allotctl(t, socket, "-o", "json", "explain", "pod", "web/lost")
	if err != nil {
		t.Fatal(err)
	}
	var resp api.ExplainResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatal(err)
	}
	e := resp.Explanations[0]
	if e.Error == nil || e.Error.Code != api.CodeNoPool || len(e.Policies) != 1 || e.Policies[0].Code != "NoFit" ||
		e.Policies[0].Cause != "NoMatch" || !strings.Contains(e.Policies[0].Reason, `"green", which does not exist`) {
		t.Fatalf("explain web/lost: %+v", e)
	}

	// A pod this node never served.
	if _, err := allotctl(t, socket, "explain", "pod", "web/never", "--kubeconfig", filepath.Join(t.TempDir(), "none")); err == nil ||
		!strings.Contains(err.Error(), "no ADD of pod web/never recorded") {
		t.Fatalf("explain of an unknown pod: %v", err)
	}
}
