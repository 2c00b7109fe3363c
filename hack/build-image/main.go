// Command build-image builds allot's container image without a Docker daemon or a registry
// and writes it as an OCI image layout tar that `ctr -n k8s.io images import` loads and
// `crane push` uploads (make image).
//
// The image has no base and no shell. Its layers, bottom first:
//
//  1. iptables (nft and legacy back ends) with the shared libraries it needs, unpacked from
//     Debian packages (apt-get download + dpkg-deb -x): the iptables datapath drives the
//     kernel through the iptables command, as kube-proxy, the AWS VPC CNI and Cilium's
//     iptables mode do, and the binaries must match what the node's kubelet uses; a
//     pure-Go netfilter path would be a second implementation of rules iptables users read.
//  2. the CNI reference plugins the chart installs beside allot-cni (bridge, ptp, loopback,
//     portmap, host-local) in /opt/allot/cni/bin, built from the Go module proxy at a
//     pinned version.
//  3. allotd and allotctl in /usr/local/bin, allot-cni in /opt/allot/cni/bin.
//
// Every binary is built with -trimpath and every entry is dated SOURCE_DATE_EPOCH (Unix 0
// when unset), so one commit, one Go toolchain and one set of Debian package versions give
// one image digest. The Debian versions used are in the image's labels.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/internal/ociimage"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// debPackages are iptables and what its binaries link against (ldd of xtables-nft-multi and
// xtables-legacy-multi), plus netbase for /etc/protocols, which iptables reads to name
// protocols.
var debPackages = []string{
	"iptables", "libxtables12", "libip4tc2", "libip6tc2", "libmnl0", "libnftnl11",
	"libnetfilter-conntrack3", "libnfnetlink0", "libc6", "netbase",
}

// iptablesCommands are the names Debian's update-alternatives would create; both back ends'
// own names (iptables-nft, iptables-legacy, ...) come with the package itself. The plain
// names point at the nft back end, Debian's default; the datapath picks the back end the
// node uses at run time (plugins/datapath/iptables).
var iptablesCommands = []string{
	"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore",
}

// cniPlugins are the reference plugins shipped for the chart's default network
// configurations: bridge (multi-pool, cluster-CIDR and shared-pool modes), ptp (ENI mode: a
// veth per pod with a host route, the AWS VPC CNI's plumbing; a bridge holding the subnet's
// router would shadow the VPC's), loopback and portmap.
var cniPlugins = []string{"main/bridge", "main/ptp", "main/loopback", "meta/portmap", "ipam/host-local"}

func main() {
	var o options
	flag.StringVar(&o.out, "o", "bin/allot-image.tar", "output OCI layout tar")
	flag.StringVar(&o.ref, "ref", "ghcr.io/allot-ipam/allot:dev", "full image reference (registry/repository:tag) recorded in the tar")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "architecture (Go and Debian name: amd64 or arm64)")
	flag.StringVar(&o.version, "version", "dev", "version stamped into the binaries")
	flag.StringVar(&o.cniVersion, "cni-plugins-version", "v1.9.1", "version of github.com/containernetworking/plugins")
	flag.StringVar(&o.cache, "cache", os.Getenv("ALLOT_CACHE"), "cache directory for Debian packages (default $HOME/.cache/allot)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	digest, err := build(ctx, log, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s@%s\n", o.out, o.ref, digest)
}

type options struct {
	out, ref, arch, version, cniVersion, cache string
}

