package enihost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/vishvananda/netlink"
)

// ErrMetadataUnreachable marks a PrimaryMAC error that says the instance metadata service did
// not answer at all (not on EC2, IMDS turned off, a hop limit): only then is the default
// route's link taken for the primary (the agent's check says the same while the node's ENI
// at device index 0 is not known yet). A service that answers wrongly is an error.
var ErrMetadataUnreachable = errors.New("instance metadata service unreachable")

// LinkByMAC is the link whose hardware address is mac: on EC2 the OS names an ENI's link as
// it likes (eth0, ens5, enX0), its MAC is the ENI's. The lowest ifindex wins when links share
// the MAC (a VLAN or a bond over the ENI's link), the one the OS created first.
func LinkByMAC(h *netlink.Handle, mac net.HardwareAddr) (netlink.Link, error) {
	ls, err := nl(h).LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var found netlink.Link
	for _, l := range ls {
		if bytes.Equal(l.Attrs().HardwareAddr, mac) && (found == nil || l.Attrs().Index < found.Attrs().Index) {
			found = l
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no link has MAC %s", mac)
	}
	return found, nil
}

// findPrimary names the primary ENI's link: o.Interface if given; else the link with the
// instance's primary MAC (o.PrimaryMAC: IMDS's latest/meta-data/mac, as the AWS VPC CNI
// finds it, or the node's ENI at device index 0), which holds whatever the routes say; else,
// only when there is no PrimaryMAC or the metadata service cannot be reached, PrimaryLink
// (the default route's link). The way it was found is logged and returned as why.
func findPrimary(ctx context.Context, o AcceptRAOptions, log *slog.Logger) (name, why string, err error) {
	if o.Interface != "" {
		return o.Interface, "given", checkLink(o.Handle, o.Interface)
	}
	if o.PrimaryMAC != nil {
		from := o.MACFrom
		if from == "" {
			from = "instance metadata"
		}
		mac, err := o.PrimaryMAC(ctx)
		if err == nil {
			l, err := LinkByMAC(o.Handle, mac)
			if err != nil {
				return "", "", fmt.Errorf("primary interface: primary MAC %s (from %s): %w", mac, from, err)
			}
			why = "primary MAC " + mac.String() + " from " + from
			log.Info("primary interface found", "interface", l.Attrs().Name, "by", why)
			return l.Attrs().Name, why, nil
		}
		if !errors.Is(err, ErrMetadataUnreachable) {
			return "", "", fmt.Errorf("primary interface: primary MAC from %s: %w", from, err)
		}
		log.Warn("primary MAC unknown: taking the default route's link for the primary interface", "from", from, "err", err)
	}
	name, why, err = PrimaryLink(o.Handle)
	if err == nil {
		log.Info("primary interface found", "interface", name, "by", why)
	}
	return name, why, err
}

// orDiscard is log, or a logger that drops everything when nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}
