// Package client is the Go client of allotd's local API (core/api), used by allot-cni and
// allotctl.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/frame"
)

// ErrDaemonUnavailable wraps failures to reach the daemon at all (socket missing, refused),
// as opposed to the daemon answering with an error.
var ErrDaemonUnavailable = errors.New("allotd is not reachable")

// Client talks to allotd over its unix socket: the framed protocol (core/api/frame) unless
// the daemon is older than it or Options.HTTP is set, then HTTP/JSON. Safe for concurrent use.
type Client struct {
	socket string
	http   *http.Client
	framed *framed // nil: HTTP only
}

// Options tune a client; the zero value is the default.
type Options struct {
	// HTTP makes the client speak HTTP/JSON only (allotctl's debugging, benchmarks).
	HTTP bool
	// Conns is how many framed connections concurrent calls are spread over; each carries
	// any number of requests at once. Default 1.
	Conns int
}

// New returns a client for the daemon listening on socket.
func New(socket string) *Client { return NewWithOptions(socket, Options{}) }

// NewWithOptions returns a client for the daemon listening on socket.
func NewWithOptions(socket string, o Options) *Client {
	if socket == "" {
		socket = api.DefaultSocket
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	c := &Client{socket: socket, http: &http.Client{Transport: tr}}
	if !o.HTTP {
		c.framed = &framed{socket: socket, conns: make([]*muxConn, max(1, o.Conns))}
	}
	return c
}

// Socket is the socket path the client dials.
func (c *Client) Socket() string { return c.socket }

// Close releases idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
	if c.framed != nil {
		c.framed.close()
	}
}

// useFramed: the framed protocol, unless the daemon turned out not to speak it.
func (c *Client) useFramed() bool { return c.framed != nil && !c.framed.http.Load() }

func (c *Client) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	var out api.Allocation
	if c.useFramed() {
		err := c.doFramed(ctx, frame.OpAllocate, func(b []byte) []byte { return frame.AppendAllocateRequest(b, req) },
			func(b []byte) error { return frame.DecodeAllocation(b, &out) })
		if err != errFallback {
			return &out, err
		}
	}
	return &out, c.do(ctx, http.MethodPost, "/v1/allocate", req, &out)
}

func (c *Client) Release(ctx context.Context, req *api.ReleaseRequest) error {
	if c.useFramed() {
		err := c.doFramed(ctx, frame.OpRelease, func(b []byte) []byte { return frame.AppendReleaseRequest(b, req) }, nil)
		if err != errFallback {
			return err
		}
	}
	return c.do(ctx, http.MethodPost, "/v1/release", req, nil)
}

func (c *Client) Check(ctx context.Context, req *api.CheckRequest) (*api.Allocation, error) {
	var out api.Allocation
	if c.useFramed() {
		err := c.doFramed(ctx, frame.OpCheck, func(b []byte) []byte { return frame.AppendCheckRequest(b, req) },
			func(b []byte) error { return frame.DecodeAllocation(b, &out) })
		if err != errFallback {
			return &out, err
		}
	}
	return &out, c.do(ctx, http.MethodPost, "/v1/check", req, &out)
}

func (c *Client) GC(ctx context.Context, req *api.GCRequest) (*api.GCResponse, error) {
	var out api.GCResponse
	if c.useFramed() {
		err := c.doFramed(ctx, frame.OpGC, func(b []byte) []byte { return frame.AppendGCRequest(b, req) },
			func(b []byte) error { return frame.DecodeGCResponse(b, &out) })
		if err != errFallback {
			return &out, err
		}
	}
	return &out, c.do(ctx, http.MethodPost, "/v1/gc", req, &out)
}

func (c *Client) Status(ctx context.Context) (*api.Status, error) {
	var out api.Status
	if c.useFramed() {
		if err := c.doFramed(ctx, frame.OpStatus, nil, func(b []byte) error { return frame.DecodeStatus(b, &out) }); err != errFallback {
			return &out, err
		}
	}
	return &out, c.do(ctx, http.MethodGet, "/v1/status", nil, &out)
}

func (c *Client) Pools(ctx context.Context) ([]api.PoolStatus, error) {
	var out []api.PoolStatus
	if c.useFramed() {
		if err := c.doFramed(ctx, frame.OpPools, nil, func(b []byte) (err error) { out, err = frame.DecodePools(b); return err }); err != errFallback {
			return out, err
		}
	}
	return out, c.do(ctx, http.MethodGet, "/v1/pools", nil, &out)
}

func (c *Client) Allocations(ctx context.Context) ([]api.Allocation, error) {
	var out []api.Allocation
	if c.useFramed() {
		if err := c.doFramed(ctx, frame.OpAllocations, nil, func(b []byte) (err error) { out, err = frame.DecodeAllocations(b); return err }); err != errFallback {
			return out, err
		}
	}
	return out, c.do(ctx, http.MethodGet, "/v1/allocations", nil, &out)
}

func (c *Client) Plugins(ctx context.Context) ([]api.PluginStatus, error) {
	var out []api.PluginStatus
	if c.useFramed() {
		if err := c.doFramed(ctx, frame.OpPlugins, nil, func(b []byte) (err error) { out, err = frame.DecodePlugins(b); return err }); err != errFallback {
			return out, err
		}
	}
	return out, c.do(ctx, http.MethodGet, "/v1/plugins", nil, &out)
}

var _ api.Service = (*Client)(nil)

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s request: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://allotd"+path, body)
	if err != nil {
		return fmt.Errorf("build %s request: %w", path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if isDialError(err) {
			return fmt.Errorf("%w at %s: %v", ErrDaemonUnavailable, c.socket, unwrapDial(err))
		}
		return fmt.Errorf("allotd %s: %w", path, err)
	}
	// Drain before closing: the server's encoder ends the body with a newline the decoder
	// does not read, and an unread body keeps the connection from being reused (a new
	// connection per request tripled the CPU cost of a request).
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Code == "" {
			return fmt.Errorf("allotd %s: unexpected answer %s", path, resp.Status)
		}
		return &e
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("allotd %s: decode answer: %w", path, err)
	}
	return nil
}

func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

func unwrapDial(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
