package operator_test

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
)

// TestLeaderFailover: two replicas; the leader is cancelled while nodes are being created;
// the other takes over, rebuilds from the API server and serves everyone; no block is handed
// out twice.
func TestLeaderFailover(t *testing.T) {
	h := newHarness(t)
	h.create(newPool("default", []string{"10.0.0.0/16"}, 26, nil, 0))
	a := h.run("op-a", nil)
	a.waitLeader(t, waitFor)
	b := h.run("op-b", nil)
	if got := h.leaseHolder(); got != "op-a" {
		t.Fatalf("lease holder %q; want op-a", got)
	}
	var names []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(300 * time.Millisecond) // sleep: op-a stops in the middle of the creations
		a.stop(t)                          // releases the Lease
	}()
	for i := range 60 {
		name := fmt.Sprintf("n%02d", i)
		names = append(names, name)
		h.create(newAllotNode(name, req{pool: "default", v4: 100})) // two /26 blocks each
		time.Sleep(10 * time.Millisecond)                           // sleep: spreads the creations over the handover
	}
	wg.Wait()
	b.waitLeader(t, waitFor)
	h.waitFulfilled(waitFor, names...)
	if n := h.checkNoOverlap(); n != 120 {
		t.Errorf("blocks = %d; want 120", n)
	}
	if got := h.leaseHolder(); got != "op-b" {
		t.Errorf("lease holder %q; want op-b", got)
	}
	// The new leader keeps serving changes.
	h.updateAllotNode("n00", func(n *allotv1.AllotNode) { n.Spec.IPAM.Pools.Requested[0].Needed.IPv4 = 200 })
	h.waitFulfilled(waitFor, "n00")
	h.checkNoOverlap()
}

// TestAPIServerRestart: the API server goes away long enough for the leader to lose its
// Lease; when it is back the operator campaigns again, rebuilds and serves new requests.
func TestAPIServerRestart(t *testing.T) {
	h := newHarness(t)
	h.create(newPool("default", []string{"10.0.0.0/16"}, 24, nil, 0))
	a := h.run("op-a", nil)
	a.waitLeader(t, waitFor)
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("n%d", i))
		h.create(newAllotNode(names[i], req{pool: "default", v4: 10}))
	}
	h.waitFulfilled(waitFor, names...)

	h.env.StopAPIServer()
	time.Sleep(3 * time.Second) // sleep: past RenewDeadline (1.5 s) of a real Lease: it is lost
	if err := h.env.StartAPIServer(h.ctx); err != nil {
		t.Fatal(err)
	}
	a.waitLeader(t, 60*time.Second) // leads again after a rebuild
	for i := 10; i < 20; i++ {
		names = append(names, fmt.Sprintf("n%d", i))
		h.create(newAllotNode(names[i], req{pool: "default", v4: 10}))
	}
	h.updateAllotNode("n0", func(n *allotv1.AllotNode) { n.Spec.IPAM.Pools.Requested[0].Needed.IPv4 = 300 })
	h.waitFulfilled(60*time.Second, names...)
	if n := h.checkNoOverlap(); n != 21 {
		t.Errorf("blocks = %d; want 21", n)
	}
}

// cutProxy forwards TCP connections to target until cut: then it drops every connection and
// refuses new ones, like a network partition between one replica and the API server.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// TestLeaderPartitioned: the leader loses the API server without releasing its Lease (as
// if its node died); the other replica takes over after the Lease expires and rebuilds; when
// the old leader comes back it follows. No block is handed out twice.
func TestLeaderPartitioned(t *testing.T) {
	h := newHarness(t)
	h.create(newPool("default", []string{"10.0.0.0/16"}, 26, nil, 0))
	u, err := url.Parse(h.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, u.Host)
	a := h.run("op-a", func(o *operator.Options) {
		o.RESTConfig = rest.CopyConfig(o.RESTConfig)
		o.RESTConfig.Host = "https://" + proxy.ln.Addr().String()
	})
	a.waitLeader(t, waitFor)
	b := h.run("op-b", nil)
	var names []string
	add := func(from, to int) {
		for i := from; i < to; i++ {
			names = append(names, fmt.Sprintf("n%02d", i))
			h.create(newAllotNode(names[len(names)-1], req{pool: "default", v4: 100}))
		}
	}
	add(0, 20)
	h.waitFulfilled(waitFor, names...)

	proxy.setCut(true)
	add(20, 40) // while nobody leads, then while op-b rebuilds
	b.waitLeader(t, waitFor)
	h.waitFulfilled(waitFor, names...)
	if got := h.leaseHolder(); got != "op-b" {
		t.Errorf("lease holder %q; want op-b", got)
	}
	proxy.setCut(false)
	time.Sleep(time.Second) // sleep: op-a reconnects, finds op-b leading, follows (nothing to observe)
	add(40, 60)
	h.waitFulfilled(waitFor, names...)
	if n := h.checkNoOverlap(); n != 120 {
		t.Errorf("blocks = %d; want 120", n)
	}
	if got := h.leaseHolder(); got != "op-b" {
		t.Errorf("lease holder %q; want op-b", got)
	}
}
