// Package connrate measures TCP connections per second: each transaction
// connects, sends a one-byte request, reads a one-byte response and
// closes (netperf's TCP_CRR, which Debian does not package).
package connrate

import (
	"context"
	"errors"
	"io"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Serve answers every connection on ln with one byte per byte received
// until the client closes. It returns when ln is closed.
func Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go func() {
			defer c.Close()
			var b [1]byte
			for {
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return
				}
				if _, err := c.Write(b[:]); err != nil {
					return
				}
			}
		}()
	}
}

// Result of a run.
type Result struct {
	Conns    int64         // completed transactions
	Failed   int64         // transactions that failed (connect, I/O or timeout)
	Elapsed  time.Duration //
	P50, P99 time.Duration // transaction latency
	Max      time.Duration
}

// PerSecond is the rate of completed transactions.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Conns) / r.Elapsed.Seconds()
}

// Run runs workers loops of transactions for d. dial opens a connection
// (the caller decides the namespace by running Run's workers through
// wrap, which must call its argument and return when it returns).
func Run(ctx context.Context, dial func() (net.Conn, error), wrap func(func()), workers int, d time.Duration) Result {
	var conns, failed atomic.Int64
	lat := make([][]time.Duration, workers)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrap(func() {
				var b [1]byte
				for ctx.Err() == nil {
					t0 := time.Now()
					c, err := dial()
					if err != nil {
						failed.Add(1)
						continue
					}
					_ = c.SetDeadline(t0.Add(5 * time.Second))
					_, err = c.Write([]byte{'x'})
					if err == nil {
						_, err = io.ReadFull(c, b[:])
					}
					c.Close()
					if err != nil {
						failed.Add(1)
						continue
					}
					conns.Add(1)
					lat[w] = append(lat[w], time.Since(t0))
				}
			})
		}()
	}
	wg.Wait()
	r := Result{Conns: conns.Load(), Failed: failed.Load(), Elapsed: time.Since(start)}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) > 0 {
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		r.P50 = all[len(all)/2]
		r.P99 = all[len(all)*99/100]
		r.Max = all[len(all)-1]
	}
	return r
}
