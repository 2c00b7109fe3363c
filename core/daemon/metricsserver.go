package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsServer serves /metrics alone on http.metricsAddress, for a Prometheus that scrapes
// nodes from outside (Cilium's agent does the same on prometheus.serveAddr). The health
// listener stays on loopback: probes are local, and nothing else is exposed.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenMetrics opens the listener; an empty address gives nil (disabled).
func listenMetrics(addr string, reg *prometheus.Registry) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.metricsAddress: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return &metricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, nil
}

// Addr is the listener's address, or "" when disabled.
func (m *metricsServer) Addr() string {
	if m == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// serve answers until shutdown; a listener failure goes to errc.
func (m *metricsServer) serve(errc chan<- error) {
	if m != nil {
		go func() { errc <- serveUntilClosed(m.srv, m.ln) }()
	}
}

// shutdown stops the server, or closes a listener that never served.
func (m *metricsServer) shutdown(ctx context.Context) error {
	if m == nil {
		return nil
	}
	err := m.srv.Shutdown(ctx)
	// Shutdown closes the listener only if Serve ran.
	if cerr := m.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}
