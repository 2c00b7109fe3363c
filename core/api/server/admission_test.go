package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
	"github.com/allot-ipam/allot/core/api/server"
	"github.com/allot-ipam/allot/internal/testenv"
)

// serveWith serves s with lim and a registry of its own for the server's metrics.
func serveWith(t *testing.T, s api.Service, lim server.Limits) (string, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	sock, _ := serveOpts(t, s, server.Options{Limits: lim, Metrics: server.NewMetrics(reg)})
	return sock, reg
}

func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{reason=%q} not found", name, reason)
	return 0
}

// TestBusy fills the only slot with an Allocate held in the service, then checks both ways a
// request is refused: at once when the queue is full, and after QueueWait when no slot
// comes. Both protocols answer with the same clear error, and the metric counts each.
func TestBusy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lim    server.Limits
		reason string
		want   string
		// minWait and maxWait bound how long the refusal took.
		minWait, maxWait time.Duration
	}{
		{"queue full", server.Limits{MaxInFlight: 1, MaxQueued: 0, QueueWait: time.Hour}, server.RejectQueueFull,
			"allotd busy: 1 requests in flight, retry", 0, 5 * time.Second},
		{"wait timeout", server.Limits{MaxInFlight: 1, MaxQueued: 4, QueueWait: 50 * time.Millisecond}, server.RejectWaitTimeout,
			"allotd busy: 1 requests in flight, retry", 50 * time.Millisecond, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &svc{allocs: map[api.Owner]*api.Allocation{}, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
			sock, reg := serveWith(t, s, tc.lim)
			ctx := context.Background()
			held := make(chan error, 1)
			framed := client.New(sock)
			defer framed.Close()
			go func() {
				_, err := framed.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "holder", IfName: "eth0"}})
				held <- err
			}()
			<-s.entered // the slot is taken until gate closes
			for i, c := range []*client.Client{framed, client.NewWithOptions(sock, client.Options{HTTP: true})} {
				begin := time.Now()
				_, err := c.Status(ctx)
				took := time.Since(begin)
				if !api.IsBusy(err) || api.CodeOf(err) != api.CodeUnavailable || err.Error() != tc.want {
					t.Fatalf("client %d: got %v (code %s); want %q", i, err, api.CodeOf(err), tc.want)
				}
				if took < tc.minWait || took > tc.maxWait {
					t.Errorf("client %d: refused after %s; want between %s and %s", i, took, tc.minWait, tc.maxWait)
				}
			}
			if n := counter(t, reg, "allot_api_requests_rejected_total", tc.reason); n != 2 {
				t.Errorf("rejected{reason=%s} = %v, want 2", tc.reason, n)
			}
			close(s.gate)
			if err := <-held; err != nil {
				t.Fatalf("the request holding the slot: %v", err)
			}
			// The slot is free again: requests pass. The server frees it just after the
			// holder's answer is written, so the client may see the answer a moment before.
			testenv.Eventually(t, 5*time.Second, "the freed slot", func() (bool, string) {
				_, err := framed.Status(ctx)
				if err != nil && !api.IsBusy(err) {
					t.Fatalf("after the slot was freed: %v", err)
				}
				return err == nil, fmt.Sprint(err)
			})
		})
	}
}

// TestBusyQuotedByCNI: the message survives as text (allot-cni quotes it), and IsBusy still
// recognises it; other unavailable errors are not busy.
func TestBusyQuotedByCNI(t *testing.T) {
	b := api.Busy(128, 3)
	if b.Error() != "allotd busy: 128 requests in flight and 3 waiting, retry" {
		t.Fatalf("message %q", b.Error())
	}
	if !api.IsBusy(errors.New("allotd cannot serve now: " + b.Error())) {
		t.Error("quoted busy error not recognised")
	}
	if api.IsBusy(api.Errorf(api.CodeUnavailable, "store: closed")) || api.IsBusy(nil) {
		t.Error("a non-busy error recognised as busy")
	}
	if !strings.HasPrefix(api.Busy(1, 0).Error(), "allotd busy: 1 requests in flight") {
		t.Error(api.Busy(1, 0).Error())
	}
}
