package cniplugin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
)

// serveHandler serves h on a unix socket in a temp dir.
func serveHandler(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "h.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

func TestSocketClientAnswers(t *testing.T) {
	big := `{"ready":true,"version":"` + strings.Repeat("x", 100000) + `","pools":[]}`
	tests := []struct {
		name    string
		handler http.HandlerFunc
		check   func(t *testing.T, st *api.Status, err error)
	}{
		{
			name: "large answer without Content-Length",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.Method != "GET" || r.URL.Path != "/v1/status" || r.ProtoMajor != 1 || r.ProtoMinor != 0 {
					http.Error(w, "bad request line", http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				for i := 0; i < len(big); i += 1000 {
					_, _ = w.Write([]byte(big[i:min(i+1000, len(big))]))
					w.(http.Flusher).Flush()
				}
			},
			check: func(t *testing.T, st *api.Status, err error) {
				if err != nil || !st.Ready || len(st.Version) != 100000 {
					t.Fatalf("status %v, err %v", st != nil && st.Ready, err)
				}
			},
		},
		{
			name: "API error",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"code":"unavailable","message":"closing"}`))
			},
			check: func(t *testing.T, _ *api.Status, err error) {
				var e *api.Error
				if !errors.As(err, &e) || e.Code != api.CodeUnavailable || e.Message != "closing" {
					t.Fatalf("err %v", err)
				}
			},
		},
		{
			name:    "non-JSON error",
			handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusBadGateway) },
			check: func(t *testing.T, _ *api.Status, err error) {
				if err == nil || !strings.Contains(err.Error(), "allotd /v1/status: unexpected answer 502 Bad Gateway") {
					t.Fatalf("err %v", err)
				}
			},
		},
		{
			name:    "bad JSON",
			handler: func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{"ready":`)) },
			check: func(t *testing.T, _ *api.Status, err error) {
				if err == nil || !strings.Contains(err.Error(), "allotd /v1/status: decode answer") {
					t.Fatalf("err %v", err)
				}
			},
		},
		{
			name: "connection dropped",
			handler: func(w http.ResponseWriter, r *http.Request) {
				c, _, _ := w.(http.Hijacker).Hijack()
				c.Close()
			},
			check: func(t *testing.T, _ *api.Status, err error) {
				if err == nil || errors.Is(err, ErrDaemonUnreachable) || !strings.Contains(err.Error(), "read answer") {
					t.Fatalf("err %v", err)
				}
			},
		},
		{
			name: "too slow",
			handler: func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-time.After(5 * time.Second):
				case <-r.Context().Done():
				}
			},
			check: func(t *testing.T, _ *api.Status, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err %v, want DeadlineExceeded", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewDaemon(serveHandler(t, tt.handler))
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			st, err := c.Status(ctx)
			tt.check(t, st, err)
		})
	}
}

func TestSocketClientCancel(t *testing.T) {
	// Cancelled once the request reached the daemon: the client stops waiting for its answer.
	ctx, cancel := context.WithCancel(context.Background())
	sock := serveHandler(t, func(w http.ResponseWriter, r *http.Request) { cancel(); <-r.Context().Done() })
	_, err := NewDaemon(sock).Allocate(ctx, &api.AllocateRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want Canceled", err)
	}
}

func TestSocketClientUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	err := NewDaemon(sock).Release(context.Background(), &api.ReleaseRequest{})
	if !errors.Is(err, ErrDaemonUnreachable) || err.Error() != "allotd is not reachable at "+sock+": connect: no such file or directory" {
		t.Fatalf("err %v", err)
	}
}
