//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// allot eBPF masquerade (SNAT) for pod traffic leaving the node.
//
// Two tc programs share one connection-tracking map:
//   allot_snat_egress  on the egress interface's egress hook: pod-sourced
//                      packets to masquerade destinations get the node's
//                      address (and, on collision, another source port).
//   allot_snat_ingress on the same interface's ingress hook: replies are
//                      translated back to the pod's address and port.
//
// Connection tracking: one LRU hash holds both directions, keyed by the
// 5-tuple plus a direction byte. The egress entry (original tuple) yields
// the NAT address/port; the ingress entry (reply tuple as seen on the wire)
// yields the pod address/port. Reply-tuple insertion with BPF_NOEXIST is
// the port allocator: the original port is kept when free, else up to 128
// random ports from the configured range are probed.
//
// Host flows leaving with the NAT address are tracked through the same
// allocator (identity mapping when free) so a pod flow can never take a
// tuple the node itself uses, and a host flow that races a pod flow for
// the same tuple is moved to a free port, as nf_nat does.
//
// Addresses are stored as 16 bytes; IPv4 uses the ::ffff:a.b.c.d mapping so
// one map and one LPM trie per purpose serve both families.
//
// Deliberately no <linux/icmp.h>, <linux/ip.h> etc.: on Debian they drag in
// glibc headers (gnu/stubs-32.h) that break -target bpf. The few wire
// structures needed are defined here.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#define TCX_NEXT (-1) /* also TC_ACT_UNSPEC: continue with the next program/filter */
#define TCX_DROP 2

#define ETH_P_IP_ 0x0800
#define ETH_P_IPV6_ 0x86DD
#define PROTO_ICMP 1
#define PROTO_TCP 6
#define PROTO_UDP 17
#define PROTO_ICMPV6 58

#define ICMP_ECHO_REPLY 0
#define ICMP_ECHO_REQUEST 8
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

#define DIR_EGRESS 0
#define DIR_INGRESS 1

/* ct_val.flags */
#define CT_FIN 0x1 /* FIN seen in this direction */
#define CT_RST 0x2 /* RST seen in this direction */
#define CT_HOST 0x4 /* the flow belongs to the node itself */

#define MAX_PROBES 128
/* Last-seen times are refreshed when 64 jiffies (64-640 ms, by CONFIG_HZ)
 * have passed since the entry's last refresh: bpf_jiffies64 is inlined by
 * the verifier into one load, so an established flow's packet reads no
 * clock through a helper call except at those refreshes. */
#define TS_REFRESH_JIFFIES 64

/* skb->ip_summed (include/linux/skbuff.h) */
#define CSUM_NONE 0
#define CSUM_UNNECESSARY 1
#define CSUM_COMPLETE 2
#define CSUM_PARTIAL 3

#define CFG_HAS_V4 0x1
#define CFG_HAS_V6 0x2

struct ethhdr_ {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;
} __attribute__((packed));

struct iphdr_ {
	__u8 ihl_version;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6hdr_ {
	__be32 vtc_flow;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u32 saddr[4];
	__u32 daddr[4];
};

struct l4hdr_ {
	__be16 source; /* ICMP: type, code */
	__be16 dest;   /* ICMP: checksum */
	__be16 w2;     /* ICMP: identifier */
	__be16 w3;
	__u8 pad[5];   /* TCP: rest of the sequence and acknowledgment numbers, data offset */
	__u8 tcpflags; /* TCP only: byte 13 */
};

struct ct_key {
	__u32 saddr[4];
	__u32 daddr[4];
	__be16 sport; /* ICMP echo: identifier (egress key) */
	__be16 dport; /* ICMP echo: identifier (reply key) */
	__u8 proto;
	__u8 dir;
	__u16 pad;
};

struct ct_val {
	__u64 ts;       /* CLOCK_MONOTONIC ns (bpf_ktime_get_coarse_ns) of last packet, < 1 s granularity */
	__u32 addr[4];  /* egress entry: NAT address; ingress entry: pod address */
	__be16 port;    /* egress entry: NAT port; ingress entry: pod port */
	__u16 flags;
	__u32 tj;       /* jiffies (low 32 bits) when ts was last written */
};

struct lpm_key {
	__u32 prefixlen;
	__u32 addr[4];
};

struct snat_cfg {
	__u32 addr4[4]; /* v4-mapped */
	__u32 addr6[4];
	__u32 flags;
};

struct global_cfg {
	__u16 port_min; /* host order, inclusive */
	__u16 port_max;
	__u32 flags;
};

enum stat_idx {
	STAT_SNAT_PKTS = 0,
	STAT_RNAT_PKTS,
	STAT_NEW_FLOWS,
	STAT_PORT_REWRITES,
	STAT_ALLOC_FAIL,
	STAT_HOST_FLOWS,
	STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct_key);
	__type(value, struct ct_val);
	__uint(max_entries, 524288);
} ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lpm_key);
	__type(value, __u8);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} nonmasq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lpm_key);
	__type(value, __u8);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} podcidrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32); /* ifindex */
	__type(value, struct snat_cfg);
	__uint(max_entries, 256);
} snat_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct global_cfg);
	__uint(max_entries, 1);
} gcfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, STAT_MAX);
} stats SEC(".maps");

