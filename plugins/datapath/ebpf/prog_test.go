package ebpf

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/allot-ipam/allot/bpf"
	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/plugins/datapath/internal/netinfo"
	"github.com/allot-ipam/allot/sdk/datapath"
	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// udp4 builds an Ethernet/IPv4/UDP frame with a 64-byte payload.
func udp4(src, dst netip.Addr, sport, dport uint16) []byte {
	b := make([]byte, 14+20+8+64)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+64))
	ip[8] = 64
	ip[9] = 17
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	u := ip[20:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], 8+64)
	for i := range 64 {
		u[8+i] = byte(i * 7)
	}
	binary.BigEndian.PutUint16(u[6:], ^l4sum(b))
	return b
}

func fold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

// l4sum is the ones' complement sum of the IPv4 UDP pseudo header and
// segment (0xffff when the checksum in it is right).
func l4sum(pkt []byte) uint16 {
	ip := pkt[14:]
	seg := ip[20:]
	s := sum16(ip[12:20]) + 17 + uint32(len(seg)) + sum16(seg)
	return fold(s)
}

// checkSums fails unless the IPv4 header and UDP checksums are right.
func checkSums(t *testing.T, pkt []byte) {
	t.Helper()
	if got := fold(sum16(pkt[14 : 14+20])); got != 0xffff {
		t.Errorf("IPv4 header checksum wrong (sum %#x)", got)
	}
	if got := l4sum(pkt); got != 0xffff {
		t.Errorf("UDP checksum wrong (sum %#x)", got)
	}
}

// loadsPrograms is why a test needs root.
const loadsPrograms = "loads eBPF programs (CAP_BPF, CAP_NET_ADMIN)"

func loadForTest(tb testing.TB) *Datapath {
	testenv.RequireRoot(tb, loadsPrograms)
	objs, err := load(effectiveSizes(datapath.MapSizes{}), "")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { objs.Close() })
	// An explicit non-masquerade list: the crafted packets go to 198.18.0.0/15, which
	// ip-masq-agent's default list exempts.
	cfg := datapath.Config{
		PodCIDRs:           []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")},
		NonMasqueradeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	}
	// BPF_PROG_TEST_RUN runs on the loopback device (ifindex 1).
	eg := []netinfo.Egress{{Name: "lo", Index: 1, V4: netip.MustParseAddr("198.18.0.1")}}
	if err := fillMaps(objs, cfg, eg); err != nil {
		tb.Fatal(err)
	}
	return &Datapath{objs: objs}
}

// TestProgramSNAT runs the egress program on a crafted packet and checks
// the translation and the reverse translation of the reply.
func TestProgramSNAT(t *testing.T) {
	d := loadForTest(t)
	pod, ext, node := netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1")
	pkt := udp4(pod, ext, 40000, 53)
	checkSums(t, pkt)
	ret, out, err := d.objs.AllotSnatEgress.Test(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if int32(ret) != -1 {
		t.Fatalf("egress returned %d, want TCX_NEXT (-1)", int32(ret))
	}
	if got, _ := netip.AddrFromSlice(out[14+12 : 14+16]); got != node {
		t.Fatalf("source after SNAT %s, want %s", got, node)
	}
	checkSums(t, out)
	sport := binary.BigEndian.Uint16(out[14+20:])
	reply := udp4(ext, node, 53, sport)
	ret, out, err = d.objs.AllotSnatIngress.Test(reply)
	if err != nil || int32(ret) != -1 {
		t.Fatalf("ingress: %d, %v", int32(ret), err)
	}
	if got, _ := netip.AddrFromSlice(out[14+16 : 14+20]); got != pod {
		t.Fatalf("destination after reverse NAT %s, want %s", got, pod)
	}
	if got := binary.BigEndian.Uint16(out[14+22:]); got != 40000 {
		t.Fatalf("destination port after reverse NAT %d, want 40000", got)
	}
	checkSums(t, out)
	// A second pod flow with the same tuple from another pod must get
	// another port (and correct checksums after the port rewrite).
	pod2 := netip.MustParseAddr("10.244.0.6")
	_, out2, err := d.objs.AllotSnatEgress.Test(udp4(pod2, ext, 40000, 53))
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, out2)
	if p2 := binary.BigEndian.Uint16(out2[14+20:]); p2 == sport || p2 < 32768 {
		t.Fatalf("second pod got port %d (first %d), want another port from 32768-65535", p2, sport)
	}
	// Non-pod source: untouched.
	other := udp4(netip.MustParseAddr("192.0.2.9"), ext, 1, 2)
	if _, out, _ := d.objs.AllotSnatEgress.Test(other); string(out) != string(other) {
		t.Fatal("non-pod packet modified")
	}
}

