package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runInstallCNI(t *testing.T, args ...string) error {
	t.Helper()
	cmd := newInstallCNICommand()
	cmd.SetArgs(args)
	cmd.SetOut(new(strings.Builder))
	cmd.SetErr(new(strings.Builder))
	return cmd.Execute()
}

// TestInstallCNICommand: the flags as the DaemonSet's init container passes them.
func TestInstallCNICommand(t *testing.T) {
	src, bin := t.TempDir(), t.TempDir()
	for _, n := range []string{"allot-cni", "bridge", "loopback"} {
		if err := os.WriteFile(filepath.Join(src, n), []byte(n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := runInstallCNI(t, "--bin-dir", bin, "--src-dir", src, "--plugins", "bridge,loopback"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"allot-cni", "bridge", "loopback"} {
		if b, err := os.ReadFile(filepath.Join(bin, n)); err != nil || string(b) != n {
			t.Fatalf("%s: %q %v", n, b, err)
		}
	}
	if err := runInstallCNI(t, "--bin-dir", bin, "--src-dir", src, "--plugins", "bridge,portmap"); err == nil || !strings.Contains(err.Error(), filepath.Join(src, "portmap")) {
		t.Fatalf("missing plugin: %v", err)
	}
	if err := runInstallCNI(t, "--src-dir", src); err == nil || !strings.Contains(err.Error(), "bin-dir") {
		t.Fatalf("without --bin-dir: %v", err)
	}
	if err := runInstallCNI(t, "--bin-dir", bin, "--src-dir", src, "--uninstall"); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(bin); len(es) != 0 {
		t.Fatalf("left after --uninstall: %v", es)
	}
}
