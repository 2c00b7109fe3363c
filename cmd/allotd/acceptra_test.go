package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
