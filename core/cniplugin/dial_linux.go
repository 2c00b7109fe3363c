package cniplugin

import (
	"context"
	"io"
	"os"
	"syscall"
	"time"
)

// dial connects to allotd's socket without the net package (whose start-up and size
// allot-cni does without) and waits for the answer in the runtime's poller: the goroutine
// parks, every P is idle and sysmon sleeps until the answer comes. A blocking read would
// leave its P in the syscall while an idle P exists, and sysmon then polls it every 20 µs
// (for up to 10 ms, tens of wake-ups per ADD); one P (GOMAXPROCS 1) avoids that but costs
// a stop of the world. A positive timeout and ctx's deadline become the file's deadline,
// and ctx's end moves it to the past, which wakes a parked read or write.
func dial(ctx context.Context, socket string, timeout time.Duration) (io.ReadWriteCloser, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if dl, ok := ctx.Deadline(); ok && (deadline.IsZero() || dl.Before(deadline)) {
		deadline = dl
	}
	if err := connect(ctx, fd, socket, deadline); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	// The socket is non-blocking, so os.NewFile registers it with the poller.
	f := os.NewFile(uintptr(fd), socket)
	if !deadline.IsZero() {
		_ = f.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetDeadline(time.Unix(1, 0)) })
	return &polledConn{File: f, stop: stop}, nil
}

// polledConn is the connected socket; Close also drops ctx's AfterFunc.
type polledConn struct {
	*os.File
	stop func() bool
}

func (c *polledConn) Close() error {
	c.stop()
	return c.File.Close()
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
