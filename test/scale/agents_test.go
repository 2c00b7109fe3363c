package scale

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-ipam/allot/core/agent"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/store"
	ciliumannotations "github.com/allot-ipam/allot/plugins/policy/ciliumannotations"
	"github.com/allot-ipam/allot/sdk/policy"
	"k8s.io/client-go/rest"
)

// fleet is the simulated nodes: one real agent each, with its own ipam.Manager and node
// store, started together as on a cluster that boots.
type fleet struct {
	cfg *rest.Config // counted (k8senv.Counter), shared by every agent as one kubeconfig is
	// transports: node i's agent uses transports[i % len]: its own connection, unless the
	// open-file limit is too low for one per node (openFiles).
	transports []http.RoundTripper
	dir        string
	start      time.Time

	mu     sync.Mutex
	agents []*simAgent
	errs   []error

	ready atomic.Int64 // agents holding their blocks
	wg    sync.WaitGroup
}

// simAgent is one node.
type simAgent struct {
	name   string
	st     *store.Store
	m      *ipam.Manager
	stop   context.CancelFunc
	done   chan struct{}
	change chan struct{} // the manager's OnChange, to see the blocks arrive without polling
	took   atomic.Int64  // ns from the fleet's start until the node held its blocks
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startAll starts n agents, each in its own goroutine (setup included, as n nodes booting).
func (f *fleet) startAll(n int) {
	f.start = time.Now()
	for i := range n {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := f.startOne(fmt.Sprintf("node-%05d", i), f.transports[i%len(f.transports)]); err != nil {
				f.mu.Lock()
				f.errs = append(f.errs, err)
				f.mu.Unlock()
			}
		}()
	}
	f.wg.Wait()
}

// startOne builds a node as allotd's agent mode does (core/daemon: the store, the agent with
// the cluster defaults, the manager whose OnChange wakes the agent) and runs it.
func (f *fleet) startOne(name string, rt http.RoundTripper) error {
	st, err := store.Open(context.Background(), filepath.Join(f.dir, name+".db"), store.Options{NoSync: true})
	if err != nil {
		return err
	}
	def := config.DefaultCluster()
	a, err := agent.New(agent.Options{
		NodeName: name, RESTConfig: withTransport(f.cfg, rt), PreAllocation: def.PreAllocation,
		Debounce: def.RequestDebounce, ReleaseDelay: def.ReleaseDelay,
		ReclaimGrace: def.ReclaimGrace, ReclaimInterval: def.ReclaimInterval, Resync: def.Resync,
		Logger: discard(), Store: st,
	})
	if err != nil {
		_ = st.Close()
		return err
	}
	pol, _ := ciliumannotations.New(ciliumannotations.Config{})
	s := &simAgent{name: name, st: st, done: make(chan struct{}), change: make(chan struct{}, 1)}
	s.m, err = ipam.New(context.Background(), ipam.Options{
		Store: st, Logger: discard(),
		Policy:     func(string) policy.PoolPolicy { return pol },
		Dynamic:    &ipam.DynamicOptions{Node: name, Wait: def.PendingTimeout},
		PodContext: a.PodContext,
		OnChange:   func() { a.Trigger(); s.kick() },
	})
	if err != nil {
		_ = st.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	f.mu.Lock()
	f.agents = append(f.agents, s)
	f.mu.Unlock()
	go func() {
		defer close(s.done)
		_ = a.Run(ctx, s.m)
	}()
	go f.awaitBlocks(ctx, s)
	return nil
}

// withTransport is cfg over rt.
func withTransport(cfg *rest.Config, rt http.RoundTripper) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Transport = rt
	return out
}

func (s *simAgent) kick() {
	select {
	case s.change <- struct{}{}:
	default:
	}
}

// awaitBlocks records when the node's manager holds a block of each family of the pool
// "default", looking each time the manager reports a change.
func (f *fleet) awaitBlocks(ctx context.Context, s *simAgent) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.change:
		}
		if hasBlocks(s.m) {
			s.took.Store(int64(time.Since(f.start)))
			f.ready.Add(1)
			return
		}
	}
}

func hasBlocks(m *ipam.Manager) bool {
	var v4, v6 bool
	for _, u := range m.Usage() {
		if u.Name != "default" || len(u.CIDRs) == 0 {
			continue
		}
		v4 = v4 || u.Family == policy.IPv4
		v6 = v6 || u.Family == policy.IPv6
	}
	return v4 && v6
}

// stopAll stops every agent and closes its store.
func (f *fleet) stopAll() {
	f.mu.Lock()
	agents := f.agents
	f.agents = nil
	f.mu.Unlock()
	for _, s := range agents {
		s.stop()
	}
	for _, s := range agents {
		<-s.done
		_ = s.st.Close()
	}
	// The agents' connections and transports are theirs: held, they would count in the
	// operator's heap, measured once the agents stopped.
	for _, rt := range f.transports {
		if t, ok := rt.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	}
	f.transports = nil
}

// times are the agents' times to their blocks (0: not yet).
func (f *fleet) times() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]time.Duration, 0, len(f.agents))
	for _, s := range f.agents {
		out = append(out, time.Duration(s.took.Load()))
	}
	return out
}