struct pkt {
	struct ct_key k;
	__u32 l3off;
	__u32 l4off;
	__u32 csum_off;  /* absolute offset of the L4 checksum */
	__u32 port_off;  /* absolute offset of the field to rewrite */
	__u8 family;     /* 4 or 6 */
	__u8 tcpflags;
	__u8 pseudo;     /* L4 checksum covers the pseudo header */
	__u8 udp;
	__u32 need;      /* bytes of linear data the headers need */
};

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&stats, &idx);
	if (c)
		*c += 1;
}

static __always_inline int addr_eq(const __u32 *a, const __u32 *b)
{
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0;
}

static __always_inline void addr_cpy(__u32 *dst, const __u32 *src)
{
	dst[0] = src[0];
	dst[1] = src[1];
	dst[2] = src[2];
	dst[3] = src[3];
}

static __always_inline int lpm_match(void *map, const __u32 *addr)
{
	struct lpm_key k = { .prefixlen = 128 };
	addr_cpy(k.addr, addr);
	return bpf_map_lookup_elem(map, &k) != NULL;
}

/* Packets not translated: non-IP, fragments, IPv6 extension headers,
 * other protocols, ICMP other than echo. egress selects which ICMP echo
 * type carries the identifier as the "source port". */
#define PARSE_SHORT (-2)

/* parse_linear parses from the linear area only. It returns PARSE_SHORT
 * with p->need set when the headers extend past it. */
static __always_inline int parse_linear(struct __sk_buff *skb, struct pkt *p, int egress)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;

	p->need = sizeof(struct ethhdr_) + sizeof(struct ipv6hdr_);
	struct ethhdr_ *eth = data;
	if ((void *)(eth + 1) > end)
		return -1;

	__u8 proto;
	__u32 l4off;
	if (eth->proto == bpf_htons(ETH_P_IP_)) {
		struct iphdr_ *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return PARSE_SHORT;
		if ((ip->ihl_version >> 4) != 4)
			return -1;
		__u32 ihl = (ip->ihl_version & 0x0f) * 4;
		if (ihl < 20)
			return -1;
		/* Fragments carry no (or a partial) L4 header: not translated. */
		if (ip->frag_off & bpf_htons(0x3fff))
			return -1;
		p->family = 4;
		p->l3off = sizeof(struct ethhdr_);
		l4off = sizeof(struct ethhdr_) + ihl;
		proto = ip->protocol;
		p->k.saddr[2] = bpf_htonl(0xffff);
		p->k.saddr[3] = ip->saddr;
		p->k.daddr[2] = bpf_htonl(0xffff);
		p->k.daddr[3] = ip->daddr;
	} else if (eth->proto == bpf_htons(ETH_P_IPV6_)) {
		struct ipv6hdr_ *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return PARSE_SHORT;
		p->family = 6;
		p->l3off = sizeof(struct ethhdr_);
		l4off = sizeof(struct ethhdr_) + sizeof(struct ipv6hdr_);
		proto = ip6->nexthdr;
		addr_cpy(p->k.saddr, ip6->saddr);
		addr_cpy(p->k.daddr, ip6->daddr);
	} else {
		return -1;
	}

	if (l4off > 74)
		return -1;
	struct l4hdr_ *l4 = data + l4off;
	p->l4off = l4off;
	p->k.proto = proto;

	switch (proto) {
	case PROTO_TCP:
		p->need = l4off + 20;
		if ((void *)l4 + 20 > end)
			return PARSE_SHORT;
		p->k.sport = l4->source;
		p->k.dport = l4->dest;
		p->tcpflags = l4->tcpflags;
		p->csum_off = l4off + 16;
		p->port_off = egress ? l4off : l4off + 2;
		p->pseudo = 1;
		break;
	case PROTO_UDP:
		p->need = l4off + 8;
		if ((void *)l4 + 8 > end)
			return PARSE_SHORT;
		p->k.sport = l4->source;
		p->k.dport = l4->dest;
		p->csum_off = l4off + 6;
		p->port_off = egress ? l4off : l4off + 2;
		p->pseudo = 1;
		p->udp = 1;
		break;
	case PROTO_ICMP:
	case PROTO_ICMPV6: {
		if ((proto == PROTO_ICMP) != (p->family == 4))
			return -1;
		p->need = l4off + 8;
		if ((void *)l4 + 8 > end)
			return PARSE_SHORT;
		__u8 type = *(__u8 *)l4;
		__u8 want;
		if (proto == PROTO_ICMP)
			want = egress ? ICMP_ECHO_REQUEST : ICMP_ECHO_REPLY;
		else
			want = egress ? ICMPV6_ECHO_REQUEST : ICMPV6_ECHO_REPLY;
		if (type != want)
			return -1;
		/* The echo identifier plays the role of the source port on the
		 * way out and of the destination port on the way back. */
		if (egress) {
			p->k.sport = l4->w2;
			p->k.dport = 0;
		} else {
			p->k.sport = 0;
			p->k.dport = l4->w2;
		}
		p->csum_off = l4off + 2;
		p->port_off = l4off + 4;
		p->pseudo = proto == PROTO_ICMPV6;
		break;
	}
	default:
		return -1;
	}
	return 0;
}