func BenchmarkEgressNotPod(b *testing.B) {
	d := loadForTest(b)
	benchRepeat(b, d.objs.AllotSnatEgress, udp4(netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("198.18.0.2"), 40000, 53))
}

func BenchmarkIngressNoFlow(b *testing.B) {
	d := loadForTest(b)
	benchRepeat(b, d.objs.AllotSnatIngress, udp4(netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1"), 53, 1234))
}

// benchRepeat uses the kernel's repeat loop: valid only for packets the
// program does not rewrite.
func benchRepeat(b *testing.B, p *cebpf.Program, pkt []byte) {
	if _, _, err := p.Test(pkt); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	_, per, err := p.Benchmark(pkt, b.N, b.ResetTimer)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(per.Nanoseconds()), "ns/packet")
}

func BenchmarkEgressHostIdentity(b *testing.B) {
	d := loadForTest(b)
	benchRepeat(b, d.objs.AllotSnatEgress, udp4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 50000, 53))
}

func BenchmarkEmptyProgram(b *testing.B) {
	testenv.RequireRoot(b, loadsPrograms)
	p, err := cebpf.NewProgram(&cebpf.ProgramSpec{Type: cebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	benchRepeat(b, p, udp4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 50000, 53))
}

func udp6(src, dst netip.Addr, sport, dport uint16) []byte {
	b := make([]byte, 14+40+8+64)
	binary.BigEndian.PutUint16(b[12:], 0x86dd)
	ip := b[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], 8+64)
	ip[6] = 17
	ip[7] = 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	u := ip[40:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], 8+64)
	for i := range 64 {
		u[8+i] = byte(i*13 + 1)
	}
	binary.BigEndian.PutUint16(u[6:], ^l6sum(b))
	return b
}

func l6sum(pkt []byte) uint16 {
	ip := pkt[14:]
	seg := ip[40:]
	return fold(sum16(ip[8:40]) + 17 + uint32(len(seg)) + sum16(seg))
}

func TestProgramSNAT6(t *testing.T) {
	testenv.RequireRoot(t, loadsPrograms)
	objs, err := load(effectiveSizes(datapath.MapSizes{}), "")
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	node := netip.MustParseAddr("2001:db8:a110::1")
	cfg := datapath.Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:a110:244::/64")}}
	if err := fillMaps(objs, cfg, []netinfo.Egress{{Name: "lo", Index: 1, V6: node}}); err != nil {
		t.Fatal(err)
	}
	pod, pod2, ext := netip.MustParseAddr("fd00:a110:244::2"), netip.MustParseAddr("fd00:a110:244::6"), netip.MustParseAddr("2001:db8:a110::2")
	var ports []uint16
	for _, src := range []netip.Addr{pod, pod2} {
		in := udp6(src, ext, 40000, 53)
		if l6sum(in) != 0xffff {
			t.Fatal("test packet checksum wrong")
		}
		_, out, err := objs.AllotSnatEgress.Test(in)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := netip.AddrFromSlice(out[14+8 : 14+24]); got != node {
			t.Fatalf("source %s, want %s", got, node)
		}
		if s := l6sum(out); s != 0xffff {
			t.Fatalf("UDP/IPv6 checksum wrong after SNAT (sum %#x)", s)
		}
		ports = append(ports, binary.BigEndian.Uint16(out[14+40:]))
	}
	if ports[0] != 40000 || ports[1] == 40000 {
		t.Fatalf("ports %v: want the original for the first flow and another for the second", ports)
	}
	_, back, err := objs.AllotSnatIngress.Test(udp6(ext, node, 53, ports[1]))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := netip.AddrFromSlice(back[14+24 : 14+40]); got != pod2 || binary.BigEndian.Uint16(back[14+42:]) != 40000 {
		t.Fatalf("reply translated to %s port %d, want %s port 40000", got, binary.BigEndian.Uint16(back[14+42:]), pod2)
	}
	if s := l6sum(back); s != 0xffff {
		t.Fatalf("UDP/IPv6 checksum wrong after reverse NAT (sum %#x)", s)
	}
}

// TestHostPortsReserved: the node's own flows and pod flows never share a
// tuple on the wire, whichever comes first.
func TestHostPortsReserved(t *testing.T) {
	d := loadForTest(t)
	pod, ext, node := netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1")
	egress := func(src netip.Addr, sport uint16) uint16 {
		t.Helper()
		ret, out, err := d.objs.AllotSnatEgress.Test(udp4(src, ext, sport, 53))
		if err != nil || int32(ret) != -1 {
			t.Fatalf("egress: %d, %v", int32(ret), err)
		}
		checkSums(t, out)
		return binary.BigEndian.Uint16(out[14+20:])
	}
	// Host first: it keeps its port, the pod flow with the same port moves.
	if p := egress(node, 41000); p != 41000 {
		t.Fatalf("host flow moved to %d", p)
	}
	if p := egress(pod, 41000); p == 41000 {
		t.Fatal("pod flow took the node's tuple")
	}
	// Pod first: it keeps its port, a host flow racing for it moves.
	if p := egress(pod, 42000); p != 42000 {
		t.Fatalf("pod flow moved to %d although the port was free", p)
	}
	if p := egress(node, 42000); p == 42000 {
		t.Fatal("host flow shares the pod flow's tuple")
	}
	// The host flow's reply reaches the host port it really uses.
	_, out, err := d.objs.AllotSnatIngress.Test(udp4(ext, node, 53, 41000))
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint16(out[14+22:]); got != 41000 {
		t.Fatalf("reply to host flow delivered to port %d", got)
	}
}

