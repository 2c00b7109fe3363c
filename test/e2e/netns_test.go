package e2e

import (
	"bytes"
	"crypto/sha512"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

var nsSeq atomic.Int64

// newNetns creates a network namespace named allot-e2e-<pid>-<n> with lo up and removes it
// in t.Cleanup; everything the bridge plugin creates inside goes with it.
func newNetns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("allot-e2e-%d-%d", os.Getpid(), nsSeq.Add(1))
	runCmd(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v %s", name, err, out)
		}
	})
	runCmd(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

func nsPath(name string) string { return filepath.Join("/run/netns", name) }

func runCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// cnitoolContainerID is the container ID cnitool derives from the netns path.
func cnitoolContainerID(netnsPath string) string {
	s := sha512.Sum512([]byte(netnsPath))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

// node is a namespace standing in for the node: cnitool runs inside it, so the bridge and
// the host ends of the veths are created there and never in the real host namespace.
type node struct {
	t       *testing.T
	ns      string
	cache   string // bind-mounted over /var/lib/cni for cnitool
	confDir string // NETCONFPATH
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{t: t, ns: newNetns(t), cache: t.TempDir(), confDir: t.TempDir()}
	return n
}

// writeConf writes a network config list into dir.
func (n *node) writeConf(dir, network string, plugins ...string) {
	n.t.Helper()
	body := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[%s]}`, network, strings.Join(plugins, ","))
	if err := os.WriteFile(filepath.Join(dir, network+".conflist"), []byte(body), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// bridgePlugin is the bridge plugin with allot-cni as its ipam.
func bridgePlugin(socket, ipamExtra string) string {
	return fmt.Sprintf(`{"type":"bridge","bridge":"allotbr0","isGateway":true,"ipMasq":false,"capabilities":{"ips":true},
		"ipam":{"type":"allot-cni","socket":%q,"timeout":"20s"%s}}`, socket, ipamExtra)
}

type cnitoolOut struct {
	stdout, stderr string
	err            error
}

// cnitool runs cnitool inside the node namespace, in a private mount namespace where a
// tmpfs covers /var/lib and the node's cache dir is bind-mounted on /var/lib/cni, so
// cnitool's cache never touches the host. confDir "" is the node's.
func (n *node) cnitool(confDir string, extraEnv []string, args ...string) cnitoolOut {
	n.t.Helper()
	if confDir == "" {
		confDir = n.confDir
	}
	const script = `mount -t tmpfs -o size=4m,mode=0755 allot-e2e /var/lib && mkdir -p /var/lib/cni && mount --bind "$0" /var/lib/cni && exec "$@"`
	argv := append([]string{"netns", "exec", n.ns, "unshare", "--mount", "--propagation", "private",
		"sh", "-c", script, n.cache, env.cnitool}, args...)
	cmd := exec.Command("ip", argv...)
	cmd.Env = append(os.Environ(), "CNI_PATH="+env.cniPath, "NETCONFPATH="+confDir)
	cmd.Env = append(cmd.Env, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return cnitoolOut{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// nsState is what a pod namespace's interface holds, read with netlink.
type nsState struct {
	addrs  []string // global addresses with prefix length, sorted
	routes []netlink.Route
}

func readNetns(t *testing.T, name, ifName string) nsState {
	t.Helper()
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("open netns %s: %v", name, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatalf("netlink in %s: %v", name, err)
	}
	defer nh.Close()
	link, err := nh.LinkByName(ifName)
	if err != nil {
		t.Fatalf("%s in %s: %v", ifName, name, err)
	}
	addrs, err := nh.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var st nsState
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() {
			continue
		}
		st.addrs = append(st.addrs, a.IPNet.String())
	}
	sortStrings(st.addrs)
	if st.routes, err = nh.RouteList(link, netlink.FAMILY_ALL); err != nil {
		t.Fatal(err)
	}
	return st
}

// defaultGateway returns the gateway of the default route of a family (4 or 6), or nil.
func (s nsState) defaultGateway(family int) net.IP {
	for _, r := range s.routes {
		isDefault := r.Dst == nil
		if r.Dst != nil {
			ones, _ := r.Dst.Mask.Size()
			isDefault = ones == 0
		}
		if !isDefault || r.Gw == nil {
			continue
		}
		if (r.Gw.To4() != nil) == (family == 4) {
			return r.Gw
		}
	}
	return nil
}
