package enihost

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AcceptRAAll is the accept_ra value that keeps router advertisements working while the node
// forwards. The kernel takes nothing from an advertisement on a forwarding node unless
// accept_ra is 2, and turning net.ipv6.conf.all.forwarding on removes every RA-learnt
// default route of a link whose accept_ra is not 2 (rt6_purge_dflt_routers). The ptp plugin
// turns forwarding on at the first IPv6 pod: at 1 (the default) the node loses the IPv6
// default route of its primary ENI then and learns none again. The AWS VPC CNI's init
// container (aws-vpc-cni-init) sets it to 2 on the primary ENI for the same reason, and only
// there (secondary ENIs at 2 would put their default routes in the main table, see
// ipv6Router).
const AcceptRAAll = "2"

// AcceptRAOptions says where SetPrimaryAcceptRA works.
type AcceptRAOptions struct {
	// Interface is the primary ENI's link; empty: the link with PrimaryMAC's address, else
	// (no PrimaryMAC, or it wraps ErrMetadataUnreachable) PrimaryLink's.
	Interface string
	// PrimaryMAC reads the instance's primary MAC (IMDS's latest/meta-data/mac); MACFrom
	// says where from in logs and errors ("instance metadata" when empty).
	PrimaryMAC func(ctx context.Context) (net.HardwareAddr, error)
	MACFrom    string
	// ProcSys is where the sysctls are ("/proc/sys" when empty); they are those of the
	// calling thread's network namespace.
	ProcSys string
	// Handle reads links and routes (the calling thread's namespace when nil).
	Handle *netlink.Handle
	Log    *slog.Logger
}

// AcceptRAResult is what SetPrimaryAcceptRA found and did.
type AcceptRAResult struct {
	Interface string
	// Why the interface is the primary: "given", "primary MAC <mac> from <MACFrom>", "IPv6
	// default route", "IPv4 default route".
	Why string
	// Before is accept_ra as found; Changed is false when it already was 2.
	Before  string
	Changed bool
	// Solicited: a router solicitation went out, the link having no IPv6 default route.
	Solicited bool
}

// SetPrimaryAcceptRA sets net.ipv6.conf.<primary>.accept_ra to 2 (AcceptRAAll), so that the
// node keeps the IPv6 default route it learnt from the VPC router's advertisements once it
// forwards. Idempotent: a value already 2 is left alone. When it changed the value and the
// link has no IPv6 default route (already lost), it solicits the router, which answers with
// the advertisement that restores it. Nothing else is changed: forwarding stays the
// interface plugin's to turn on (ptp does at the first IPv6 pod), and with accept_ra at 2
// that no longer costs the route.
func SetPrimaryAcceptRA(ctx context.Context, o AcceptRAOptions) (AcceptRAResult, error) {
	log := orDiscard(o.Log)
	var res AcceptRAResult
	var err error
	res.Interface, res.Why, err = findPrimary(ctx, o, log)
	if err != nil {
		return res, err
	}
	name := "net.ipv6.conf." + res.Interface + ".accept_ra"
	p := ipv6Sysctl(o.ProcSys, res.Interface, "accept_ra")
	before, err := readSysctl(p)
	if errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("%s: interface %s has no IPv6 configuration (%s missing: IPv6 off in the kernel?)", name, res.Interface, p)
	}
	if err != nil {
		return res, fmt.Errorf("%s: interface %s: %w", name, res.Interface, err)
	}
	res.Before = before
	if before == AcceptRAAll {
		log.Info("sysctl already set", "sysctl", name, "value", before, "interface", res.Interface, "primary-by", res.Why)
		return res, nil
	}
	if err := os.WriteFile(p, []byte(AcceptRAAll), 0o644); err != nil {
		return res, fmt.Errorf("%s: interface %s: setting %s (was %s): %w (the container must be privileged: /proc/sys is read-only otherwise)",
			name, res.Interface, AcceptRAAll, before, err)
	}
	after, err := readSysctl(p)
	if err != nil || after != AcceptRAAll {
		return res, fmt.Errorf("%s: interface %s: reads %q after writing %s: %v", name, res.Interface, after, AcceptRAAll, err)
	}
	res.Changed = true
	log.Info("sysctl set", "sysctl", name, "from", before, "to", after, "interface", res.Interface, "primary-by", res.Why)
	res.Solicited = solicitIfNoRoute(nl(o.Handle), res.Interface, log)
	return res, nil
}