// Established-flow benchmarks. BPF_PROG_TEST_RUN's repeat loop feeds the
// rewritten packet back in, so a mirror entry is planted that translates
// it back: every iteration then takes the full established path (one
// lookup, one rewrite), alternating between two addresses.
func benchEstablished(b *testing.B, ingress bool) {
	d := loadForTest(b)
	pod, ext, node := netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1")
	prog := d.objs.AllotSnatEgress
	pkt := udp4(pod, ext, 40000, 53)
	if _, _, err := prog.Test(pkt); err != nil { // creates the flow
		b.Fatal(err)
	}
	var mk bpf.SnatCtKey
	var mv bpf.SnatCtVal
	if ingress {
		prog = d.objs.AllotSnatIngress
		pkt = udp4(ext, node, 53, 40000)
		mk = bpf.SnatCtKey{Saddr: addrWords(ext), Daddr: addrWords(pod), Sport: htons(53), Dport: htons(40000), Proto: protoUDP, Dir: dirIngres}
		mv = bpf.SnatCtVal{Ts: monotonicNow(), Addr: addrWords(node), Port: htons(40000)}
	} else {
		mk = bpf.SnatCtKey{Saddr: addrWords(node), Daddr: addrWords(ext), Sport: htons(40000), Dport: htons(53), Proto: protoUDP, Dir: dirEgress}
		mv = bpf.SnatCtVal{Ts: monotonicNow(), Addr: addrWords(pod), Port: htons(40000)}
	}
	if err := d.objs.Ct.Put(&mk, &mv); err != nil {
		b.Fatal(err)
	}
	benchRepeat(b, prog, pkt)
}

func htons(v uint16) uint16 { return v>>8 | v<<8 }

func BenchmarkEgressEstablishedRewrite(b *testing.B)  { benchEstablished(b, false) }
func BenchmarkIngressEstablishedRewrite(b *testing.B) { benchEstablished(b, true) }

// BenchmarkEgressNewFlow times the first packet of a flow (lookups, both
// conntrack entries, rewrite): one run per new tuple, timed by the kernel
// around each run, so the figure includes BPF_PROG_TEST_RUN's own per-call
// cost (BenchmarkEmptyProgram's, roughly).
func BenchmarkEgressNewFlow(b *testing.B) {
	d := loadForTest(b)
	pod := netip.MustParseAddr("10.244.0.2")
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		// A new destination every 50,000 ports: no reply tuple is taken,
		// so every flow keeps its port (one insertion probe).
		ext := netip.AddrFrom4([4]byte{198, 18, 1, byte(i / 50000)})
		_, per, err := d.objs.AllotSnatEgress.Benchmark(udp4(pod, ext, uint16(10000+i%50000), 53), 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		total += per
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
}

// bpfFTestSKBChecksumComplete is BPF_F_TEST_SKB_CHECKSUM_COMPLETE (Linux
// 6.12): the test run hands the program a CHECKSUM_COMPLETE skb and fails
// with EBADMSG when skb->csum no longer matches the packet afterwards.
const bpfFTestSKBChecksumComplete = 1 << 2

// TestProgramSNATChecksumComplete: under CHECKSUM_COMPLETE the programs
// keep skb->csum right (through bpf_l4_csum_replace) as well as the
// checksums in the packet, IPv4 with a port rewrite and IPv6.
func TestProgramSNATChecksumComplete(t *testing.T) {
	d := loadForTest(t)
	pod, pod2, ext := netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("10.244.0.6"), netip.MustParseAddr("198.18.0.2")
	run := func(p *cebpf.Program, in []byte) []byte {
		t.Helper()
		out := make([]byte, len(in)+256)
		opts := cebpf.RunOptions{Data: in, DataOut: out, Flags: bpfFTestSKBChecksumComplete}
		ret, err := p.Run(&opts)
		if errors.Is(err, unix.EINVAL) {
			testenv.Missing(t, "BPF_PROG_TEST_RUN without BPF_F_TEST_SKB_CHECKSUM_COMPLETE (Linux < 6.12): "+err.Error())
		}
		if err != nil {
			t.Fatalf("test run with CHECKSUM_COMPLETE: %v", err)
		}
		if int32(ret) != -1 {
			t.Fatalf("returned %d, want TCX_NEXT (-1)", int32(ret))
		}
		return opts.DataOut
	}
	for _, src := range []netip.Addr{pod, pod2} { // the second gets another port
		out := run(d.objs.AllotSnatEgress, udp4(src, ext, 40500, 53))
		checkSums(t, out)
		back := run(d.objs.AllotSnatIngress, udp4(ext, netip.MustParseAddr("198.18.0.1"), 53, binary.BigEndian.Uint16(out[14+20:])))
		checkSums(t, back)
		if got, _ := netip.AddrFromSlice(back[14+16 : 14+20]); got != src || binary.BigEndian.Uint16(back[14+22:]) != 40500 {
			t.Fatalf("reply translated to %s port %d, want %s port 40500", got, binary.BigEndian.Uint16(back[14+22:]), src)
		}
	}
}

// tcp4 builds an Ethernet/IPv4/TCP frame (no payload) with the given flags.
func tcp4(src, dst netip.Addr, sport, dport uint16, flags byte) []byte {
	b := make([]byte, 14+20+20)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 40)
	ip[8] = 64
	ip[9] = protoTCP
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum16(ip[:20])))
	th := ip[20:]
	binary.BigEndian.PutUint16(th[0:], sport)
	binary.BigEndian.PutUint16(th[2:], dport)
	th[12] = 5 << 4
	th[13] = flags
	return b
}

