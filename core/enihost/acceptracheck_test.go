package enihost_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/allot-ipam/allot/core/enihost"
	"github.com/allot-ipam/allot/core/enihost/enihosttest"
	"github.com/allot-ipam/allot/internal/metricslint"
	"github.com/allot-ipam/allot/test/datapath/topo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var primaryMAC, _ = net.ParseMAC("02:00:00:00:05:05")

// TestPrimaryAcceptRAByPrimaryMAC: the primary is the link with the instance's primary MAC,
// although the default route leaves through another link; the default route's link is taken
// only when the metadata service cannot be reached (and the log says so); a MAC no link has,
// or a metadata error with an answer, is an error naming it.
func TestPrimaryAcceptRAByPrimaryMAC(t *testing.T) {
	n := enihosttest.NewMACNode(t, primaryMAC)
	var logs bytes.Buffer
	run := func(mac func(context.Context) (net.HardwareAddr, error)) (res enihost.AcceptRAResult, err error) {
		o := enihost.AcceptRAOptions{Handle: n.H, PrimaryMAC: mac, Log: slog.New(slog.NewTextHandler(&logs, nil))}
		err = topo.In(n.NS, func() error { res, err = enihost.SetPrimaryAcceptRA(t.Context(), o); return err })
		return res, err
	}
	macOf := func(m net.HardwareAddr, err error) func(context.Context) (net.HardwareAddr, error) {
		return func(context.Context) (net.HardwareAddr, error) { return m, err }
	}
	res, err := run(macOf(n.Primary, nil))
	if err != nil || res.Interface != "ens5" || res.Why != "primary MAC 02:00:00:00:05:05 from instance metadata" || !res.Changed {
		t.Fatalf("by the primary MAC: %+v %v", res, err)
	}
	if !strings.Contains(logs.String(), `msg="primary interface found" interface=ens5 by="primary MAC 02:00:00:00:05:05 from instance metadata"`) {
		t.Errorf("the log does not say how the primary was found: %s", logs.String())
	}
	logs.Reset()
	res, err = run(macOf(nil, errors.New("dial: connection refused: "+enihost.ErrMetadataUnreachable.Error())))
	if err == nil || !strings.Contains(err.Error(), "primary interface: primary MAC from instance metadata: dial") {
		t.Fatalf("a metadata error that is not enihost.ErrMetadataUnreachable: %+v %v", res, err)
	}
	res, err = run(macOf(nil, enihost.ErrMetadataUnreachable))
	if err != nil || res.Interface != "ens6" || res.Why != "IPv4 default route" {
		t.Fatalf("fallback: %+v %v", res, err)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"primary MAC unknown: taking the default route's link for the primary interface\"") {
		t.Errorf("the fallback is not logged: %s", logs.String())
	}
	other, _ := net.ParseMAC("02:00:00:00:09:09")
	if _, err := run(macOf(other, nil)); err == nil || !strings.Contains(err.Error(), "primary MAC 02:00:00:00:09:09 (from instance metadata): no link has MAC 02:00:00:00:09:09") {
		t.Fatalf("a MAC no link has: %v", err)
	}
}

// TestAcceptRAWatch: the agent's check warns once, naming the sysctl, its value, what is lost
// and the fix, when the primary ENI (by the node's ENI at device index 0) forwards at
// accept_ra 1; its gauge follows the sysctl and passes Prometheus' linter; it only runs
// while the node has IPv6 prefixes or pods.
func TestAcceptRAWatch(t *testing.T) {
	n := enihosttest.NewMACNode(t, primaryMAC)
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	w := enihost.NewAcceptRAWatch(reg, slog.New(slog.NewTextHandler(&logs, nil)))
	enis := []enihost.ENI{{Index: 0, MAC: n.Primary.String(), Subnet: netip.MustParsePrefix("10.1.0.0/24")}}
	v6 := []enihost.ENI{{Index: 0, MAC: n.Primary.String(), Subnet: netip.MustParsePrefix("10.1.0.0/24"), IPv6Prefixes: []netip.Prefix{netip.MustParsePrefix("2600:1f14:1:2:8f00::/80")}}}
	ctl := &enihost.Controller{Host: &enihost.Host{Handle: n.H}, AcceptRA: w}
	sync := func(e []enihost.ENI) {
		t.Helper()
		ctl.State = func(context.Context) ([]enihost.ENI, []enihost.Pod, error) { return e, nil, nil }
		if err := topo.In(n.NS, func() error { _, err := ctl.SyncOnce(t.Context()); return err }); err != nil {
			t.Fatal(err)
		}
	}
	atRisk := func() float64 {
		t.Helper()
		v, err := gaugeValue(reg, "allot_eni_ipv6_accept_ra_at_risk")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	n.SetSysctl("ens5", "accept_ra", "1")
	n.SetSysctl("all", "forwarding", "1")
	sync(enis)
	if logs.Len() != 0 {
		t.Fatalf("IPv4 only: the check ran: %s", logs.String())
	}
	for range 2 {
		sync(v6)
	}
	want := `level=WARN msg="net.ipv6.conf.ens5.accept_ra is not 2 while the node forwards IPv6: the kernel drops the node's IPv6 default route`
	if got := logs.String(); strings.Count(got, want) != 1 || !strings.Contains(got, "fix: the chart's eni.acceptRA=true (allotd accept-ra), or set net.ipv6.conf.ens5.accept_ra=2") ||
		!strings.Contains(got, `value=1 forwarding=1 interface=ens5 primary-by="primary MAC 02:00:00:00:05:05 from the node's ENI at device index 0"`) {
		t.Fatalf("want one warning naming the sysctl, its value, the loss and the fix: %s", got)
	}
	if v := atRisk(); v != 1 {
		t.Fatalf("allot_eni_ipv6_accept_ra_at_risk %v, want 1", v)
	}
	n.SetSysctl("ens5", "accept_ra", "2")
	sync(v6)
	if v := atRisk(); v != 0 || !strings.Contains(logs.String(), "net.ipv6.conf.ens5.accept_ra is 2") {
		t.Fatalf("accept_ra 2: gauge %v; %s", v, logs.String())
	}
	n.SetSysctl("ens5", "accept_ra", "1")
	n.SetSysctl("all", "forwarding", "0")
	sync(v6)
	if v := atRisk(); v != 0 || !strings.Contains(logs.String(), "level=INFO msg=\"net.ipv6.conf.ens5.accept_ra is not 2: the node's IPv6 default route goes when forwarding turns on") {
		t.Fatalf("forwarding off: gauge %v; %s", v, logs.String())
	}
	lintRegistry(t, reg, "allot_eni_ipv6_accept_ra_at_risk")
}

// gaugeValue is the value of the gauge name in reg.
func gaugeValue(reg *prometheus.Registry, name string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no gauge %s in %d families", name, len(mfs))
}

// lintRegistry checks that reg exposes name and that its metrics pass promlint.
func lintRegistry(t *testing.T, reg *prometheus.Registry, name string) {
	t.Helper()
	if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 1 {
		t.Fatalf("%s: %d series, %v", name, n, err)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	problems, err := metricslint.Text(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s", p)
	}
}