// solicitIfNoRoute sends a router solicitation on link when it holds no IPv6 default route:
// a node whose route forwarding already removed (an upgrade, the agent's first start after
// pods ran) would otherwise wait for the router's next unsolicited advertisement. Best
// effort: the sysctl is what matters, so a failure is only logged.
func solicitIfNoRoute(h *netlink.Handle, link string, log *slog.Logger) bool {
	l, err := h.LinkByName(link)
	if err != nil {
		log.Warn("router solicitation not sent", "interface", link, "err", err)
		return false
	}
	if idx, err := defaultRouteLink(h, netlink.FAMILY_V6); err == nil && idx == l.Attrs().Index {
		return false
	}
	if err := solicitRouter(l.Attrs().Index, l.Attrs().HardwareAddr); err != nil {
		log.Warn("router solicitation not sent", "interface", link, "err", err)
		return false
	}
	log.Info("no IPv6 default route: router solicitation sent", "interface", link)
	return true
}

// ndpSocket is a raw ICMPv6 socket for neighbour discovery messages, whose hop limit must be
// 255 (RFC 4861 6.1: a receiver drops others, as possibly from off link).
func ndpSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return -1, fmt.Errorf("raw ICMPv6 socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("raw ICMPv6 socket: hop limit: %w", err)
	}
	return fd, nil
}

// solicitRouter sends a router solicitation (RFC 4861 4.1) out of link to all routers, with
// the link's MAC as source link-layer address so the router can answer at once; the kernel
// picks the link-local source address and computes the checksum. The raw socket is in the
// calling thread's network namespace.
func solicitRouter(link int, mac net.HardwareAddr) error {
	fd, err := ndpSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	rs := []byte{133, 0, 0, 0, 0, 0, 0, 0}
	if len(mac) == 6 {
		rs = append(append(rs, 1, 1), mac...)
	}
	allRouters := [16]byte{0xff, 0x02, 15: 0x02}
	if err := unix.Sendto(fd, rs, 0, &unix.SockaddrInet6{Addr: allRouters, ZoneId: uint32(link)}); err != nil {
		return fmt.Errorf("send to ff02::2: %w", err)
	}
	return nil
}

// ipv6Sysctl is the path of net.ipv6.conf.<link>.<key> under procSys ("/proc/sys" when
// empty); the kernel's directory for an interface is named as the interface, dots included.
func ipv6Sysctl(procSys, link, key string) string {
	if procSys == "" {
		procSys = "/proc/sys"
	}
	return filepath.Join(procSys, "net", "ipv6", "conf", link, key)
}

func readSysctl(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

func checkLink(h *netlink.Handle, name string) error {
	if _, err := nl(h).LinkByName(name); err != nil {
		return fmt.Errorf("net.ipv6.conf.%s.accept_ra: interface %s: %w", name, name, err)
	}
	return nil
}

// nl is h, or a handle on the calling thread's namespace when h is nil.
func nl(h *netlink.Handle) *netlink.Handle {
	if h == nil {
		return &netlink.Handle{}
	}
	return h
}

// PrimaryLink is the node's primary ENI: the link of the main table's IPv6 default route
// (lowest metric), which is what accept_ra must protect; else, when there is none (not yet
// learnt, or already lost to forwarding), the link of the IPv4 default route, which on EC2
// leaves through the primary ENI (device index 0, the ENI that holds the node's address).
func PrimaryLink(h *netlink.Handle) (name, why string, err error) {
	for _, f := range []struct {
		family int
		why    string
	}{{netlink.FAMILY_V6, "IPv6 default route"}, {netlink.FAMILY_V4, "IPv4 default route"}} {
		idx, err := defaultRouteLink(nl(h), f.family)
		if err != nil {
			return "", "", fmt.Errorf("primary interface: %s: %w", f.why, err)
		}
		if idx == 0 {
			continue
		}
		l, err := nl(h).LinkByIndex(idx)
		if err != nil {
			return "", "", fmt.Errorf("primary interface: link %d of the %s: %w", idx, f.why, err)
		}
		return l.Attrs().Name, f.why, nil
	}
	return "", "", errors.New("primary interface: no IPv6 or IPv4 default route in the main table: name the interface (--interface)")
}

// defaultRouteLink is the link of the main table's default route of family with the lowest
// metric (the first hop of a multipath route), 0 if there is none.
func defaultRouteLink(h *netlink.Handle, family int) (int, error) {
	rs, err := h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return 0, err
	}
	link, metric := 0, 0
	for _, r := range rs {
		if r.Dst != nil && !isDefault(r.Dst) || r.Type != unix.RTN_UNICAST {
			continue
		}
		idx := r.LinkIndex
		if idx == 0 && len(r.MultiPath) > 0 {
			idx = r.MultiPath[0].LinkIndex
		}
		if idx != 0 && (link == 0 || r.Priority < metric) {
			link, metric = idx, r.Priority
		}
	}
	return link, nil
}