func build(ctx context.Context, log *slog.Logger, o options) (v1.Hash, error) {
	if o.cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return v1.Hash{}, err
		}
		o.cache = filepath.Join(home, ".cache", "allot")
	}
	work, err := os.MkdirTemp("", "allot-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(work)

	debs, versions, err := debianRoot(ctx, log, o, filepath.Join(work, "deb"))
	if err != nil {
		return v1.Hash{}, err
	}
	osLayer, err := ociimage.Layer(debs)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("iptables layer: %w", err)
	}
	plugins, err := cniPluginFiles(ctx, log, o, filepath.Join(work, "cni"))
	if err != nil {
		return v1.Hash{}, err
	}
	cniLayer, err := ociimage.Layer(plugins)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("CNI plugins layer: %w", err)
	}
	own, err := allotFiles(ctx, log, o, filepath.Join(work, "allot"))
	if err != nil {
		return v1.Hash{}, err
	}
	allotLayer, err := ociimage.Layer(own)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("allot layer: %w", err)
	}
	img, err := ociimage.Image(o.arch, ociimage.Config{
		Entrypoint: []string{"/usr/local/bin/allotd"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "allot",
			"org.opencontainers.image.description": "IP address management for Kubernetes nodes",
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.source":      "https://github.com/allot-ipam/allot",
			"io.allot.debian-packages":             versions,
			"io.allot.cni-plugins-version":         o.cniVersion,
		},
	}, osLayer, cniLayer, allotLayer)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return v1.Hash{}, err
	}
	if err := ociimage.WriteOCITar(o.out, map[string]v1.Image{o.ref: img}); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// allotFiles builds allot's three commands, static, for the image.
func allotFiles(ctx context.Context, log *slog.Logger, o options, dir string) ([]ociimage.File, error) {
	ldflags := fmt.Sprintf("-s -w -X github.com/allot-ipam/allot/core/daemon.Version=%s -X main.version=%s", o.version, o.version)
	log.Info("building allot", "version", o.version, "arch", o.arch)
	if err := goCmd(ctx, o.arch, "", "build", "-trimpath", "-ldflags", ldflags, "-o", dir+"/",
		"./cmd/allotd", "./cmd/allot-cni", "./cmd/allotctl"); err != nil {
		return nil, err
	}
	return []ociimage.File{
		{Path: "usr/local/bin/allotd", Src: filepath.Join(dir, "allotd"), Mode: 0o755},
		{Path: "usr/local/bin/allotctl", Src: filepath.Join(dir, "allotctl"), Mode: 0o755},
		{Path: "opt/allot/cni/bin/allot-cni", Src: filepath.Join(dir, "allot-cni"), Mode: 0o755},
		// The agent's node store and socket live on host paths mounted here; the
		// directories exist so a read-only root file system still has the mount points.
		{Path: "var/lib/allot", Dir: true, Mode: 0o700},
		{Path: "run/allot", Dir: true, Mode: 0o755},
		{Path: "tmp", Dir: true, Mode: 0o1777},
	}, nil
}

// cniPluginFiles builds the reference plugins from the Go module proxy.
func cniPluginFiles(ctx context.Context, log *slog.Logger, o options, dir string) ([]ociimage.File, error) {
	log.Info("building CNI reference plugins", "version", o.cniVersion)
	var files []ociimage.File
	for _, p := range cniPlugins {
		pkg := "github.com/containernetworking/plugins/plugins/" + p + "@" + o.cniVersion
		if err := goCmd(ctx, o.arch, dir, "install", "-trimpath", "-ldflags", "-s -w", pkg); err != nil {
			return nil, err
		}
		name := filepath.Base(p)
		src := filepath.Join(dir, name)
		if o.arch != runtime.GOARCH {
			// go install puts cross-compiled binaries in GOBIN/GOOS_GOARCH.
			src = filepath.Join(dir, "linux_"+o.arch, name)
		}
		files = append(files, ociimage.File{Path: "opt/allot/cni/bin/" + name, Src: src, Mode: 0o755})
	}
	return files, nil
}

