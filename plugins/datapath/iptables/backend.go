package iptables

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	goipt "github.com/coreos/go-iptables/iptables"
)

// Back ends of iptables 1.8+: the same rules land in the kernel's legacy x_tables or in
// nf_tables. A node uses one (its kubelet and kube-proxy wrote their chains there); rules of
// the other still work but hide from the node's iptables-save, so an administrator would
// not see allot's. Like the iptables-wrapper script of Kubernetes (kubernetes-sigs/
// iptables-wrappers) that kube-proxy's and Cilium's images use, allot asks both and takes
// the one the node uses.
const (
	backendNFT    = "nft"
	backendLegacy = "legacy"
	// backendEnv overrides the detection (nft or legacy).
	backendEnv = "ALLOT_IPTABLES_BACKEND"
)

var (
	backendOnce sync.Once
	backend     string // "", nft or legacy: "" uses plain iptables/ip6tables from PATH
)

// detectBackend returns the back end to use, decided once per process: the environment's
// choice, else the one whose tables hold the kubelet's marker chains, else the one holding
// more rules, else nft (Debian's and most distributions' default). "" when the host or image
// has only the plain commands.
func detectBackend() string {
	backendOnce.Do(func() {
		if v := os.Getenv(backendEnv); v == backendNFT || v == backendLegacy {
			backend = v
			return
		}
		if !hasCommand("iptables-nft") || !hasCommand("iptables-legacy") {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		backend = chooseBackend(rules(ctx, backendNFT), rules(ctx, backendLegacy))
	})
	return backend
}

// chooseBackend decides from what each back end holds: the kubelet's marker chains first
// (they say which one the node's own components use), then the rule count, nft on a tie.
func chooseBackend(nft, legacy ruleCount) string {
	switch {
	case nft.marker && !legacy.marker:
		return backendNFT
	case legacy.marker && !nft.marker:
		return backendLegacy
	case legacy.count > nft.count:
		return backendLegacy
	default:
		return backendNFT
	}
}

type ruleCount struct {
	marker bool // the kubelet's KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY chain exists
	count  int
}

// rules reads both families' tables through one back end's save commands.
func rules(ctx context.Context, b string) ruleCount {
	var rc ruleCount
	if b == backendLegacy && !legacyInUse() {
		// iptables-legacy-save would load the x_tables modules and register empty legacy
		// tables, which makes every later iptables-nft warn about them.
		return rc
	}
	for _, cmd := range []string{"iptables-" + b + "-save", "ip6tables-" + b + "-save"} {
		out, err := exec.CommandContext(ctx, cmd).Output()
		if err != nil {
			continue
		}
		rc.add(out)
	}
	return rc
}

// add counts one iptables-save output.
func (rc *ruleCount) add(out []byte) {
	for line := range bytes.Lines(out) {
		s := string(line)
		if strings.HasPrefix(s, ":KUBE-IPTABLES-HINT") || strings.HasPrefix(s, ":KUBE-KUBELET-CANARY") {
			rc.marker = true
		}
		if strings.HasPrefix(s, "-A ") {
			rc.count++
		}
	}
}

// legacyInUse says whether any legacy table exists in this network namespace.
func legacyInUse() bool {
	for _, f := range []string{"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"} {
		if b, err := os.ReadFile(f); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return true
		}
	}
	return false
}

func hasCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// commandFor is the iptables command of family p on the detected back end ("" = go-iptables'
// own choice: iptables or ip6tables from PATH).
func commandFor(p goipt.Protocol) string {
	b := detectBackend()
	if b == "" {
		return ""
	}
	if p == goipt.ProtocolIPv6 {
		return "ip6tables-" + b
	}
	return "iptables-" + b
}
