package enihost

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// DefaultNetnsDirs are where container runtimes keep pods' network namespaces: containerd
// and CRI-O bind-mount them under /var/run/netns (/run/netns on most hosts).
var DefaultNetnsDirs = []string{"/var/run/netns"}

// NetnsFiles lists the namespace files of dirs (a missing directory is empty), sorted.
func NetnsFiles(dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		es, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("enihost: read namespace directory %s: %w", d, err)
		}
		for _, e := range es {
			if !e.IsDir() {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

type peerKey struct{ nsid, ifindex int }

// HostVeths finds, for each address of want, the ifindex of the host-side veth whose peer
// holds it: the host's veths name their peer by (namespace ID, ifindex), and each namespace
// file of paths (pods' namespaces) has an ID in the host's namespace once a veth joins the
// two. A veth that is a bridge's port (the bridge plugin) gives the bridge instead: the
// node reaches the pod through the bridge, and a route out of the port itself would never
// resolve the pod's neighbour entry (the pod's answers arrive on the bridge, not the port).
// Addresses not found are absent from the result (the veth may not exist yet).
// Namespaces that cannot be opened or read are skipped and reported together in the error;
// what was found is returned all the same.
func (h *Host) HostVeths(paths []string, want []netip.Addr) (map[netip.Addr]int, error) {
	out := map[netip.Addr]int{}
	if len(want) == 0 {
		return out, nil
	}
	wanted := make(map[netip.Addr]bool, len(want))
	for _, a := range want {
		wanted[a] = true
	}
	links, err := h.nl().LinkList()
	if err != nil {
		return out, fmt.Errorf("enihost: list links: %w", err)
	}
	peers := map[peerKey]int{}
	nsids := map[int]bool{}
	for _, l := range links {
		a := l.Attrs()
		if l.Type() != "veth" || a.NetNsID < 0 || a.ParentIndex == 0 {
			continue
		}
		via := a.Index
		if a.MasterIndex != 0 {
			via = a.MasterIndex
		}
		peers[peerKey{a.NetNsID, a.ParentIndex}] = via
		nsids[a.NetNsID] = true
	}
	if len(peers) == 0 {
		return out, nil
	}
	var errs []error
	for _, p := range paths {
		if len(out) == len(wanted) {
			break
		}
		if err := h.scanNetns(p, nsids, peers, wanted, out); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// scanNetns adds to out the wanted addresses of the namespace at path that sit on the peer
// of one of the host's veths.
func (h *Host) scanNetns(path string, nsids map[int]bool, peers map[peerKey]int, wanted map[netip.Addr]bool, out map[netip.Addr]int) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // gone meanwhile (a pod deleted)
		}
		return fmt.Errorf("enihost: open namespace %s: %w", path, err)
	}
	defer ns.Close()
	nsid, err := h.nl().GetNetNsIdByFd(int(ns))
	if err != nil {
		return fmt.Errorf("enihost: namespace ID of %s: %w", path, err)
	}
	if nsid < 0 || !nsids[nsid] {
		return nil // no veth of the host leads there
	}
	ph, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("enihost: netlink in %s: %w", path, err)
	}
	defer ph.Close()
	addrs, err := ph.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("enihost: addresses in %s: %w", path, err)
	}
	for _, ad := range addrs {
		a, ok := netip.AddrFromSlice(ad.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		if !wanted[a] {
			continue
		}
		if host, ok := peers[peerKey{nsid, ad.LinkIndex}]; ok {
			out[a] = host
		}
	}
	return nil
}
