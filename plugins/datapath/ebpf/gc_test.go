package ebpf

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/allot-ipam/allot/bpf"
	"github.com/allot-ipam/allot/sdk/datapath"
	cebpf "github.com/cilium/ebpf"
)

// flow inserts an egress entry and its reply entry with the given
// last-seen times and flags, and returns both keys.
func flow(t *testing.T, m *cebpf.Map, i int, proto uint8, tsOut, tsBack uint64, flOut, flBack uint16) (bpf.SnatCtKey, bpf.SnatCtKey) {
	t.Helper()
	pod := addrWords(netip.AddrFrom4([4]byte{10, 244, 0, byte(i)}))
	ext := addrWords(netip.MustParseAddr("198.18.0.2"))
	node := addrWords(netip.MustParseAddr("198.18.0.1"))
	ek := bpf.SnatCtKey{Saddr: pod, Daddr: ext, Sport: uint16(1000 + i), Dport: 80, Proto: proto, Dir: dirEgress}
	ev := bpf.SnatCtVal{Ts: tsOut, Addr: node, Port: uint16(2000 + i), Flags: flOut}
	rk := reverseKey(entry{ek, ev})
	rv := bpf.SnatCtVal{Ts: tsBack, Addr: pod, Port: ek.Sport, Flags: flBack}
	if err := m.Put(&ek, &ev); err != nil {
		t.Fatal(err)
	}
	if err := m.Put(&rk, &rv); err != nil {
		t.Fatal(err)
	}
	return ek, rk
}

func exists(m *cebpf.Map, k bpf.SnatCtKey) bool {
	var v bpf.SnatCtVal
	return m.Lookup(&k, &v) == nil
}

func TestCollector(t *testing.T) {
	d := loadForTest(t)
	m := d.objs.Ct
	c := &collector{log: slog.New(slog.DiscardHandler), ct: m}
	c.timeouts = datapath.Timeouts{TCP: time.Hour, TCPClosed: 10 * time.Second, UDP: time.Minute, ICMP: 30 * time.Second}.Effective()

	now := monotonicNow()
	sec := uint64(time.Second)
	type tc struct {
		name        string
		proto       uint8
		out, back   uint64
		fOut, fBack uint16
		keep        bool
	}
	cases := []tc{
		{"udp idle both ways", protoUDP, now - 2*60*sec, now - 2*60*sec, 0, 0, false},
		{"udp busy only in reply", protoUDP, now - 2*60*sec, now, 0, 0, true},
		{"udp from the future (written after the clock was read)", protoUDP, now + 5*sec, now + 5*sec, 0, 0, true},
		{"tcp established, quiet 2 min", protoTCP, now - 120*sec, now - 120*sec, 0, 0, true},
		{"tcp FIN both ways, 20 s ago", protoTCP, now - 20*sec, now - 20*sec, ctFIN, ctFIN, false},
		{"tcp FIN one way, 20 s ago", protoTCP, now - 20*sec, now - 20*sec, ctFIN, 0, true},
		{"tcp RST, 20 s ago", protoTCP, now - 20*sec, now - 20*sec, 0, ctRST, false},
		{"tcp RST, just now", protoTCP, now, now, ctRST, 0, true},
		{"icmp idle", 1, now - 60*sec, now - 60*sec, 0, 0, false},
	}
	keys := make([][2]bpf.SnatCtKey, len(cases))
	for i, c := range cases {
		ek, rk := flow(t, m, i+1, c.proto, c.out, c.back, c.fOut, c.fBack)
		keys[i] = [2]bpf.SnatCtKey{ek, rk}
	}
	// An orphan reply entry (its egress entry was evicted), idle.
	_, orphan := flow(t, m, 100, protoUDP, now, now-5*60*sec, 0, 0)
	ek100 := keys[0][0]
	ek100.Saddr = addrWords(netip.AddrFrom4([4]byte{10, 244, 0, 100}))
	ek100.Sport = 1100
	if err := m.Delete(&ek100); err != nil {
		t.Fatal(err)
	}

	c.pass()
	for i, tc := range cases {
		for dir, k := range keys[i] {
			if got := exists(m, k); got != tc.keep {
				t.Errorf("%s (dir %d): present=%v, want %v", tc.name, dir, got, tc.keep)
			}
		}
	}
	if exists(m, orphan) {
		t.Error("idle orphan reply entry kept")
	}
	if s := c.snapshot(); s.passes != 1 || s.deleted == 0 {
		t.Errorf("stats %+v", s)
	}
}