/* parse fills p from the packet. Returns 0 when the packet is one we may
 * translate, -1 otherwise. Headers are pulled into the linear area only
 * when they are not there already, and only as far as needed: pulling
 * more than the headers of a GSO packet costs a reallocation. */
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p, int egress)
{
	int r = parse_linear(skb, p, egress);
	if (r != PARSE_SHORT)
		return r;
	__u32 need = p->need;
	if (need > skb->len || need > 128)
		return -1;
	if (bpf_skb_pull_data(skb, need) < 0)
		return -1;
	__builtin_memset(p, 0, sizeof(*p));
	r = parse_linear(skb, p, egress);
	return r == PARSE_SHORT ? -1 : r;
}

/* The kernel's sk_buff, for its ip_summed bit field only: CO-RE finds the
 * field in the running kernel's BTF. bpf_cast_to_kern_ctx (Linux 6.3+) is
 * a kfunc the verifier turns into a register move; it is weak, so the
 * object still loads on older kernels, where bpf_l4_csum_replace does all
 * checksum updates as before. */
struct sk_buff___allot {
	__u8 ip_summed : 2;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym __weak;

/* Resolved at load time: 0 when the kernel lacks the kfunc. */
#define ksym_exists(sym) (!!(sym))

static __always_inline int skb_ip_summed(struct __sk_buff *skb)
{
	if (!ksym_exists(bpf_cast_to_kern_ctx))
		return CSUM_COMPLETE; /* unknown: the helper handles every case */
	struct sk_buff___allot *k = bpf_cast_to_kern_ctx(skb);
	return BPF_CORE_READ_BITFIELD(k, ip_summed);
}

/* fold16 folds a ones' complement sum of 16- and 32-bit words to 16 bits. */
static __always_inline __u32 fold16(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u32)s;
}

/* addr_diff is the ones' complement sum of ~old + new over the address
 * words (what bpf_csum_diff would return, without the call). */
static __always_inline __u64 addr_diff(const struct pkt *p, const __u32 *o, const __u32 *n)
{
	if (p->family == 4)
		return (__u64)(__u32)~o[3] + n[3];
	__u64 d = 0;
	d += (__u32)~o[0];
	d += (__u32)~o[1];
	d += (__u32)~o[2];
	d += (__u32)~o[3];
	d += n[0];
	d += n[1];
	d += n[2];
	d += n[3];
	return d;
}

/* l4_csum_inline updates the L4 checksum at csum the way
 * bpf_l4_csum_replace does (inet_proto_csum_replace4/2), for skbs that are
 * not CHECKSUM_COMPLETE: under CHECKSUM_PARTIAL the field holds the folded
 * pseudo-header sum, which only the address enters; otherwise it is the
 * complete checksum (RFC 1624: HC' = ~(~HC + ~m + m')). A UDP checksum of
 * 0 (none, IPv4) stays 0, and a computed 0 is sent as 0xffff
 * (BPF_F_MARK_MANGLED_0). */
