package cniplugin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/framing"
	"github.com/allot-ipam/allot/core/cniplugin/wire"
)

// ErrDaemonUnreachable wraps failures to connect to allotd at all (socket missing, refused),
// as opposed to allotd answering with an error.
var ErrDaemonUnreachable = errors.New("allotd is not reachable")

// socketClient speaks allotd's framed protocol (core/api/API.md, core/api/frame) with one
// request per connection. It exists instead of core/api/client because allot-cni is exec'd
// for every CNI call: it links no net/http (whose package initialisation and size cost about
// 2 ms per exec here, a third of the binary's start-up), no protobuf runtime (core/api/frame's
// generated codec; see package wire) and multiplexes nothing.
// The unit tests run it against the real core/api/server.
type socketClient struct {
	socket string
	// timeout, when positive, bounds the exchange besides ctx (the connection's deadline).
	// It ends as context.DeadlineExceeded.
	timeout time.Duration
}

// NewDaemon returns the Daemon for a socket path, bounded by each call's ctx.
func NewDaemon(socket string) Daemon { return &socketClient{socket: socket} }

// newTimedDaemon is NewDaemon with a timeout of its own: Plugin's default, so a call needs
// no ctx deadline (and its timer) besides the connection's.
func newTimedDaemon(socket string, timeout time.Duration) Daemon {
	return &socketClient{socket: socket, timeout: timeout}
}

func (c *socketClient) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	var out api.Allocation
	return &out, c.do(ctx, framing.OpAllocate,
		func(b []byte) []byte { return wire.AppendAllocateRequest(b, req) },
		func(b []byte) error { return wire.DecodeAllocation(b, &out) })
}

func (c *socketClient) Release(ctx context.Context, req *api.ReleaseRequest) error {
	return c.do(ctx, framing.OpRelease, func(b []byte) []byte { return wire.AppendReleaseRequest(b, req) }, nil)
}

func (c *socketClient) Check(ctx context.Context, req *api.CheckRequest) (*api.Allocation, error) {
	var out api.Allocation
	return &out, c.do(ctx, framing.OpCheck,
		func(b []byte) []byte { return wire.AppendCheckRequest(b, req) },
		func(b []byte) error { return wire.DecodeAllocation(b, &out) })
}

func (c *socketClient) GC(ctx context.Context, req *api.GCRequest) (*api.GCResponse, error) {
	var out api.GCResponse
	return &out, c.do(ctx, framing.OpGC,
		func(b []byte) []byte { return wire.AppendGCRequest(b, req) },
		func(b []byte) error { return wire.DecodeGCResponse(b, &out) })
}

func (c *socketClient) Status(ctx context.Context) (*api.Status, error) {
	var out api.Status
	return &out, c.do(ctx, framing.OpStatus, nil, func(b []byte) error { return wire.DecodeStatus(b, &out) })
}

// do runs one request: appendReq encodes it, decode reads the answer.
func (c *socketClient) do(ctx context.Context, op framing.Op, appendReq func([]byte) []byte, decode func([]byte) error) error {
	return c.session(ctx, op, func(conn io.ReadWriter) error { return exchangeFramed(conn, op, appendReq, decode) })
}

// errNotFramed: the daemon answered the framed preface with HTTP (an allotd older than the
// framed protocol, which allot-cni no longer speaks to).
var errNotFramed = errors.New("allotd answers HTTP: it predates the framed protocol (upgrade allotd)")

// exchangeFramed sends the preface and one request frame in one write and reads the
// daemon's preface and answer (core/api/frame).
func exchangeFramed(conn io.ReadWriter, op framing.Op, appendReq func([]byte) []byte, decode func([]byte) error) error {
	b := make([]byte, 0, 512)
	b = append(b, framing.Preface...)
	b, start := framing.Begin(b, 1, op)
	if appendReq != nil {
		b = appendReq(b)
	}
	if _, err := conn.Write(framing.End(b, start)); err != nil {
		return fmt.Errorf("allotd %s: send: %w", op, err)
	}
	r := bufio.NewReaderSize(conn, 4096)
	pre := make([]byte, len(framing.Preface))
	if _, err := io.ReadFull(r, pre); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// A daemon that closes without a word did not understand the preface.
			if strings.HasPrefix(string(pre), "HTTP/") {
				return fmt.Errorf("allotd %s: %w", op, errNotFramed)
			}
		}
		return fmt.Errorf("allotd %s: read answer: %w", op, err)
	}
	if string(pre) != framing.Preface {
		if strings.HasPrefix(string(pre), "HTTP/") {
			return fmt.Errorf("allotd %s: %w", op, errNotFramed)
		}
		return fmt.Errorf("allotd %s: unexpected answer %q", op, pre)
	}
	id, aop, payload, err := framing.NewReader(r).Next()
	if err != nil {
		return fmt.Errorf("allotd %s: read answer: %w", op, err)
	}
	switch {
	case id != 1:
		return fmt.Errorf("allotd %s: answer to request %d", op, id)
	case aop == framing.OpError:
		e, err := wire.DecodeError(payload)
		if err != nil {
			return fmt.Errorf("allotd %s: decode error answer: %w", op, err)
		}
		return e
	case aop != op:
		return fmt.Errorf("allotd %s: answer has op %s", op, aop)
	case decode == nil:
		return nil
	}
	if err := decode(payload); err != nil {
		return fmt.Errorf("allotd %s: decode answer: %w", op, err)
	}
	return nil
}

// session dials the daemon and runs one exchange on the connection, bounded by ctx (dial
// makes ctx's end interrupt a blocked read or write).
func (c *socketClient) session(ctx context.Context, op framing.Op, exchange func(io.ReadWriter) error) error {
	conn, err := dial(ctx, c.socket, c.timeout)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("allotd %s: %w", op, ctx.Err())
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("allotd %s: connect: %w", op, err)
		}
		return fmt.Errorf("%w at %s: %v", ErrDaemonUnreachable, c.socket, err)
	}
	defer conn.Close()
	err = exchange(conn)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return fmt.Errorf("allotd %s: %w", op, ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The connection's deadline (the ctx's) can fire a moment before the ctx's timer.
		return fmt.Errorf("allotd %s: %w", op, context.DeadlineExceeded)
	}
	return err
}
