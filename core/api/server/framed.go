package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/frame"
)

// sniffTimeout bounds how long a new connection may stay silent before its first byte tells
// HTTP from framed (as the HTTP server's ReadHeaderTimeout).
const sniffTimeout = 5 * time.Second

// maxInFlight bounds the requests one framed connection may have in progress; its reader
// stops reading until one finishes.
const maxInFlight = 256

// Server serves the local API on one listener in both protocols: HTTP/JSON (allotctl, older
// allot-cni, curl) and the framed binary protocol of core/api/frame (allot-cni, the Go
// client), told apart by a connection's first byte.
type Server struct {
	svc  api.Service
	log  *slog.Logger
	http *http.Server

	mu      sync.Mutex
	closing bool
	ln      net.Listener
	httpLn  *chanListener
	conns   map[*framedConn]struct{}
	connsWG sync.WaitGroup
	workers workers
	lim     *limiter
}

// Options tune a Server; the zero value means no admission limit and unregistered metrics.
type Options struct {
	Limits Limits
	// Metrics, if set, count admissions and refusals (NewMetrics registers them).
	Metrics *Metrics
}

// New returns a server for svc with DefaultLimits.
func New(svc api.Service, log *slog.Logger) *Server {
	return NewWithOptions(svc, log, Options{Limits: DefaultLimits})
}

// NewWithOptions returns a server for svc.
func NewWithOptions(svc api.Service, log *slog.Logger, o Options) *Server {
	lim := newLimiter(o.Limits, o.Metrics)
	return &Server{
		svc:     svc,
		log:     log,
		http:    NewHTTPServer(newHandler(svc, log, lim)),
		conns:   map[*framedConn]struct{}{},
		workers: workers{idle: make(chan func())},
		lim:     lim,
	}
}

// Serve accepts connections on l until Shutdown or Close; it then returns
// http.ErrServerClosed, like http.Server.Serve.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = l
	s.httpLn = newChanListener(l.Addr())
	s.mu.Unlock()
	httpDone := make(chan error, 1)
	go func() { httpDone <- s.http.Serve(s.httpLn) }()
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			_ = s.httpLn.Close()
			<-httpDone
			return err
		}
		go s.sniff(c)
	}
}

// sniff reads a connection's first byte: 0x00 (frame.Preface) is the framed protocol, any
// other byte goes to the HTTP server, with the byte given back.
func (s *Server) sniff(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(c, 4096)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if first[0] != frame.Preface[0] {
		if !s.httpLn.deliver(&peekedConn{Conn: c, r: br}) {
			c.Close()
		}
		return
	}
	pre := make([]byte, len(frame.Preface))
	if _, err := io.ReadFull(br, pre); err != nil || string(pre) != frame.Preface {
		s.log.Debug("api: bad framed preface", "preface", string(pre))
		c.Close()
		return
	}
	fc := &framedConn{s: s, c: c, r: frame.NewReader(br), sem: make(chan struct{}, maxInFlight)}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[fc] = struct{}{}
	s.connsWG.Add(1)
	s.mu.Unlock()
	fc.serve()
	s.mu.Lock()
	delete(s.conns, fc)
	s.mu.Unlock()
	s.connsWG.Done()
}

// Shutdown stops accepting, lets requests in progress finish and answer (HTTP and framed),
// then closes every connection; ctx bounds the wait.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	var err error
	if s.ln != nil {
		err = s.ln.Close()
	}
	for fc := range s.conns {
		fc.stopReading()
	}
	s.mu.Unlock()
	herr := s.http.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.connsWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		for fc := range s.conns {
			fc.c.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return errors.Join(err, herr)
}

// framedConn is one framed connection: a reader decodes each request and runs it in its own
// goroutine (an ADD waits for its fsync; others on the connection go on meanwhile), and
// answers are written as they complete.
type framedConn struct {
	s   *Server
	c   net.Conn
	r   *frame.Reader
	sem chan struct{}
	wg  sync.WaitGroup
	w   writer
	// stopped is set by Shutdown: requests in progress then finish rather than being cancelled.
	stopped atomic.Bool
}

// stopReading makes the reader stop at the next frame boundary without cutting answers short.
func (fc *framedConn) stopReading() {
	fc.stopped.Store(true)
	if cr, ok := fc.c.(interface{ CloseRead() error }); ok {
		_ = cr.CloseRead()
		return
	}
	_ = fc.c.SetReadDeadline(time.Unix(1, 0))
}

func (fc *framedConn) serve() {
	// The context of every request ends with the connection, as an HTTP request's does
	// when its client goes away (allot-cni gives up by closing).
	ctx, cancel := context.WithCancel(context.Background())
	fc.w.c = fc.c
	// Our preface goes out with the first answer.
	fc.w.buf = append(fc.w.buf, frame.Preface...)
	defer func() {
		fc.wg.Wait()
		cancel()
		fc.c.Close()
	}()
	for {
		id, op, payload, err := fc.r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				fc.s.log.Debug("api: framed connection ended", "err", err)
			}
			if !fc.stopped.Load() {
				cancel()
			}
			return
		}
		call, err := fc.decode(op, payload)
		if err != nil {
			fc.answerError(id, op, err)
			continue
		}
		fc.sem <- struct{}{}
		fc.wg.Add(1)
		fc.s.workers.run(func() {
			defer func() { <-fc.sem; fc.wg.Done() }()
			// Admission happens here, not in the reader: a request waiting for a slot must
			// not hold up the connection's other requests, nor the reading of its close.
			release, err := fc.s.lim.acquire(ctx)
			if err != nil {
				fc.answerError(id, op, err)
				return
			}
			defer release()
			fc.run(ctx, id, op, call)
		})
	}
}

