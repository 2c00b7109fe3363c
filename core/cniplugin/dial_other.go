//go:build !linux

package cniplugin

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// dial connects through the net package where dial_linux.go's plain socket is not written.
// A positive timeout becomes the connection's deadline.
func dial(ctx context.Context, socket string, timeout time.Duration) (io.ReadWriteCloser, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if timeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Now().Add(timeout).Before(dl) {
			_ = conn.SetDeadline(time.Now().Add(timeout))
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return stoppingConn{conn, stop}, nil
}

type stoppingConn struct {
	net.Conn
	stop func() bool
}

func (c stoppingConn) Close() error {
	c.stop()
	return c.Conn.Close()
}