static __always_inline void l4_csum_inline(struct pkt *p, __u16 *csum, int partial, __u64 da,
					   int port_changed, __be16 oport, __be16 nport)
{
	__u16 old = *csum;
	if (p->udp && old == 0)
		return;
	__u16 n;
	if (partial) {
		if (!da)
			return;
		n = fold16((__u64)old + da);
	} else {
		__u64 s = (__u16)~old + da;
		if (port_changed)
			s += (__u16)~oport + (__u32)nport;
		n = (__u16)~fold16(s);
	}
	if (p->udp && n == 0)
		n = 0xffff;
	*csum = n;
}

/* l4_csum_helper updates the L4 checksum through bpf_l4_csum_replace, which
 * also keeps skb->csum right under CHECKSUM_COMPLETE (BPF cannot write it). */
static __always_inline int l4_csum_helper(struct __sk_buff *skb, struct pkt *p, int addr_changed,
					  const __u32 *oaddr, const __u32 *naddr,
					  int port_changed, __be16 oport, __be16 nport)
{
	__u64 mangled = p->udp ? BPF_F_MARK_MANGLED_0 : 0;
	if (addr_changed && p->pseudo) {
		if (p->family == 4) {
			if (bpf_l4_csum_replace(skb, p->csum_off, oaddr[3], naddr[3],
						BPF_F_PSEUDO_HDR | mangled | sizeof(__u32)) < 0)
				return -1;
		} else {
			__u32 d = fold16(addr_diff(p, oaddr, naddr)); /* 16 bits: a valid 32-bit sum */
			if (bpf_l4_csum_replace(skb, p->csum_off, 0, d, BPF_F_PSEUDO_HDR | mangled) < 0)
				return -1;
		}
	}
	if (port_changed &&
	    bpf_l4_csum_replace(skb, p->csum_off, oport, nport, mangled | sizeof(nport)) < 0)
		return -1;
	return 0;
}

/* rewrite replaces the source (egress) or destination (ingress) address and
 * port/identifier.
 *
 * Addresses, ports and the IPv4 header checksum (RFC 1624, always complete)
 * are written directly into the packet, and so is the L4 checksum unless
 * the skb is CHECKSUM_COMPLETE (or the kernel too old to tell): then
 * bpf_l4_csum_replace, which keeps skb->csum right. Skbs from veth and
 * offloading NICs are CHECKSUM_PARTIAL on the way out, and received ones
 * mostly CHECKSUM_UNNECESSARY, so translated packets usually call no
 * helper at all. The direct writes come first because the helper
 * invalidates packet pointers.
 *
 * Direct writes make the verifier add a prologue that unclones cloned skbs
 * (bpf_skb_pull_data(skb, 0)). At these hooks that is cheap: forwarded pod
 * packets were uncloned by ip_forward's skb_cow already, and TCP's transmit
 * clones have private, linear-only headers (skb_header_release), so
 * skb_ensure_writable finds them writable without copying. Only packets a
 * packet socket cloned before tc ingress get their header copied, which a
 * helper write would have done for the translated ones anyway. */
