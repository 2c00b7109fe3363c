package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
	"github.com/allot-ipam/allot/core/api/server"
)

// svc is a minimal api.Service: Allocate hands out 10.0.0.<n>, optionally waiting for gate.
type svc struct {
	mu     sync.Mutex
	allocs map[api.Owner]*api.Allocation
	gate   chan struct{}
	// entered, if set, receives a value when an Allocate starts waiting for gate.
	entered chan struct{}
}

func (s *svc) Allocate(ctx context.Context, r *api.AllocateRequest) (*api.Allocation, error) {
	if err := r.Owner.Validate(); err != nil {
		return nil, err
	}
	if s.gate != nil {
		if s.entered != nil {
			s.entered <- struct{}{}
		}
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.allocs[r.Owner]; a != nil {
		return a, nil
	}
	a := &api.Allocation{Owner: r.Owner, Network: r.Network, IPs: []api.IPConfig{{Address: "10.0.0." + string(rune('1'+len(s.allocs))) + "/24", Pool: "v4"}},
		Created: time.Unix(1700000000, 0)}
	s.allocs[r.Owner] = a
	return a, nil
}

func (s *svc) Release(_ context.Context, r *api.ReleaseRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.allocs, r.Owner)
	return nil
}

func (s *svc) Check(_ context.Context, r *api.CheckRequest) (*api.Allocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.allocs[r.Owner]; a != nil {
		return a, nil
	}
	return nil, api.Errorf(api.CodeNotFound, "%s holds nothing", r.Owner)
}

func (s *svc) GC(context.Context, *api.GCRequest) (*api.GCResponse, error) {
	return &api.GCResponse{Released: []api.Owner{}}, nil
}
func (s *svc) Status(context.Context) (*api.Status, error) {
	return &api.Status{Ready: true, Version: "test"}, nil
}
func (s *svc) Pools(context.Context) ([]api.PoolStatus, error) {
	return []api.PoolStatus{{Name: "v4"}}, nil
}
func (s *svc) Allocations(context.Context) ([]api.Allocation, error) { return nil, nil }
func (s *svc) Plugins(context.Context) ([]api.PluginStatus, error)   { return nil, nil }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func serve(t *testing.T, s api.Service) (string, *server.Server) {
	t.Helper()
	return serveOpts(t, s, server.Options{Limits: server.DefaultLimits})
}

// serveOpts serves s on a socket of its own until the test ends.
func serveOpts(t *testing.T, s api.Service, o server.Options) (string, *server.Server) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "a.sock")
	l, err := server.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	return sock, serveOnOpts(t, l, s, o)
}

// serveOn serves s on l until the test ends.
func serveOn(t *testing.T, l net.Listener, s api.Service) *server.Server {
	t.Helper()
	return serveOnOpts(t, l, s, server.Options{Limits: server.DefaultLimits})
}

func serveOnOpts(t *testing.T, l net.Listener, s api.Service, o server.Options) *server.Server {
	t.Helper()
	srv := server.NewWithOptions(s, quiet, o)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv
}

// TestBothProtocolsOnOneSocket runs the same calls over HTTP and framed clients.
func TestBothProtocolsOnOneSocket(t *testing.T) {
	sock, _ := serve(t, &svc{allocs: map[api.Owner]*api.Allocation{}})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		c    *client.Client
	}{
		{"framed", client.New(sock)},
		{"http", client.NewWithOptions(sock, client.Options{HTTP: true})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.c.Close()
			o := api.Owner{ContainerID: "c-" + tc.name, IfName: "eth0"}
			a, err := tc.c.Allocate(ctx, &api.AllocateRequest{Owner: o, Network: "n"})
			if err != nil || len(a.IPs) != 1 || a.Owner != o || !a.Created.Equal(time.Unix(1700000000, 0)) {
				t.Fatalf("allocate: %+v %v", a, err)
			}
			if _, err := tc.c.Check(ctx, &api.CheckRequest{Owner: o}); err != nil {
				t.Fatalf("check: %v", err)
			}
			_, err = tc.c.Allocate(ctx, &api.AllocateRequest{Owner: api.Owner{ContainerID: "c", IfName: "a/b"}})
			var e *api.Error
			if !errors.As(err, &e) || e.Code != api.CodeInvalid || e.Field != "owner.ifName" {
				t.Fatalf("invalid request: %v", err)
			}
			if err := tc.c.Release(ctx, &api.ReleaseRequest{Owner: o}); err != nil {
				t.Fatalf("release: %v", err)
			}
			if _, err := tc.c.Check(ctx, &api.CheckRequest{Owner: o}); api.CodeOf(err) != api.CodeNotFound {
				t.Fatalf("check after release: %v", err)
			}
			gc, err := tc.c.GC(ctx, &api.GCRequest{Network: "n", Valid: []api.Owner{}})
			if err != nil || gc.Released == nil {
				t.Fatalf("gc: %+v %v", gc, err)
			}
			st, err := tc.c.Status(ctx)
			if err != nil || !st.Ready || st.Version != "test" {
				t.Fatalf("status: %+v %v", st, err)
			}
			p, err := tc.c.Pools(ctx)
			if err != nil || len(p) != 1 {
				t.Fatalf("pools: %+v %v", p, err)
			}
		})
	}
}

// TestFramedPipelining: many concurrent calls on one framed connection, answered out of
// order, each reaching its own caller.
func TestFramedPipelining(t *testing.T) {
	sock, _ := serve(t, &svc{allocs: map[api.Owner]*api.Allocation{}})
	c := client.New(sock)
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := api.Owner{ContainerID: "c" + strings.Repeat("x", i), IfName: "eth0"}
			a, err := c.Allocate(context.Background(), &api.AllocateRequest{Owner: o})
			if err != nil || a.Owner != o {
				t.Errorf("%d: %+v %v", i, a, err)
			}
		}()
	}
	wg.Wait()
}

// TestShutdownFinishesRequestsInProgress: a framed request in progress at Shutdown is
// answered, not cut off or cancelled.
func TestShutdownFinishesRequestsInProgress(t *testing.T) {
	s := &svc{allocs: map[api.Owner]*api.Allocation{}, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	sock, srv := serve(t, s)
	c := client.New(sock)
	defer c.Close()
	got := make(chan error, 1)
	go func() {
		_, err := c.Allocate(context.Background(), &api.AllocateRequest{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}})
		got <- err
	}()
	<-s.entered // the request reached the service
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // sleep: Shutdown is under way (nothing to observe) before the answer

	close(s.gate)
	if err := <-got; err != nil {
		t.Fatalf("request in progress: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestClientFallsBackToHTTP: an allotd older than the framed protocol answers the preface
// with HTTP 400; the client then speaks HTTP.
func TestClientFallsBackToHTTP(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "old.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := server.NewHTTPServer(server.Handler(&svc{allocs: map[api.Owner]*api.Allocation{}}, quiet))
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	c := client.New(sock)
	defer c.Close()
	for range 2 {
		if a, err := c.Allocate(context.Background(), &api.AllocateRequest{Owner: api.Owner{ContainerID: "c", IfName: "eth0"}}); err != nil || len(a.IPs) != 1 {
			t.Fatalf("allocate: %+v %v", a, err)
		}
	}
}

func TestFramedClientReportsDaemonAbsent(t *testing.T) {
	c := client.New(filepath.Join(t.TempDir(), "none.sock"))
	_, err := c.Allocate(context.Background(), &api.AllocateRequest{})
	if !errors.Is(err, client.ErrDaemonUnavailable) {
		t.Fatalf("got %v", err)
	}
}
