package enihost

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

// AcceptRAState is the primary ENI's router-advertisement state as CheckAcceptRA read it.
type AcceptRAState struct {
	Interface, Why string
	// AcceptRA and Forwarding are net.ipv6.conf.<Interface>.accept_ra and .forwarding (the
	// latter follows net.ipv6.conf.all.forwarding, which ptp turns on).
	AcceptRA, Forwarding string
}

// AtRisk reports whether the kernel drops the primary's RA-learnt IPv6 default route (or
// dropped it already): it forwards and accept_ra is not 2 (see AcceptRAAll).
func (s AcceptRAState) AtRisk() bool { return s.AcceptRA != AcceptRAAll && s.Forwarding != "0" }

// CheckAcceptRA reads the primary ENI's accept_ra and forwarding, the primary found as
// SetPrimaryAcceptRA finds it; it changes nothing (the agent is not privileged).
func CheckAcceptRA(ctx context.Context, o AcceptRAOptions) (AcceptRAState, error) {
	var s AcceptRAState
	var err error
	if s.Interface, s.Why, err = findPrimary(ctx, o, orDiscard(o.Log)); err != nil {
		return s, err
	}
	for _, v := range []struct {
		key string
		to  *string
	}{{"accept_ra", &s.AcceptRA}, {"forwarding", &s.Forwarding}} {
		if *v.to, err = readSysctl(ipv6Sysctl(o.ProcSys, s.Interface, v.key)); err != nil {
			return s, fmt.Errorf("net.ipv6.conf.%s.%s: interface %s: %w", s.Interface, v.key, s.Interface, err)
		}
	}
	return s, nil
}

// AcceptRAWatch is the agent's check, in ENI mode with IPv6, that the node keeps its IPv6
// default route once it forwards: the chart's accept-ra init container sets the sysctl, but
// with eni.acceptRA=false (or the container not run) nothing else would say it is missing
// until the node loses IPv6 egress. It logs one warning per distinct state and keeps a gauge
// that alerts can use.
type AcceptRAWatch struct {
	// ProcSys is where the sysctls are ("/proc/sys" when empty).
	ProcSys string
	Log     *slog.Logger
	atRisk  prometheus.Gauge
	last    string
}

// NewAcceptRAWatch registers the gauge allot_eni_ipv6_accept_ra_at_risk with reg (if set).
func NewAcceptRAWatch(reg prometheus.Registerer, log *slog.Logger) *AcceptRAWatch {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_eni_ipv6_accept_ra_at_risk",
		Help: "1 when the primary ENI's net.ipv6.conf.<if>.accept_ra is not 2 while the node forwards IPv6: " +
			"the kernel drops the IPv6 default route learnt from router advertisements (chart eni.acceptRA=true sets it); 0 otherwise.",
	})
	if reg != nil {
		reg.MustRegister(g)
	}
	return &AcceptRAWatch{Log: orDiscard(log), atRisk: g}
}

// Check reads the state of the primary ENI, the link with the MAC of enis' device index 0
// (the default route's link while that ENI is not known yet), sets the gauge and logs when
// the state changed. Errors are logged (once) and leave the gauge as it was.
func (w *AcceptRAWatch) Check(ctx context.Context, h *Host, enis []ENI) {
	o := AcceptRAOptions{ProcSys: w.ProcSys, Handle: h.Handle, MACFrom: "the node's ENI at device index 0"}
	o.PrimaryMAC = func(context.Context) (net.HardwareAddr, error) { return primaryENIMAC(enis) }
	s, err := CheckAcceptRA(ctx, o)
	if err != nil {
		w.report("error "+err.Error(), func() { w.Log.Warn("cannot check the primary ENI's accept_ra", "err", err) })
		return
	}
	if s.AtRisk() {
		w.atRisk.Set(1)
	} else {
		w.atRisk.Set(0)
	}
	w.report(fmt.Sprintf("%+v", s), func() { w.logState(s) })
}

func (w *AcceptRAWatch) report(key string, log func()) {
	if key != w.last {
		log()
	}
	w.last = key
}

func (w *AcceptRAWatch) logState(s AcceptRAState) {
	name := "net.ipv6.conf." + s.Interface + ".accept_ra"
	attrs := []any{"sysctl", name, "value", s.AcceptRA, "forwarding", s.Forwarding, "interface", s.Interface, "primary-by", s.Why}
	switch {
	case s.AtRisk():
		w.Log.Warn(name+" is not 2 while the node forwards IPv6: the kernel drops the node's IPv6 default route "+
			"(learnt from router advertisements) once it forwards, as ptp makes it at the first IPv6 pod, and learns no other: "+
			"the node and the pods on the primary ENI lose IPv6 egress; "+
			"fix: the chart's eni.acceptRA=true (allotd accept-ra), or set "+name+"=2 on the node (sysctl.d)", attrs...)
	case s.AcceptRA != AcceptRAAll:
		w.Log.Info(name+" is not 2: the node's IPv6 default route goes when forwarding turns on (ptp does at the first IPv6 pod); "+
			"fix: the chart's eni.acceptRA=true (allotd accept-ra), or set "+name+"=2 on the node (sysctl.d)", attrs...)
	default:
		w.Log.Info(name+" is 2: the node keeps its IPv6 default route while it forwards", attrs...)
	}
}

// primaryENIMAC is the MAC of the ENI at device index 0; ErrMetadataUnreachable when the
// node's ENIs are not known yet.
func primaryENIMAC(enis []ENI) (net.HardwareAddr, error) {
	for _, e := range enis {
		if e.Index == 0 && e.MAC != "" {
			mac, err := net.ParseMAC(e.MAC)
			if err != nil {
				return nil, fmt.Errorf("ENI 0: MAC %q: %w", e.MAC, err)
			}
			return mac, nil
		}
	}
	return nil, fmt.Errorf("%w: the node's ENI at device index 0 is not known yet", ErrMetadataUnreachable)
}

// usesIPv6 reports whether the node has IPv6 pods or IPv6 prefixes to give them.
func usesIPv6(enis []ENI, pods []Pod) bool {
	for _, e := range enis {
		if len(e.IPv6Prefixes) > 0 {
			return true
		}
	}
	for _, p := range pods {
		if p.Addr.Is6() {
			return true
		}
	}
	return false
}
