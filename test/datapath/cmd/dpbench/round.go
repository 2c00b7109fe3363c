package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"time"

	"github.com/allot-ipam/allot/test/datapath/connrate"
	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/vishvananda/netns"
)

// measureRound applies every datapath on a topology of its own at once and
// runs each phase in slices that alternate between them (the order rotates
// each slice), so that the load from the rest of a shared machine, which
// drifts over seconds, falls on all of them alike: a round's ratios then
// compare figures taken in the same seconds, not runs a minute apart. The
// figures of a datapath are over its slices (duration in total).
func measureRound(names []string, log *slog.Logger) (_ []figures, err error) {
	var rigs []*rig
	defer func() {
		for _, r := range rigs {
			err = errors.Join(err, r.close())
		}
	}()
	for _, name := range names {
		r, err := newRig(name, newDatapath(name, log))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rigs = append(rigs, r)
	}
	sl := max(time.Second, slice.Truncate(time.Second))
	n := max(1, int(*duration/sl))
	acc := make([]sliceSums, len(rigs))
	for _, phase := range []func(*rig, *sliceSums, time.Duration) error{tcpSlice, udpSlice, connSlice} {
		for s := range n {
			for j := range rigs {
				i := (j + s) % len(rigs)
				if err := phase(rigs[i], &acc[i], sl); err != nil {
					return nil, fmt.Errorf("%s: %w", rigs[i].name, err)
				}
			}
		}
	}
	out := make([]figures, len(rigs))
	for i := range acc {
		out[i] = acc[i].figures()
	}
	return out, nil
}

// sliceSums adds up a datapath's slices.
type sliceSums struct {
	tcpBits, tcpSecs float64
	udpPkts, udpSecs float64
	conns            int64
	connSecs         float64
	connFail         int64
	connP99          []float64 // per slice, ns
}

func (a *sliceSums) figures() figures {
	return figures{
		tcpGbps:  div(a.tcpBits, a.tcpSecs) / 1e9,
		udpKpps:  div(a.udpPkts, a.udpSecs) / 1e3,
		connPerS: div(float64(a.conns), a.connSecs),
		connFail: a.connFail,
		connP99:  time.Duration(median(a.connP99)),
	}
}

func tcpSlice(r *rig, a *sliceSums, d time.Duration) error {
	out, err := iperfClient(r.tp, "-c", topo.Ext4.String(), "-p", fmt.Sprint(iperfPort), "-t", secs(d), "-J")
	if err != nil {
		return fmt.Errorf("iperf3 tcp: %w", err)
	}
	a.tcpBits += out.End.SumReceived.BitsPerSecond * d.Seconds()
	a.tcpSecs += d.Seconds()
	return nil
}

func udpSlice(r *rig, a *sliceSums, d time.Duration) error {
	out, err := iperfClient(r.tp, "-c", topo.Ext4.String(), "-p", fmt.Sprint(iperfPort), "-u", "-l", "64", "-b", "0", "-t", secs(d), "-J")
	if err != nil {
		return fmt.Errorf("iperf3 udp: %w", err)
	}
	a.udpPkts += float64(out.End.Sum.Packets - out.End.Sum.LostPackets)
	a.udpSecs += out.End.Sum.Seconds
	return nil
}

func connSlice(r *rig, a *sliceSums, d time.Duration) error {
	res := connRun(context.Background(), r.tp, d)
	a.conns += res.Conns
	a.connSecs += res.Elapsed.Seconds()
	a.connFail += res.Failed
	a.connP99 = append(a.connP99, float64(res.P99))
	return nil
}

// connRun runs the conn/s loops from pod1 to the external server for d.
func connRun(ctx context.Context, tp *topo.Topology, d time.Duration) connrate.Result {
	dst := netip.AddrPortFrom(topo.Ext4, uint16(crrPort)).String()
	dialer := net.Dialer{Timeout: 5 * time.Second}
	wrap := func(fn func()) {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := netns.Set(tp.Pods[0]); err != nil {
			panic(err)
		}
		fn()
	}
	return connrate.Run(ctx, func() (net.Conn, error) { return dialer.Dial("tcp", dst) }, wrap, *workers, d)
}