// TestTCPReuseClearsClosingState: after FIN both ways, a new connection on
// the same tuple clears each direction's closing state with its own
// packet (the SYN on the way out, the SYN-ACK on the way back), so the
// collector gives it the established timeout again.
func TestTCPReuseClearsClosingState(t *testing.T) {
	d := loadForTest(t)
	pod, ext, node := netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1")
	const syn, ack, fin = 0x02, 0x10, 0x01
	run := func(p *cebpf.Program, pkt []byte) {
		t.Helper()
		if ret, _, err := p.Test(pkt); err != nil || int32(ret) != -1 {
			t.Fatalf("run: %d, %v", int32(ret), err)
		}
	}
	eg, in := d.objs.AllotSnatEgress, d.objs.AllotSnatIngress
	ek := bpf.SnatCtKey{Saddr: addrWords(pod), Daddr: addrWords(ext), Sport: htons(41500), Dport: htons(80), Proto: protoTCP, Dir: dirEgress}
	rk := bpf.SnatCtKey{Saddr: addrWords(ext), Daddr: addrWords(node), Sport: htons(80), Dport: htons(41500), Proto: protoTCP, Dir: dirIngres}
	flags := func() (uint16, uint16) {
		t.Helper()
		var ev, rv bpf.SnatCtVal
		if err := d.objs.Ct.Lookup(&ek, &ev); err != nil {
			t.Fatalf("egress entry: %v", err)
		}
		if err := d.objs.Ct.Lookup(&rk, &rv); err != nil {
			t.Fatalf("reply entry: %v", err)
		}
		return ev.Flags & (ctFIN | ctRST), rv.Flags & (ctFIN | ctRST)
	}
	run(eg, tcp4(pod, ext, 41500, 80, syn))
	run(in, tcp4(ext, node, 80, 41500, syn|ack))
	// Sequence and acknowledgment numbers with every bit set are not
	// flags (the program once read byte 9, inside the acknowledgment
	// number, as the flags and marked live flows closed or reset).
	for _, x := range []struct {
		p   *cebpf.Program
		pkt []byte
	}{{eg, tcp4(pod, ext, 41500, 80, ack)}, {in, tcp4(ext, node, 80, 41500, ack)}} {
		for i := 14 + 20 + 4; i < 14+20+12; i++ {
			x.pkt[i] = 0xff
		}
		run(x.p, x.pkt)
	}
	if e, r := flags(); e != 0 || r != 0 {
		t.Fatalf("after ACKs: flags %#x/%#x, want none", e, r)
	}
	run(eg, tcp4(pod, ext, 41500, 80, fin|ack))
	run(in, tcp4(ext, node, 80, 41500, fin|ack))
	if e, r := flags(); e != ctFIN || r != ctFIN {
		t.Fatalf("after FIN both ways: flags %#x/%#x, want FIN/FIN", e, r)
	}
	run(eg, tcp4(pod, ext, 41500, 80, syn))
	if e, r := flags(); e != 0 || r != ctFIN {
		t.Fatalf("after the new SYN: flags %#x/%#x, want 0/FIN", e, r)
	}
	run(in, tcp4(ext, node, 80, 41500, syn|ack))
	if e, r := flags(); e != 0 || r != 0 {
		t.Fatalf("after the SYN-ACK: flags %#x/%#x, want 0/0", e, r)
	}
}
