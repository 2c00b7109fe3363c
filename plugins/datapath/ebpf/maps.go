package ebpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/allot-ipam/allot/bpf"
	"github.com/allot-ipam/allot/plugins/datapath/internal/netinfo"
	"github.com/allot-ipam/allot/sdk/datapath"
	cebpf "github.com/cilium/ebpf"
)

// Flags of struct snat_cfg in bpf/snat.c.
const (
	cfgHasV4 = 0x1
	cfgHasV6 = 0x2
)

// addrWords turns an address into the 16 raw bytes the program compares
// (IPv4 as ::ffff:a.b.c.d), as the four native-endian words of the Go
// mirror of the C struct.
func addrWords(a netip.Addr) [4]uint32 {
	b := a.As16() // IPv4 comes out IPv4-mapped
	var w [4]uint32
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[i*4:])
	}
	return w
}

func lpmKey(p netip.Prefix) bpf.SnatLpmKey {
	bits := uint32(p.Bits())
	if p.Addr().Is4() {
		bits += 96
	}
	return bpf.SnatLpmKey{Prefixlen: bits, Addr: addrWords(p.Masked().Addr())}
}

// syncLPM makes the trie hold exactly prefixes: new entries first, stale
// ones deleted afterwards, so a prefix present in both configs is never
// missing for a moment.
func syncLPM(m *cebpf.Map, prefixes []netip.Prefix) error {
	want := make(map[bpf.SnatLpmKey]bool, len(prefixes))
	one := uint8(1)
	for _, p := range prefixes {
		k := lpmKey(p)
		want[k] = true
		if err := m.Update(&k, &one, cebpf.UpdateAny); err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
	}
	var stale []bpf.SnatLpmKey
	var k bpf.SnatLpmKey
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate: %w", err)
	}
	for _, k := range stale {
		if err := m.Delete(&k); err != nil && !errors.Is(err, cebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete stale prefix: %w", err)
		}
	}
	return nil
}

// fillMaps writes cfg into the maps in place.
func fillMaps(objs *bpf.SnatObjects, cfg datapath.Config, egress []netinfo.Egress) error {
	pr := cfg.PortRange.Effective()
	g := bpf.SnatGlobalCfg{PortMin: pr.Min, PortMax: pr.Max}
	if err := objs.Gcfg.Update(uint32(0), &g, cebpf.UpdateAny); err != nil {
		return fmt.Errorf("port range: %w", err)
	}
	if err := syncLPM(objs.Podcidrs, datapath.NormalizePrefixes(cfg.PodCIDRs)); err != nil {
		return fmt.Errorf("pod CIDRs: %w", err)
	}
	if err := syncLPM(objs.Nonmasq, cfg.EffectiveNonMasquerade()); err != nil {
		return fmt.Errorf("non-masquerade CIDRs: %w", err)
	}
	want := map[uint32]bool{}
	for _, e := range egress {
		var sc bpf.SnatSnatCfg
		if e.V4.IsValid() {
			sc.Addr4 = addrWords(e.V4)
			sc.Flags |= cfgHasV4
		}
		if e.V6.IsValid() {
			sc.Addr6 = addrWords(e.V6)
			sc.Flags |= cfgHasV6
		}
		idx := uint32(e.Index)
		want[idx] = true
		if err := objs.SnatAddrs.Update(&idx, &sc, cebpf.UpdateAny); err != nil {
			return fmt.Errorf("NAT address of %s: %w", e.Name, err)
		}
	}
	var stale []uint32
	var idx uint32
	var sc bpf.SnatSnatCfg
	it := objs.SnatAddrs.Iterate()
	for it.Next(&idx, &sc) {
		if !want[idx] {
			stale = append(stale, idx)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("NAT addresses: %w", err)
	}
	for _, idx := range stale {
		if err := objs.SnatAddrs.Delete(&idx); err != nil && !errors.Is(err, cebpf.ErrKeyNotExist) {
			return fmt.Errorf("NAT addresses: %w", err)
		}
	}
	return nil
}
