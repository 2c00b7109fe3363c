package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/allot-ipam/allot/core/api/frame"
)

// errNotFramed: the daemon answered the framed preface with HTTP (an allotd older than the
// framed protocol); the client falls back to HTTP for good.
var errNotFramed = errors.New("allotd does not speak the framed protocol")

// muxConn is one framed connection carrying many requests at once. Requests are written by
// whoever finds no write in progress (others' frames queued meanwhile go in the same write);
// one reader goroutine routes answers to their callers by id.
type muxConn struct {
	c net.Conn

	mu       sync.Mutex
	pending  map[uint32]chan answer
	nextID   uint32
	buf      []byte
	spare    []byte
	flushing bool
	err      error // set once the connection is broken; every later call fails with it
}

type answer struct {
	op      frame.Op
	payload []byte
	err     error
}

func dialMux(ctx context.Context, socket string) (*muxConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	m := &muxConn{c: c, pending: map[uint32]chan answer{}}
	m.buf = append(m.buf, frame.Preface...)
	go m.readLoop()
	return m, nil
}

func (m *muxConn) broken() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err != nil
}

func (m *muxConn) close() { m.fail(net.ErrClosed) }

// fail breaks the connection and fails every pending call with err.
func (m *muxConn) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	p := m.pending
	m.pending = map[uint32]chan answer{}
	m.mu.Unlock()
	m.c.Close()
	for _, ch := range p {
		ch <- answer{err: err}
	}
}

func (m *muxConn) readLoop() {
	br := bufio.NewReaderSize(m.c, 16<<10)
	pre := make([]byte, len(frame.Preface))
	if _, err := io.ReadFull(br, pre); err != nil {
		m.fail(fmt.Errorf("read preface: %w", err))
		return
	}
	if string(pre) != frame.Preface {
		if strings.HasPrefix(string(pre), "HTTP/") {
			m.fail(errNotFramed)
		} else {
			m.fail(fmt.Errorf("bad preface %q", pre))
		}
		return
	}
	r := frame.NewReader(br)
	for {
		id, op, payload, err := r.Next()
		if err != nil {
			m.fail(fmt.Errorf("read answer: %w", err))
			return
		}
		m.mu.Lock()
		ch, ok := m.pending[id]
		delete(m.pending, id)
		m.mu.Unlock()
		if ok {
			ch <- answer{op: op, payload: append([]byte(nil), payload...)}
		}
	}
}

var chanPool = sync.Pool{New: func() any { return make(chan answer, 1) }}

// call sends one request and waits for its answer or ctx. A cancelled call leaves the
// request running in the daemon (the protocol has no cancellation); its answer is dropped.
func (m *muxConn) call(ctx context.Context, op frame.Op, appendPayload func([]byte) []byte) (answer, error) {
	ch := chanPool.Get().(chan answer)
	m.mu.Lock()
	if m.err != nil {
		err := m.err
		m.mu.Unlock()
		chanPool.Put(ch)
		return answer{}, err
	}
	m.nextID++
	id := m.nextID
	m.pending[id] = ch
	b, start := frame.Begin(m.buf, id, op)
	if appendPayload != nil {
		b = appendPayload(b)
	}
	m.buf = frame.End(b, start)
	if !m.flushing {
		m.flushing = true
		// Yield once before writing: the callers an answer burst woke run on this P after
		// one another, and yielding lets them queue their requests into this write rather
		// than each making a write system call of its own.
		m.mu.Unlock()
		runtime.Gosched()
		m.mu.Lock()
		for len(m.buf) > 0 && m.err == nil {
			out := m.buf
			m.buf = m.spare[:0]
			m.mu.Unlock()
			_, err := m.c.Write(out)
			m.mu.Lock()
			m.spare = out
			if err != nil {
				m.mu.Unlock()
				m.fail(fmt.Errorf("send: %w", err))
				m.mu.Lock()
			}
		}
		m.flushing = false
	}
	m.mu.Unlock()
	select {
	case a := <-ch:
		chanPool.Put(ch)
		return a, a.err
	case <-ctx.Done():
		m.mu.Lock()
		_, waiting := m.pending[id]
		delete(m.pending, id)
		m.mu.Unlock()
		if waiting {
			// No answer can arrive on ch any more; otherwise one is on its way and ch must
			// not be reused.
			chanPool.Put(ch)
		}
		return answer{}, ctx.Err()
	}
}

// framed is the framed transport of a Client: conns connections, used round-robin and
// redialled when broken.
type framed struct {
	socket string
	mu     sync.Mutex
	conns  []*muxConn
	next   atomic.Uint32
	// http is set once the daemon turned out not to speak the framed protocol.
	http atomic.Bool
}

func (f *framed) conn(ctx context.Context) (*muxConn, error) {
	i := int(f.next.Add(1)) % len(f.conns)
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.conns[i]; m != nil && !m.broken() {
		return m, nil
	}
	m, err := dialMux(ctx, f.socket)
	if err != nil {
		return nil, err
	}
	f.conns[i] = m
	return m, nil
}

func (f *framed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.conns {
		if m != nil {
			m.close()
			f.conns[i] = nil
		}
	}
}

// errFallback tells Client.do to use HTTP.
var errFallback = errors.New("fall back to HTTP")

// do runs one framed request; decode reads a successful answer's payload.
func (c *Client) doFramed(ctx context.Context, op frame.Op, appendPayload func([]byte) []byte, decode func([]byte) error) error {
	f := c.framed
	for attempt := 0; ; attempt++ {
		m, err := f.conn(ctx)
		if err != nil {
			if isDialError(err) {
				return fmt.Errorf("%w at %s: %v", ErrDaemonUnavailable, c.socket, unwrapDial(err))
			}
			return fmt.Errorf("allotd %s: %w", op, err)
		}
		a, err := m.call(ctx, op, appendPayload)
		switch {
		case errors.Is(err, errNotFramed):
			f.http.Store(true)
			return errFallback
		case err != nil && ctx.Err() == nil && attempt == 0 && isStale(err):
			// An idle connection the daemon closed (restart): one retry on a new one. The
			// request never reached a daemon that could have acted on it.
			continue
		case err != nil:
			return fmt.Errorf("allotd %s: %w", op, err)
		}
		if a.op == frame.OpError {
			e, derr := frame.DecodeError(a.payload)
			if derr != nil {
				return fmt.Errorf("allotd %s: decode error answer: %w", op, derr)
			}
			return e
		}
		if a.op != op {
			return fmt.Errorf("allotd %s: answer has op %s", op, a.op)
		}
		if decode == nil {
			return nil
		}
		if err := decode(a.payload); err != nil {
			return fmt.Errorf("allotd %s: decode answer: %w", op, err)
		}
		return nil
	}
}

// isStale reports errors of a connection closed under a request before any answer: the
// daemon restarted while the connection was idle. An answer lost after the daemon acted is
// possible too, but every operation is idempotent per owner, so a retry is safe.
func isStale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "connection reset")
}
