package k8senv

import (
	"io"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
)

// WatchHold holds the events of a resource's watches, so a test can make an informer provably
// lag the API server: while held, what a watch's body reads is not returned to the informer
// until Release (an event that arrives while the watch is held waits). Lists and other
// requests pass. Its zero value is not usable: use NewWatchHold.
type WatchHold struct {
	mu   sync.Mutex
	gate chan struct{} // closed while not held
}

// NewWatchHold returns a hold that is released.
func NewWatchHold() *WatchHold {
	g := make(chan struct{})
	close(g)
	return &WatchHold{gate: g}
}

// Wrap returns a copy of cfg whose watches of resource (its plural, "ippools") h holds.
func (h *WatchHold) Wrap(cfg *rest.Config, resource string) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper { return holdWatchRT{rt: rt, h: h, resource: resource} })
	return out
}

// Hold holds the watches' events from now on.
func (h *WatchHold) Hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.gate:
		h.gate = make(chan struct{})
	default:
	}
}

// Release delivers the events held and lets the later ones through.
func (h *WatchHold) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.gate:
	default:
		close(h.gate)
	}
}

func (h *WatchHold) wait() {
	h.mu.Lock()
	g := h.gate
	h.mu.Unlock()
	<-g
}

// holdWatchRT makes the watches of one resource subject to a WatchHold.
type holdWatchRT struct {
	rt       http.RoundTripper
	h        *WatchHold
	resource string
}

func (t holdWatchRT) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil || req.URL.Query().Get("watch") != "true" || ResourceOf(req.URL.Path) != t.resource {
		return resp, err
	}
	resp.Body = heldBody{ReadCloser: resp.Body, h: t.h}
	return resp, nil
}

// heldBody returns what it read only when its hold allows.
type heldBody struct {
	io.ReadCloser
	h *WatchHold
}

func (b heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.h.wait()
	return n, err
}