static __always_inline int rewrite(struct __sk_buff *skb, struct pkt *p, int egress,
				   const __u32 *naddr, __be16 nport)
{
	const __u32 *oaddr = egress ? p->k.saddr : p->k.daddr;
	__be16 oport = egress ? p->k.sport : p->k.dport;
	int addr_changed = !addr_eq(oaddr, naddr);
	int port_changed = oport != nport;
	int summed = skb_ip_summed(skb);
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;

	/* parse checked these bounds; the verifier needs them again. */
	__u32 l4off = p->l4off;
	if (l4off > 74)
		return -1;
	__u8 *l4 = data + l4off;
	if ((void *)(l4 + 8) > end)
		return -1;
	if (addr_changed && p->family == 4) {
		struct iphdr_ *ip = data + sizeof(struct ethhdr_);
		if ((void *)(ip + 1) > end)
			return -1;
		__u32 o = oaddr[3], n = naddr[3];
		__u32 sum = (__u16)~ip->check;
		sum += (__u16)~(o & 0xffff);
		sum += (__u16)~(o >> 16);
		sum += n & 0xffff;
		sum += n >> 16;
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		ip->check = (__u16)~sum;
		if (egress)
			ip->saddr = n;
		else
			ip->daddr = n;
	} else if (addr_changed) {
		struct ipv6hdr_ *ip6 = data + sizeof(struct ethhdr_);
		if ((void *)(ip6 + 1) > end)
			return -1;
		addr_cpy(egress ? ip6->saddr : ip6->daddr, naddr);
	}
	if (port_changed) {
		/* port_off is the source or destination port (TCP, UDP) or the
		 * ICMP echo identifier, all within the first 6 bytes of l4. */
		__u32 off = p->port_off - l4off;
		if (off == 0)
			*(__be16 *)l4 = nport;
		else if (off == 2)
			*(__be16 *)(l4 + 2) = nport;
		else if (off == 4)
			*(__be16 *)(l4 + 4) = nport;
		else
			return -1;
	}

	if (summed == CSUM_COMPLETE)
		return l4_csum_helper(skb, p, addr_changed, oaddr, naddr, port_changed, oport, nport);
	/* The checksum field: UDP +6, TCP +16, ICMP +2. */
	__u32 coff = p->csum_off - l4off;
	if (coff > 16)
		return -1;
	__u16 *csum = (__u16 *)(l4 + coff);
	if ((void *)(csum + 1) > end)
		return -1;
	__u64 da = addr_changed && p->pseudo ? addr_diff(p, oaddr, naddr) : 0;
	l4_csum_inline(p, csum, summed == CSUM_PARTIAL, da, port_changed, oport, nport);
	return 0;
}

static __always_inline void refresh(struct ct_val *v)
{
	__u32 j = (__u32)bpf_jiffies64();
	if (j - v->tj >= TS_REFRESH_JIFFIES) {
		v->tj = j;
		v->ts = bpf_ktime_get_coarse_ns();
	}
}

/* allocate creates both conntrack entries for a new flow and returns the
 * NAT port in *out_port, or -1 when no port was free. */
static __always_inline int allocate(struct pkt *p, const __u32 *nat, int host, __be16 *out_port,
				    __u64 now)
{
	__u32 zero = 0;
	struct global_cfg *g = bpf_map_lookup_elem(&gcfg, &zero);
	__u32 pmin = 32768, pmax = 65535;
	if (g && g->port_min && g->port_max >= g->port_min) {
		pmin = g->port_min;
		pmax = g->port_max;
	}
	__u32 n = pmax - pmin + 1;

	struct ct_key rk = {};
	addr_cpy(rk.saddr, p->k.daddr);
	addr_cpy(rk.daddr, nat);
	rk.sport = p->k.dport;
	rk.proto = p->k.proto;
	rk.dir = DIR_INGRESS;

	struct ct_val rv = {};
	rv.ts = now;
	rv.tj = (__u32)bpf_jiffies64();
	addr_cpy(rv.addr, p->k.saddr);
	rv.port = p->k.sport;
	rv.flags = host ? CT_HOST : 0;

	__be16 port = p->k.sport;
	int ok = 0;
	int i;
#pragma clang loop unroll(disable)
	for (i = 0; i < MAX_PROBES; i++) {
		if (i > 0)
			port = bpf_htons((__u16)(pmin + bpf_get_prandom_u32() % n));
		rk.dport = port;
		if (bpf_map_update_elem(&ct, &rk, &rv, BPF_NOEXIST) == 0) {
			ok = 1;
			break;
		}
		/* The reply entry may be a leftover of this very flow whose
		 * egress entry was evicted or collected: adopt it. */
		struct ct_val *old = bpf_map_lookup_elem(&ct, &rk);
		if (old && old->port == p->k.sport && addr_eq(old->addr, p->k.saddr)) {
			old->ts = now;
			old->tj = rv.tj;
			old->flags = rv.flags;
			ok = 1;
			break;
		}
	}
	if (!ok) {
		stat_inc(STAT_ALLOC_FAIL);
		return -1;
	}

	struct ct_val ev = {};
	ev.ts = now;
	ev.tj = rv.tj;
	addr_cpy(ev.addr, nat);
	ev.port = port;
	ev.flags = rv.flags;
	if (bpf_map_update_elem(&ct, &p->k, &ev, BPF_ANY) < 0) {
		bpf_map_delete_elem(&ct, &rk);
		stat_inc(STAT_ALLOC_FAIL);
		return -1;
	}
	stat_inc(STAT_NEW_FLOWS);
	if (host)
		stat_inc(STAT_HOST_FLOWS);
	if (port != p->k.sport)
		stat_inc(STAT_PORT_REWRITES);
	*out_port = port;
	return 0;
}

