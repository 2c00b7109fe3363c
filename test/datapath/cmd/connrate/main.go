// Command connrate measures TCP connections per second (connect, one-byte
// request and response, close) between two endpoints, optionally entering
// a network namespace first.
//
//	connrate -listen :9000 [-netns /var/run/netns/ext]
//	connrate -connect 198.18.0.2:9000 -duration 5s -workers 4 [-netns /var/run/netns/pod]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/allot-ipam/allot/test/datapath/connrate"
	"github.com/vishvananda/netns"
)

func main() {
	listen := flag.String("listen", "", "serve on this address")
	connect := flag.String("connect", "", "measure against this address")
	ns := flag.String("netns", "", "network namespace path to enter first")
	duration := flag.Duration("duration", 5*time.Second, "measurement time")
	workers := flag.Int("workers", 4, "parallel connection loops")
	flag.Parse()
	if *ns != "" {
		// Every thread must be in the namespace: lock main's thread, enter,
		// and make the workers do the same.
		h, err := netns.GetFromPath(*ns)
		if err != nil {
			fail(err)
		}
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			fail(err)
		}
		wrapNS = func(f func()) {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			if err := netns.Set(h); err != nil {
				fail(err)
			}
			f()
		}
	}
	switch {
	case *listen != "":
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			fail(err)
		}
		fail(connrate.Serve(ln))
	case *connect != "":
		d := net.Dialer{Timeout: 5 * time.Second}
		r := connrate.Run(context.Background(), func() (net.Conn, error) { return d.Dial("tcp", *connect) }, wrapNS, *workers, *duration)
		fmt.Printf("conns=%d failed=%d conn/s=%.0f p50=%s p99=%s max=%s\n", r.Conns, r.Failed, r.PerSecond(), r.P50, r.P99, r.Max)
	default:
		flag.Usage()
		os.Exit(2)
	}
}

var wrapNS = func(f func()) { f() }

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "connrate:", err)
		os.Exit(1)
	}
}
