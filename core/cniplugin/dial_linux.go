package cniplugin

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// dial connects to allotd's socket with a plain blocking socket. allot-cni makes one
// exchange per process, so the runtime's network poller (net.Dial) would only add its own
// set-up (an epoll instance, an eventfd, registrations) and a thread hand-off for every
// read: measurable in a process that lives about a millisecond. ctx still bounds
// everything: connecting retries a full backlog until ctx ends, and ctx ending shuts the
// socket down, which wakes a blocked read or write. A positive timeout bounds them too,
// through the kernel (SO_SNDTIMEO, SO_RCVTIMEO): that needs no runtime timer.
func dial(ctx context.Context, socket string, timeout time.Duration) (io.ReadWriteCloser, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := setup(ctx, fd, socket, timeout); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	c := &unixConn{fd: fd}
	c.stop = context.AfterFunc(ctx, c.shutdown)
	return c, nil
}

// setup connects the socket, makes it blocking and sets its timeouts.
func setup(ctx context.Context, fd int, socket string, timeout time.Duration) error {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if err := connect(ctx, fd, socket, deadline); err != nil {
		return err
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		return os.NewSyscallError("fcntl", err)
	}
	if timeout <= 0 {
		return nil
	}
	tv := syscall.NsecToTimeval(max(time.Until(deadline), time.Microsecond).Nanoseconds())
	for _, opt := range []int{syscall.SO_SNDTIMEO, syscall.SO_RCVTIMEO} {
		if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv); err != nil {
			return os.NewSyscallError("setsockopt", err)
		}
	}
	return nil
}

// connect connects the non-blocking socket. A unix socket connects at once or, when the
// listener's backlog is full, fails with EAGAIN: then it tries again until ctx ends or the
// deadline (if not zero) passes.
func connect(ctx context.Context, fd int, socket string, deadline time.Time) error {
	sa := &syscall.SockaddrUnix{Name: socket}
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		err := syscall.Connect(fd, sa)
		switch err {
		case nil:
			return nil
		case syscall.EAGAIN, syscall.EINTR:
		default:
			return os.NewSyscallError("connect", err)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// unixConn is a connected blocking unix socket.
type unixConn struct {
	fd   int
	stop func() bool
	mu   sync.Mutex // guards closed against a shutdown from ctx's AfterFunc
	// closed: the fd is closed (and its number may be reused).
	closed bool
}

func (c *unixConn) Read(b []byte) (int, error) {
	for {
		n, err := syscall.Read(c.fd, b)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			// SO_RCVTIMEO passed.
			return 0, fmt.Errorf("read: %w", os.ErrDeadlineExceeded)
		case err != nil:
			return 0, os.NewSyscallError("read", err)
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (c *unixConn) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := syscall.Write(c.fd, b[done:])
		switch err {
		case nil:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			// SO_SNDTIMEO passed.
			return done, fmt.Errorf("write: %w", os.ErrDeadlineExceeded)
		default:
			return done, os.NewSyscallError("write", err)
		}
		done += n
	}
	return done, nil
}

// shutdown wakes a blocked Read or Write (they then see end of file or EPIPE).
func (c *unixConn) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		_ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	}
}

func (c *unixConn) Close() error {
	c.stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return syscall.Close(c.fd)
}
