package scale

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// opLatency times the operator's writes of AllotNode specs (PUT allotnodes, not the status)
// at the client and reads the API server's own time for them (apiserver_request_duration
// seconds; the agents write specs only to give blocks back, not during the start): the
// progress lines print both per interval. The operator writes a node's spec, a round trip
// (its status waits: statusWait), from DefaultWorkers reconciles at once, so its rate is
// the workers over that time while it is long (seconds at the API server while the agents
// start), else its client's rate (DefaultQPS), and the difference between the two times is
// this process's own delay.
type opLatency struct {
	admin *rest.Config

	mu               sync.Mutex
	n, lastN         int64
	total, lastTotal time.Duration
	srvN, srvSum     float64 // the API server's count and sum at the last interval
}

func newOpLatency(admin *rest.Config) *opLatency { return &opLatency{admin: admin} }

// wrap is cfg with its AllotNode spec writes timed.
func (l *opLatency) wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper { return timedRT{l: l, rt: rt} })
	return out
}

type timedRT struct {
	l  *opLatency
	rt http.RoundTripper
}

func (t timedRT) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.rt.RoundTrip(req)
	if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/allotnodes/") && !strings.HasSuffix(req.URL.Path, "/status") {
		t.l.mu.Lock()
		t.l.n++
		t.l.total += time.Since(start)
		t.l.mu.Unlock()
	}
	return resp, err
}

// interval is the operator's spec writes since the last call and their mean time at the
// client and at the API server.
func (l *opLatency) interval() string {
	srvN, srvSum, err := l.serverFigures()
	l.mu.Lock()
	defer l.mu.Unlock()
	n, total := l.n-l.lastN, l.total-l.lastTotal
	l.lastN, l.lastTotal = l.n, l.total
	client := time.Duration(0)
	if n > 0 {
		client = total / time.Duration(n)
	}
	server := "unknown"
	if err == nil {
		if dn := srvN - l.srvN; dn > 0 {
			server = (time.Duration((srvSum - l.srvSum) / dn * float64(time.Second))).Round(time.Millisecond).String()
		} else {
			server = "none"
		}
		l.srvN, l.srvSum = srvN, srvSum
	}
	return fmt.Sprintf("operator spec writes %d, mean %v at the client, %s at the API server", n, client.Round(time.Millisecond), server)
}

// serverFigures are the API server's count and sum of seconds of PUT allotnodes (spec).
func (l *opLatency) serverFigures() (n, sum float64, err error) {
	hc, err := rest.HTTPClientFor(l.admin)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.admin.Host+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `resource="allotnodes"`) || !strings.Contains(line, `verb="PUT"`) || !strings.Contains(line, `subresource=""`) {
			continue
		}
		switch name, v, ok := metricLine(line); {
		case !ok:
		case name == "apiserver_request_duration_seconds_sum":
			sum += v
		case name == "apiserver_request_duration_seconds_count":
			n += v
		}
	}
	return n, sum, sc.Err()
}