/* tcp_track records FIN/RST in the entry of the packet's direction. A SYN
 * (a new connection on a reused tuple on the way out, its SYN-ACK on the
 * way back) clears the closing state of its own direction's entry: each
 * direction clears its own, so no packet looks up the other entry. */
static __always_inline void tcp_track(struct pkt *p, struct ct_val *v)
{
	__u8 f = p->tcpflags;
	if (f & TCP_FLAG_SYN) {
		if (v->flags & (CT_FIN | CT_RST))
			v->flags &= ~(CT_FIN | CT_RST);
		return;
	}
	if ((f & TCP_FLAG_FIN) && !(v->flags & CT_FIN))
		v->flags |= CT_FIN;
	if ((f & TCP_FLAG_RST) && !(v->flags & CT_RST))
		v->flags |= CT_RST;
}

SEC("tc")
int allot_snat_egress(struct __sk_buff *skb)
{
	struct pkt p = {};
	if (parse(skb, &p, 1) < 0)
		return TCX_NEXT;

	p.k.dir = DIR_EGRESS;
	__u32 naddr[4];
	__be16 nport;

	/* Established flows first (one hash lookup): their NAT binding is
	 * fixed for their lifetime, as with nf_conntrack, so a reload of the
	 * non-masquerade list never breaks them. */
	struct ct_val *v = bpf_map_lookup_elem(&ct, &p.k);
	if (v) {
		refresh(v);
		addr_cpy(naddr, v->addr);
		nport = v->port;
		if (p.k.proto == PROTO_TCP && p.tcpflags & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST))
			tcp_track(&p, v);
	} else {
		__u32 ifindex = skb->ifindex;
		struct snat_cfg *sc = bpf_map_lookup_elem(&snat_addrs, &ifindex);
		if (!sc)
			return TCX_NEXT;
		__u32 nat[4];
		if (p.family == 4) {
			if (!(sc->flags & CFG_HAS_V4))
				return TCX_NEXT;
			addr_cpy(nat, sc->addr4);
		} else {
			if (!(sc->flags & CFG_HAS_V6))
				return TCX_NEXT;
			addr_cpy(nat, sc->addr6);
		}
		int host = addr_eq(p.k.saddr, nat);
		if (!host && !lpm_match(&podcidrs, p.k.saddr))
			return TCX_NEXT;
		if (lpm_match(&nonmasq, p.k.daddr))
			return TCX_NEXT;
		if (allocate(&p, nat, host, &nport, bpf_ktime_get_coarse_ns()) < 0)
			return host ? TCX_NEXT : TCX_DROP; /* never leak a pod address */
		addr_cpy(naddr, nat);
	}

	if (nport == p.k.sport && addr_eq(naddr, p.k.saddr))
		return TCX_NEXT; /* identity mapping (host flow) */
	if (rewrite(skb, &p, 1, naddr, nport) < 0)
		return TCX_DROP;
	stat_inc(STAT_SNAT_PKTS);
	return TCX_NEXT;
}

SEC("tc")
int allot_snat_ingress(struct __sk_buff *skb)
{
	struct pkt p = {};
	if (parse(skb, &p, 0) < 0)
		return TCX_NEXT;

	p.k.dir = DIR_INGRESS;
	struct ct_val *v = bpf_map_lookup_elem(&ct, &p.k);
	if (!v)
		return TCX_NEXT;
	refresh(v);
	if (p.k.proto == PROTO_TCP && p.tcpflags & (TCP_FLAG_SYN | TCP_FLAG_FIN | TCP_FLAG_RST))
		tcp_track(&p, v);

	__u32 oaddr[4];
	addr_cpy(oaddr, v->addr);
	__be16 oport = v->port;
	if (oport == p.k.dport && addr_eq(oaddr, p.k.daddr))
		return TCX_NEXT;
	if (rewrite(skb, &p, 0, oaddr, oport) < 0)
		return TCX_DROP;
	stat_inc(STAT_RNAT_PKTS);
	return TCX_NEXT;
}

char __license[] SEC("license") = "Dual BSD/GPL";