// goCmd runs the go command for linux/arch without cgo (static binaries), from the module
// root, with GOBIN set when gobin is not empty.
func goCmd(ctx context.Context, arch, gobin string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-mod=mod")
	if gobin != "" {
		cmd.Env = append(cmd.Env, "GOBIN="+gobin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// debianRoot downloads the Debian packages (kept in the cache, keyed by architecture),
// unpacks them into dir and returns the files to ship and "name=version ..." of the
// packages used.
func debianRoot(ctx context.Context, log *slog.Logger, o options, dir string) ([]ociimage.File, string, error) {
	pkgDir := filepath.Join(o.cache, "image-debs", o.arch)
	if err := os.MkdirAll(pkgDir, 0o755); err != nil {
		return nil, "", err
	}
	var versions []string
	for _, p := range debPackages {
		deb, err := debFile(ctx, log, pkgDir, p, o.arch)
		if err != nil {
			return nil, "", err
		}
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
			return nil, "", fmt.Errorf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
		versions = append(versions, p+"="+debVersion(deb))
	}
	files, err := treeFiles(dir, shipped)
	if err != nil {
		return nil, "", err
	}
	for _, c := range iptablesCommands {
		nft := strings.Replace(c, "tables", "tables-nft", 1) // iptables-save -> iptables-nft-save
		files = append(files, ociimage.File{Path: "usr/sbin/" + c, Link: nft})
	}
	return files, strings.Join(versions, " "), nil
}

// debFile is the cached .deb of package p for arch, downloaded with apt-get when missing.
// The newest cached file of the package is used, so a new Debian point release enters the
// image only when the cache is cleared (make image-clean).
func debFile(ctx context.Context, log *slog.Logger, dir, p, arch string) (string, error) {
	if m := cachedDebs(dir, p, arch); len(m) > 0 {
		return m[len(m)-1], nil
	}
	log.Info("apt-get download", "package", p, "arch", arch)
	name := p
	if arch != hostDebArch() {
		name = p + ":" + arch
	}
	download := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", name)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	out, err := download()
	if err != nil && os.Geteuid() == 0 {
		// A fresh machine may have no package lists yet.
		if uout, uerr := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %v\n%s", uerr, uout)
		}
		out, err = download()
	}
	if err != nil {
		return "", fmt.Errorf("apt-get download %s: %v\n%s", name, err, out)
	}
	m := cachedDebs(dir, p, arch)
	if len(m) == 0 {
		return "", fmt.Errorf("apt-get download %s left no %s_*_%s.deb in %s", name, p, arch, dir)
	}
	return m[len(m)-1], nil
}

func cachedDebs(dir, p, arch string) []string {
	var out []string
	for _, a := range []string{arch, "all"} {
		m, _ := filepath.Glob(filepath.Join(dir, p+"_*_"+a+".deb"))
		out = append(out, m...)
	}
	slices.Sort(out)
	return out
}

func debVersion(deb string) string {
	parts := strings.Split(filepath.Base(deb), "_")
	if len(parts) < 3 {
		return "?"
	}
	return strings.ReplaceAll(parts[1], "%3a", ":")
}

func hostDebArch() string {
	out, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		return runtime.GOARCH
	}
	return strings.TrimSpace(string(out))
}

// shipped leaves out documentation, locales and iconv modules: nothing iptables needs.
func shipped(rel string) bool {
	switch {
	case rel == "usr/share":
		return false
	case strings.Contains(rel, "/gconv"):
		return false
	case strings.HasPrefix(rel, "usr/bin/"), strings.HasPrefix(rel, "usr/libexec/"), strings.HasPrefix(rel, "sbin/"):
		// libc6's tools (ldd, iconv, getconf, ldconfig): not run in the image.
		return false
	case strings.HasPrefix(rel, "etc/"):
		return rel == "etc/protocols" || rel == "etc/services" || rel == "etc/ethertypes" || strings.HasPrefix(rel, "etc/iproute2")
	}
	return true
}

// treeFiles lists the files, links and directories under root that keep says to ship.
func treeFiles(root string, keep func(rel string) bool) ([]ociimage.File, error) {
	var files []ociimage.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		if !keep(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			files = append(files, ociimage.File{Path: rel, Link: target})
		case d.IsDir():
			files = append(files, ociimage.File{Path: rel, Dir: true, Mode: int64(info.Mode().Perm())})
		case info.Mode().IsRegular():
			files = append(files, ociimage.File{Path: rel, Src: path, Mode: int64(info.Mode().Perm())})
		default:
			return fmt.Errorf("%s: unexpected file type %v", path, info.Mode().Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the unpacked Debian packages: %w", err)
	}
	if len(files) == 0 {
		return nil, errors.New("the Debian packages unpacked to nothing")
	}
	return files, nil
}
