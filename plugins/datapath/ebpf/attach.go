package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/allot-ipam/allot/bpf"
	"github.com/allot-ipam/allot/plugins/datapath/internal/netinfo"
	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// attach hooks both programs to e: tcx when available (and not disabled),
// clsact + direct-action bpf filters otherwise. With a pin path, tcx links an
// earlier process pinned for e are adopted (their programs swapped in place)
// instead of attaching a second pair.
func (d *Datapath) attach(e netinfo.Egress, objs *bpf.SnatObjects, pinPath string) (*attachment, error) {
	a := &attachment{name: e.Name, index: e.Index}
	if !d.opts.legacyTC && pinPath != "" {
		adopted, err := adoptPinned(a, objs, pinPath)
		if err != nil {
			return nil, err
		}
		if adopted {
			d.log.Info("ebpf: adopted the pinned tcx links of an earlier process", "interface", e.Name)
			return a, dropLegacyFilters(e.Index)
		}
	}
	if !d.opts.legacyTC {
		eg, err := link.AttachTCX(link.TCXOptions{
			Interface: e.Index, Program: objs.AllotSnatEgress, Attach: cebpf.AttachTCXEgress,
			// Last on the way out: other programs see the pod's address.
			Anchor: link.Tail(),
		})
		if err == nil {
			in, err := link.AttachTCX(link.TCXOptions{
				Interface: e.Index, Program: objs.AllotSnatIngress, Attach: cebpf.AttachTCXIngress,
				// First on the way in: other programs see the pod's address.
				Anchor: link.Head(),
			})
			if err != nil {
				eg.Close()
				return nil, fmt.Errorf("tcx ingress: %w", err)
			}
			a.tcx, a.egress, a.ingress = true, eg, in
			// An earlier process on the clsact path (an older kernel, or
			// WithLegacyTC) left filters that would run after ours.
			if err := dropLegacyFilters(e.Index); err != nil {
				_ = a.detach()
				return nil, err
			}
			return a, nil
		}
		if !errors.Is(err, cebpf.ErrNotSupported) {
			return nil, fmt.Errorf("tcx egress: %w", err)
		}
		d.log.Info("ebpf: tcx not supported by the kernel, using tc clsact", "interface", e.Name)
	}
	if err := ensureClsact(e.Index); err != nil {
		return nil, err
	}
	if err := replaceFilter(e.Index, netlink.HANDLE_MIN_EGRESS, objs.AllotSnatEgress, filterEgress); err != nil {
		return nil, err
	}
	if err := replaceFilter(e.Index, netlink.HANDLE_MIN_INGRESS, objs.AllotSnatIngress, filterIngress); err != nil {
		_ = deleteFilters(e.Index)
		return nil, err
	}
	return a, nil
}

// update swaps in the programs of objs atomically.
func (a *attachment) update(objs *bpf.SnatObjects) error {
	if a.tcx {
		if err := a.egress.Update(objs.AllotSnatEgress); err != nil {
			return fmt.Errorf("tcx egress update: %w", err)
		}
		if err := a.ingress.Update(objs.AllotSnatIngress); err != nil {
			return fmt.Errorf("tcx ingress update: %w", err)
		}
		return nil
	}
	if err := replaceFilter(a.index, netlink.HANDLE_MIN_EGRESS, objs.AllotSnatEgress, filterEgress); err != nil {
		return err
	}
	return replaceFilter(a.index, netlink.HANDLE_MIN_INGRESS, objs.AllotSnatIngress, filterIngress)
}

func (a *attachment) detach() error {
	if a.tcx {
		var errs []error
		if a.pinDir != "" {
			errs = append(errs, a.egress.Unpin(), a.ingress.Unpin())
			a.pinDir = ""
		}
		// Closing the last reference (the pin is gone) detaches the link.
		errs = append(errs, a.egress.Close(), a.ingress.Close())
		return errors.Join(errs...)
	}
	err := deleteFilters(a.index)
	if errors.Is(err, unix.ENODEV) {
		return nil // the interface is gone, and with it the filters
	}
	return err
}

func clsact(index int) *netlink.GenericQdisc {
	return &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: index,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		},
		QdiscType: "clsact",
	}
}

func ensureClsact(index int) error {
	if err := netlink.QdiscReplace(clsact(index)); err != nil {
		return fmt.Errorf("clsact qdisc: %w", err)
	}
	return nil
}

func replaceFilter(index int, parent uint32, prog *cebpf.Program, name string) error {
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: index,
			Parent:    parent,
			Handle:    filterHandle,
			Priority:  filterPrio,
			Protocol:  unix.ETH_P_ALL,
		},
		Fd:           prog.FD(),
		Name:         name,
		DirectAction: true,
	}
	if err := netlink.FilterReplace(f); err != nil {
		return fmt.Errorf("tc filter %s: %w", name, err)
	}
	return nil
}

