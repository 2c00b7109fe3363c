package cniplugin

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/frame"
)

// answerFunc writes the answer to the request frame (id, op, payload) read from conn.
type answerFunc func(t *testing.T, conn net.Conn, id uint32, op frame.Op, payload []byte)

// serveFramed serves one scripted answer per connection on a unix socket in a temp dir: it
// reads the preface and one frame, as allotd does, and lets answer reply.
func serveFramed(t *testing.T, answer answerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "f.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				pre := make([]byte, len(frame.Preface))
				if _, err := io.ReadFull(r, pre); err != nil {
					return
				}
				id, op, payload, err := frame.NewReader(r).Next()
				if err != nil {
					return
				}
				answer(t, conn, id, op, payload)
			}()
		}
	}()
	return sock
}

// answerWith writes the preface and one frame.
func answerWith(op frame.Op, payload []byte) answerFunc {
	return func(t *testing.T, conn net.Conn, id uint32, _ frame.Op, _ []byte) {
		_, _ = conn.Write(frame.Append([]byte(frame.Preface), id, op, payload))
	}
}

func TestSocketClientAnswers(t *testing.T) {
	big := &api.Status{Ready: true, Version: strings.Repeat("x", 100000), Pools: []api.PoolStatus{{Name: "p", CIDRs: []string{"10.0.0.0/8"}}}}
	tests := []struct {
		name   string
		answer answerFunc
		check  func(t *testing.T, st *api.Status, err error)
	}{
		{
			name: "large answer in pieces",
			answer: func(t *testing.T, conn net.Conn, id uint32, op frame.Op, _ []byte) {
				if op != frame.OpStatus {
					t.Errorf("op %s, want status", op)
				}
				b := frame.Append([]byte(frame.Preface), id, op, frame.AppendStatus(nil, big))
				for i := 0; i < len(b); i += 1000 {
					_, _ = conn.Write(b[i:min(i+1000, len(b))])
				}
			},
			check: func(t *testing.T, st *api.Status, err error) {
				if err != nil || !st.Ready || len(st.Version) != 100000 || st.Pools[0].CIDRs[0] != "10.0.0.0/8" {
					t.Fatalf("status %v, err %v", st != nil && st.Ready, err)
				}
			},
		},
		{
			name:   "API error",
			answer: answerWith(frame.OpError, frame.AppendError(nil, &api.Error{Code: api.CodeUnavailable, Message: "closing"})),
			check: func(t *testing.T, _ *api.Status, err error) {
				var e *api.Error
				if !errors.As(err, &e) || e.Code != api.CodeUnavailable || e.Message != "closing" {
					t.Fatalf("err %v", err)
				}
			},
		},
		{
			name: "an allotd that answers HTTP",
			answer: func(t *testing.T, conn net.Conn, _ uint32, _ frame.Op, _ []byte) {
				_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
			},
			check: func(t *testing.T, _ *api.Status, err error) {
				if !errors.Is(err, errNotFramed) || !strings.Contains(err.Error(), "allotd status: allotd answers HTTP") {
					t.Fatalf("err %v", err)
				}
			},
		},
		{
			name:   "bad payload",
			answer: answerWith(frame.OpStatus, []byte{0x12, 9, 'x'}),
			check: func(t *testing.T, _ *api.Status, err error) {
				if err == nil || !strings.Contains(err.Error(), "allotd status: decode answer: status: field 2: length runs past") {
					t.Fatalf("err %v", err)
				}
			},
		},
		{
			name:   "connection dropped",
			answer: func(t *testing.T, conn net.Conn, _ uint32, _ frame.Op, _ []byte) {},
			check: func(t *testing.T, _ *api.Status, err error) {
				if err == nil || errors.Is(err, ErrDaemonUnreachable) || !strings.Contains(err.Error(), "read answer") {
					t.Fatalf("err %v", err)
				}
			},
		},
		{
			name: "too slow",
			answer: func(t *testing.T, conn net.Conn, _ uint32, _ frame.Op, _ []byte) {
				_, _ = conn.Read(make([]byte, 1)) // until the client gives up
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
			c := NewDaemon(serveFramed(t, tt.answer))
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
	sock := serveFramed(t, func(t *testing.T, conn net.Conn, _ uint32, _ frame.Op, _ []byte) {
		cancel()
		_, _ = conn.Read(make([]byte, 1)) // until the client gives up
	})
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

func TestSocketClientTimeout(t *testing.T) {
	// The timeout the socket enforces (Plugin's default client) ends a wait for an answer
	// that never comes as DeadlineExceeded, with no ctx deadline.
	sock := serveFramed(t, func(t *testing.T, conn net.Conn, _ uint32, _ frame.Op, _ []byte) {
		_, _ = conn.Read(make([]byte, 1)) // until the client gives up
	})
	_, err := newTimedDaemon(sock, 50*time.Millisecond).Allocate(context.Background(), &api.AllocateRequest{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
}
