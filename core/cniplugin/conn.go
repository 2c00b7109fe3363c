package cniplugin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/frame"
)

// ErrDaemonUnreachable wraps failures to connect to allotd at all (socket missing, refused),
// as opposed to allotd answering with an error.
var ErrDaemonUnreachable = errors.New("allotd is not reachable")

// maxAnswer bounds what is read from the daemon.
const maxAnswer = 16 << 20

// socketClient speaks allotd's local API (core/api/API.md) with one request per connection:
// the framed protocol (core/api/frame), or HTTP/1.0 with JSON bodies when allotd is older. It exists instead of core/api/client because
// allot-cni is exec'd for every CNI call: net/http's package initialisation and size cost
// about 2 ms per exec here (a third of the binary's start-up), for one request.
// The unit tests run it against the real core/api/server.
type socketClient struct {
	socket string
}

// NewDaemon returns the Daemon for a socket path; Plugin uses it unless Dial is set.
func NewDaemon(socket string) Daemon { return &socketClient{socket: socket} }

func (c *socketClient) Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error) {
	var out api.Allocation
	return &out, c.do(ctx, frame.OpAllocate, "POST", "/v1/allocate", req,
		func(b []byte) []byte { return frame.AppendAllocateRequest(b, req) },
		func(b []byte) error { return frame.DecodeAllocation(b, &out) }, &out)
}

func (c *socketClient) Release(ctx context.Context, req *api.ReleaseRequest) error {
	return c.do(ctx, frame.OpRelease, "POST", "/v1/release", req,
		func(b []byte) []byte { return frame.AppendReleaseRequest(b, req) }, nil, nil)
}

func (c *socketClient) Check(ctx context.Context, req *api.CheckRequest) (*api.Allocation, error) {
	var out api.Allocation
	return &out, c.do(ctx, frame.OpCheck, "POST", "/v1/check", req,
		func(b []byte) []byte { return frame.AppendCheckRequest(b, req) },
		func(b []byte) error { return frame.DecodeAllocation(b, &out) }, &out)
}

func (c *socketClient) GC(ctx context.Context, req *api.GCRequest) (*api.GCResponse, error) {
	var out api.GCResponse
	return &out, c.do(ctx, frame.OpGC, "POST", "/v1/gc", req,
		func(b []byte) []byte { return frame.AppendGCRequest(b, req) },
		func(b []byte) error { return frame.DecodeGCResponse(b, &out) }, &out)
}

func (c *socketClient) Status(ctx context.Context) (*api.Status, error) {
	var out api.Status
	return &out, c.do(ctx, frame.OpStatus, "GET", "/v1/status", nil, nil,
		func(b []byte) error { return json.Unmarshal(b, &out) }, &out)
}

// do runs one request: framed (appendReq encodes it, decode reads the answer), or, if the
// daemon predates the framed protocol, HTTP/JSON (in and out).
func (c *socketClient) do(ctx context.Context, op frame.Op, method, path string, in any,
	appendReq func([]byte) []byte, decode func([]byte) error, out any) error {
	err := c.session(ctx, path, func(conn net.Conn) error { return exchangeFramed(conn, op, appendReq, decode) })
	if !errors.Is(err, errNotFramed) {
		return err
	}
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s request: %w", path, err)
		}
		body = b
	}
	return c.session(ctx, path, func(conn net.Conn) error { return c.exchange(conn, method, path, body, out) })
}

// errNotFramed: the daemon answered the framed preface with HTTP (an allotd older than the
// framed protocol).
var errNotFramed = errors.New("allotd does not speak the framed protocol")

// exchangeFramed sends the preface and one request frame in one write and reads the
// daemon's preface and answer (core/api/frame).
func exchangeFramed(conn net.Conn, op frame.Op, appendReq func([]byte) []byte, decode func([]byte) error) error {
	b := make([]byte, 0, 512)
	b = append(b, frame.Preface...)
	b, start := frame.Begin(b, 1, op)
	if appendReq != nil {
		b = appendReq(b)
	}
	if _, err := conn.Write(frame.End(b, start)); err != nil {
		return fmt.Errorf("allotd %s: send: %w", op, err)
	}
	r := bufio.NewReaderSize(io.LimitReader(conn, maxAnswer), 4096)
	pre := make([]byte, len(frame.Preface))
	if _, err := io.ReadFull(r, pre); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// A daemon that closes without a word did not understand the preface.
			if strings.HasPrefix(string(pre), "HTTP/") {
				return errNotFramed
			}
		}
		return fmt.Errorf("allotd %s: read answer: %w", op, err)
	}
	if string(pre) != frame.Preface {
		if strings.HasPrefix(string(pre), "HTTP/") {
			return errNotFramed
		}
		return fmt.Errorf("allotd %s: unexpected answer %q", op, pre)
	}
	id, aop, payload, err := frame.NewReader(r).Next()
	if err != nil {
		return fmt.Errorf("allotd %s: read answer: %w", op, err)
	}
	switch {
	case id != 1:
		return fmt.Errorf("allotd %s: answer to request %d", op, id)
	case aop == frame.OpError:
		e, err := frame.DecodeError(payload)
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

// session dials the daemon and runs one exchange on the connection, bounded by ctx.
func (c *socketClient) session(ctx context.Context, path string, exchange func(net.Conn) error) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("allotd %s: %w", path, ctx.Err())
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return fmt.Errorf("%w at %s: %v", ErrDaemonUnreachable, c.socket, err)
	}
	defer conn.Close()
	// The ctx bounds the whole exchange: its deadline becomes the connection's, and a
	// cancellation interrupts blocked reads and writes.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	err = exchange(conn)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return fmt.Errorf("allotd %s: %w", path, ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The connection's deadline (the ctx's) can fire a moment before the ctx's timer.
		return fmt.Errorf("allotd %s: %w", path, context.DeadlineExceeded)
	}
	return err
}

// exchange sends an HTTP/1.0 request, so that the server closes the connection after the
// answer and never chunks it, and reads the answer.
func (c *socketClient) exchange(conn net.Conn, method, path string, body []byte, out any) error {
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.0\r\nHost: allotd\r\n", method, path)
	if body != nil {
		fmt.Fprintf(&req, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		return fmt.Errorf("allotd %s: send: %w", path, err)
	}

	r := bufio.NewReader(io.LimitReader(conn, maxAnswer))
	line, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("allotd %s: read answer: %w", path, err)
	}
	// "HTTP/1.1 200 OK"
	_, rest, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
	codeStr, status, _ := strings.Cut(rest, " ")
	code, err := strconv.Atoi(codeStr)
	if err != nil {
		return fmt.Errorf("allotd %s: bad status line %q", path, strings.TrimSpace(line))
	}
	length := -1
	for {
		h, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("allotd %s: read answer headers: %w", path, err)
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Content-Length") {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
				length = n
			}
		}
	}
	var data []byte
	if length >= 0 {
		data = make([]byte, length)
		_, err = io.ReadFull(r, data)
	} else {
		data, err = io.ReadAll(r)
	}
	if err != nil {
		return fmt.Errorf("allotd %s: read answer body: %w", path, err)
	}
	if code != 200 {
		var e api.Error
		if err := json.Unmarshal(data, &e); err != nil || e.Code == "" {
			return fmt.Errorf("allotd %s: unexpected answer %d %s", path, code, status)
		}
		return &e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("allotd %s: decode answer: %w", path, err)
	}
	return nil
}