// decode turns a request's payload into the call that serves it; decoding happens in the
// reader because the payload buffer is reused for the next frame.
func (fc *framedConn) decode(op frame.Op, p []byte) (func(context.Context, []byte) ([]byte, error), error) {
	svc := fc.s.svc
	switch op {
	case frame.OpAllocate:
		req := new(api.AllocateRequest)
		if err := frame.DecodeAllocateRequest(p, req); err != nil {
			return nil, err
		}
		return func(ctx context.Context, b []byte) ([]byte, error) {
			a, err := svc.Allocate(ctx, req)
			if err != nil {
				return b, err
			}
			return frame.AppendAllocation(b, a), nil
		}, nil
	case frame.OpRelease:
		req := new(api.ReleaseRequest)
		if err := frame.DecodeReleaseRequest(p, req); err != nil {
			return nil, err
		}
		return func(ctx context.Context, b []byte) ([]byte, error) { return b, svc.Release(ctx, req) }, nil
	case frame.OpCheck:
		req := new(api.CheckRequest)
		if err := frame.DecodeCheckRequest(p, req); err != nil {
			return nil, err
		}
		return func(ctx context.Context, b []byte) ([]byte, error) {
			a, err := svc.Check(ctx, req)
			if err != nil {
				return b, err
			}
			return frame.AppendAllocation(b, a), nil
		}, nil
	case frame.OpGC:
		req := new(api.GCRequest)
		if err := frame.DecodeGCRequest(p, req); err != nil {
			return nil, err
		}
		return func(ctx context.Context, b []byte) ([]byte, error) {
			r, err := svc.GC(ctx, req)
			if err != nil {
				return b, err
			}
			return frame.AppendGCResponse(b, r), nil
		}, nil
	case frame.OpStatus:
		return listCall(svc.Status, frame.AppendStatus), nil
	case frame.OpPools:
		return listCall(svc.Pools, frame.AppendPools), nil
	case frame.OpAllocations:
		return listCall(svc.Allocations, frame.AppendAllocations), nil
	case frame.OpPlugins:
		return listCall(svc.Plugins, frame.AppendPlugins), nil
	case frame.OpExplain:
		return explainCall(svc, p)
	}
	return nil, api.InvalidField("op", "unknown operation %d", uint8(op))
}

// listCall serves the operations without a request payload (status and the listings).
func listCall[T any](fn func(context.Context) (T, error), appendAnswer func([]byte, T) []byte) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, b []byte) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return b, err
		}
		return appendAnswer(b, v), nil
	}
}

func (fc *framedConn) run(ctx context.Context, id uint32, op frame.Op, call func(context.Context, []byte) ([]byte, error)) {
	bp := bufPool.Get().(*[]byte)
	b, start := frame.Begin((*bp)[:0], id, op)
	b, err := call(ctx, b)
	if err != nil {
		fc.answerError(id, op, err)
	} else {
		fc.w.write(frame.End(b, start))
	}
	*bp = b
	bufPool.Put(bp)
}

func (fc *framedConn) answerError(id uint32, op frame.Op, err error) {
	var e *api.Error
	if !errors.As(err, &e) {
		if isDecodeError(err) {
			e = &api.Error{Code: api.CodeInvalid, Field: "body", Message: err.Error()}
		} else {
			e = &api.Error{Code: api.CodeInternal, Message: err.Error()}
		}
	}
	if e.Code == api.CodeInternal {
		fc.s.log.Error("api request failed", "op", op.String(), "err", err)
	} else {
		fc.s.log.Debug("api request refused", "op", op.String(), "code", e.Code, "err", e.Error())
	}
	b, start := frame.Begin(nil, id, frame.OpError)
	fc.w.write(frame.End(frame.AppendError(b, e), start))
}

// isDecodeError: decoding errors are plain errors from core/api/frame (naming the field);
// service errors are *api.Error. Only the reader produces the former.
func isDecodeError(err error) bool {
	var e *api.Error
	return !errors.As(err, &e)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writer batches answers: whoever finds no write in progress writes, and keeps writing what
// others appended meanwhile, so concurrent answers share a write system call.
//
// Before its first write it yields once (runtime.Gosched): the answers of one store commit
// are made runnable together, and on a loaded P they would otherwise run one after another,
// each finding no write in progress and making its own write system call. Yielding lets the
// others append first, so one write carries them all; an idle server's yield returns at once.
type writer struct {
	c        net.Conn
	mu       sync.Mutex
	buf      []byte
	spare    []byte
	flushing bool
	err      error
}

func (w *writer) write(p []byte) {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return
	}
	w.buf = append(w.buf, p...)
	if w.flushing {
		w.mu.Unlock()
		return
	}
	w.flushing = true
	w.mu.Unlock()
	runtime.Gosched()
	w.mu.Lock()
	for len(w.buf) > 0 && w.err == nil {
		out := w.buf
		w.buf = w.spare[:0]
		w.mu.Unlock()
		_, err := w.c.Write(out)
		w.mu.Lock()
		w.spare = out
		if err != nil {
			w.err = err
		}
	}
	w.flushing = false
	w.mu.Unlock()
}

// chanListener hands the HTTP server the connections sniffed as HTTP.
type chanListener struct {
	addr   net.Addr
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// peekedConn reads through the sniffing buffer first.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// workerIdle is how long a request goroutine waits for the next request before it exits.
const workerIdle = 10 * time.Second

// workers runs framed requests on goroutines that live on between requests: a fresh
// goroutine per request grew its stack on every ADD (about 7% of a request's CPU).
type workers struct {
	idle chan func() // unbuffered: a send succeeds only if a worker is waiting
}

func (w *workers) run(f func()) {
	select {
	case w.idle <- f:
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(workerIdle)
		select {
		case f = <-w.idle:
		case <-t.C:
			return
		}
	}
}
