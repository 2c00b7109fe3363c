package main

import (
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/enihost/enihosttest"
	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// TestAcceptRACommand: the flags as the DaemonSet's init container passes them, on a copy of
// the sysctl tree (the host's is left alone; core/enihost tests the real one in namespaces).
func TestAcceptRACommand(t *testing.T) {
	procSys := t.TempDir()
	p := filepath.Join(procSys, "net", "ipv6", "conf", "lo", "accept_ra")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) error {
		cmd := newAcceptRACommand()
		cmd.SetArgs(args)
		cmd.SetOut(new(strings.Builder))
		cmd.SetErr(new(strings.Builder))
		return cmd.Execute()
	}
	for range 2 {
		if err := run("--interface", "lo", "--proc-sys", procSys); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != "2" {
			t.Fatalf("accept_ra %q %v, want 2", b, err)
		}
	}
	if err := run("--interface", "allot-none0", "--proc-sys", procSys); err == nil || !strings.Contains(err.Error(), "net.ipv6.conf.allot-none0.accept_ra: interface allot-none0") {
		t.Fatalf("unknown interface: %v", err)
	}
}

// TestAcceptRACommandFindsThePrimaryByIMDS: in a node namespace whose IPv4 default route
// leaves through ens6 (a VPN, a second default), the command finds the primary ENI, ens5, by
// the instance's primary MAC that the fake IMDS serves over HTTP, and sets only its
// accept_ra; with IMDS unreachable it falls back to the default route's link and says so.
func TestAcceptRACommandFindsThePrimaryByIMDS(t *testing.T) {
	fake, inst := ec2fake.NewInstance(t)
	primary, _ := net.ParseMAC(fake.InstanceENIs(inst)[0].MAC)
	n := enihosttest.NewMACNode(t, primary)
	imds := ec2fake.StartIMDS(t, fake.IMDS(inst))
	closed := httptest.NewServer(nil)
	closed.Close()
	for _, c := range []struct {
		endpoint, set, left, log string
	}{
		{imds, "ens5", "ens6", `msg="primary interface found" command=accept-ra interface=ens5 by="primary MAC ` + primary.String() + ` from instance metadata"`},
		{closed.URL, "ens6", "ens5", `level=WARN msg="primary MAC unknown: taking the default route's link for the primary interface" command=accept-ra from="instance metadata" err="aws-eni: instance metadata service unreachable: meta-data/mac: `},
	} {
		n.SetSysctl("ens5", "accept_ra", "1")
		n.SetSysctl("ens6", "accept_ra", "1")
		var logs strings.Builder
		err := topo.In(n.NS, func() error {
			cmd := newAcceptRACommand()
			cmd.SetArgs([]string{"--imds-endpoint", c.endpoint})
			cmd.SetOut(new(strings.Builder))
			cmd.SetErr(&logs)
			return cmd.Execute()
		})
		if err != nil || !strings.Contains(logs.String(), c.log) {
			t.Fatalf("IMDS at %s: %v; log:\n%s\nwant %s", c.endpoint, err, logs.String(), c.log)
		}
		if set, left := n.Sysctl(c.set, "accept_ra"), n.Sysctl(c.left, "accept_ra"); set != "2" || left != "1" {
			t.Fatalf("IMDS at %s: accept_ra %s=%s %s=%s, want 2 and 1 (untouched)", c.endpoint, c.set, set, c.left, left)
		}
	}
}
