package k8senv

import (
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// Counter counts the API requests made through the configs it wraps, by verb and resource
// ("GET allotnodes", "WATCH ippools", "PATCH allotnodes/status"): benchmarks use it to show
// which requests a component makes, and that in steady state it only watches. It is safe for
// concurrent use; one Counter may wrap the configs of many clients (thousands of simulated
// agents).
type Counter struct {
	mu     sync.Mutex
	by     map[string]int64
	failed map[string]int64 // by "VERB resource CODE" (HTTP status >= 400) or "VERB resource error"
}

// Wrap returns a copy of cfg whose requests c counts. The copy keeps cfg's TLS settings, so
// client-go still shares one transport between clients of equal settings.
func (c *Counter) Wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingRT{c: c, rt: rt} })
	return out
}

// Snapshot returns the counts so far, by "VERB resource".
func (c *Counter) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.by)
}

// Failed returns the requests so far that failed, by "VERB resource CODE" (an HTTP status of
// 400 or more: 429 is API Priority and Fairness refusing, 409 a conflict or AlreadyExists) or
// "VERB resource error" (no response: a timeout, a broken connection).
func (c *Counter) Failed() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.failed)
}

// Total is the number of requests so far.
func (c *Counter) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, v := range c.by {
		n += v
	}
	return n
}

func (c *Counter) add(key string) { c.bump(&c.by, key) }

func (c *Counter) fail(key string) { c.bump(&c.failed, key) }

// bump counts key in *m (made on first use).
func (c *Counter) bump(m *map[string]int64, key string) {
	c.mu.Lock()
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[key]++
	c.mu.Unlock()
}

// CountDelta is after minus before, keys whose count did not move left out.
func CountDelta(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

type countingRT struct {
	c  *Counter
	rt http.RoundTripper
}

func (t countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	verb := r.Method
	if r.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	} else if r.Method == http.MethodGet && isCollection(r.URL.Path) {
		verb = "LIST"
	}
	key := verb + " " + ResourceOf(r.URL.Path)
	t.c.add(key)
	resp, err := t.rt.RoundTrip(r)
	switch {
	case err != nil:
		t.c.fail(key + " error")
	case resp.StatusCode >= 400:
		t.c.fail(key + " " + strconv.Itoa(resp.StatusCode))
	}
	return resp, err
}

// apiParts is an API path without its group/version prefix and namespace:
// /apis/allot.io/v1alpha1/allotnodes/n1/status -> [allotnodes n1 status].
func apiParts(path string) ([]string, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return nil, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:] // a namespaced resource; namespaces/x alone is a Namespace
	}
	return parts, true
}

func isCollection(path string) bool {
	parts, ok := apiParts(path)
	return ok && len(parts) == 1
}

// ResourceOf reduces an API path to its resource (and subresource):
// /apis/allot.io/v1alpha1/allotnodes/n1/status -> allotnodes/status.
func ResourceOf(path string) string {
	parts, ok := apiParts(path)
	switch {
	case !ok:
		return path
	case len(parts) == 0:
		return "-"
	case len(parts) >= 3:
		return parts[0] + "/" + parts[2]
	}
	return parts[0]
}
