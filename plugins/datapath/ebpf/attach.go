package ebpf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/allot-ipam/allot/bpf"
	"github.com/allot-ipam/allot/plugins/datapath/internal/netinfo"
	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// attach hooks both programs to e: tcx when available (and not disabled),
// clsact + direct-action bpf filters otherwise.
func (d *Datapath) attach(e netinfo.Egress, objs *bpf.SnatObjects) (*attachment, error) {
	a := &attachment{name: e.Name, index: e.Index}
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
		return errors.Join(a.egress.Close(), a.ingress.Close())
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
		has := false
		for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
			fs, err := netlink.FilterList(l, parent)
			if err != nil {
				continue
			}
			for _, f := range fs {
				if bf, ok := f.(*netlink.BpfFilter); ok && strings.HasPrefix(bf.Name, "allot_snat_") {
					has = true
				}
			}
		}
		if has {
			if err := deleteFilters(l.Attrs().Index); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