// deleteFilters removes allot's filters from the interface, and the clsact
// qdisc when no other filter is left on it.
func deleteFilters(index int) error {
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		return err
	}
	others := 0
	var errs []error
	for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
		filters, err := netlink.FilterList(l, parent)
		if err != nil {
			// No clsact qdisc: nothing of ours.
			continue
		}
		for _, f := range filters {
			bf, ok := f.(*netlink.BpfFilter)
			if !ok || !strings.HasPrefix(bf.Name, "allot_snat_") {
				others++
				continue
			}
			if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete tc filter %s on %s: %w", bf.Name, l.Attrs().Name, err))
			}
		}
	}
	if others == 0 {
		qs, err := netlink.QdiscList(l)
		if err == nil {
			for _, q := range qs {
				if q.Type() == "clsact" {
					if err := netlink.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
						errs = append(errs, fmt.Errorf("delete clsact on %s: %w", l.Attrs().Name, err))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// removeLeftoverFilters deletes allot filters on every link of the current
// namespace: tc filters, unlike tcx links, outlive the process that
// created them.
func removeLeftoverFilters() error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var errs []error
	for _, l := range links {
		if hasOurFilters(l) {
			if err := deleteFilters(l.Attrs().Index); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func hasOurFilters(l netlink.Link) bool {
	for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err != nil {
			continue
		}
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok && strings.HasPrefix(bf.Name, "allot_snat_") {
				return true
			}
		}
	}
	return false
}

// dropLegacyFilters deletes allot's tc filters on one link, if it has any.
func dropLegacyFilters(index int) error {
	l, err := netlink.LinkByIndex(index)
	if err != nil || !hasOurFilters(l) {
		return nil
	}
	if err := deleteFilters(index); err != nil {
		return fmt.Errorf("tc filters of an earlier process: %w", err)
	}
	return nil
}

// Pinned tcx links.
//
// A tcx link lives as long as a file descriptor or a pin refers to it. Pinned
// in the datapath's PinPath, the links outlive the process: an agent
// restarted by a rolling update leaves the programs attached (and the pinned
// flow table with them), and the next process adopts the links, swapping its
// programs in atomically with a link update, so pod traffic is masqueraded
// without a gap and no second pair is ever attached. Links of interfaces that
// are no longer egress (or gone) are unpinned, which detaches them.

func linkPin(dir string, index int, dir2 string) string {
	return filepath.Join(dir, fmt.Sprintf("%s%d_%s", linkPinPrefix, index, dir2))
}

const linkPinPrefix = "tcx_"

// pin pins both links of a in dir (moving existing pins), or unpins them when
// dir is empty.
func (a *attachment) pin(dir string) error {
	if !a.tcx || a.pinDir == dir {
		return nil
	}
	if dir == "" {
		err := errors.Join(a.egress.Unpin(), a.ingress.Unpin())
		a.pinDir = ""
		return err
	}
	if err := a.egress.Pin(linkPin(dir, a.index, "egress")); err != nil {
		return fmt.Errorf("pin tcx egress link: %w", err)
	}
	if err := a.ingress.Pin(linkPin(dir, a.index, "ingress")); err != nil {
		return fmt.Errorf("pin tcx ingress link: %w", err)
	}
	a.pinDir = dir
	return nil
}

// adoptPinned takes over the pinned links of a.index, if both are there and
// still attached to that interface, and updates them to objs' programs.
func adoptPinned(a *attachment, objs *bpf.SnatObjects, dir string) (bool, error) {
	load := func(which string, want cebpf.AttachType) link.Link {
		l, err := link.LoadPinnedLink(linkPin(dir, a.index, which), nil)
		if err != nil {
			return nil
		}
		info, err := l.Info()
		if err != nil || info.TCX() == nil || int(info.TCX().Ifindex) != a.index || uint32(info.TCX().AttachType) != uint32(want) {
			// Another interface took the index, or the link is defunct: drop it.
			_ = l.Unpin()
			_ = l.Close()
			return nil
		}
		return l
	}
	eg := load("egress", cebpf.AttachTCXEgress)
	in := load("ingress", cebpf.AttachTCXIngress)
	if eg == nil || in == nil {
		for _, l := range []link.Link{eg, in} {
			if l != nil {
				_ = l.Unpin()
				_ = l.Close()
			}
		}
		return false, nil
	}
	a.tcx, a.egress, a.ingress, a.pinDir = true, eg, in, dir
	if err := a.update(objs); err != nil {
		_ = a.detach()
		return false, fmt.Errorf("update adopted tcx links: %w", err)
	}
	return true, nil
}

// unpinStale unpins (and so detaches) every pinned link in dir that no
// attachment holds: links of interfaces that are no longer egress, or gone.
func unpinStale(dir string, held map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read pin path: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), linkPinPrefix) || held[e.Name()] {
			continue
		}
		p := filepath.Join(dir, e.Name())
		l, err := link.LoadPinnedLink(p, nil)
		if err != nil {
			// Not a link (or unreadable): remove the pin file itself.
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove stale pin %s: %w", p, err))
			}
			continue
		}
		errs = append(errs, l.Unpin(), l.Close())
	}
	return errors.Join(errs...)
}
