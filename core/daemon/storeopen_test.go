package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/core/store"
	"github.com/allot-ipam/allot/plugins/policy/static"
	"github.com/allot-ipam/allot/sdk/policy"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// logLines parses JSON log lines.
func logLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func rec(id, addr string) store.Record {
	a := netip.MustParseAddr(addr)
	return store.Record{
		Owner:     store.Owner{ContainerID: id, IfName: "eth0"},
		Network:   "net",
		Pod:       store.Pod{Namespace: "ns", Name: "pod-" + id, UID: "uid-" + id},
		Addresses: []store.Address{{Pool: "default", Prefix: netip.PrefixFrom(a, 24)}},
		Created:   time.Now(),
	}
}

// rebuildRig is a daemon base in agent mode on a store holding two records, of which
// the test damages one.
func rebuildRig(t *testing.T, mode, onCorruption string) (*Daemon, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Defaults()
	cfg.Mode = mode
	cfg.Store.Path = filepath.Join(dir, "allot.db")
	cfg.Store.NoSync = true
	cfg.Store.OnCorruption = onCorruption
	s, err := store.Open(context.Background(), cfg.Store.Path, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Record{rec("good", "10.5.0.10"), rec("bad", "10.5.0.11")} {
		if err := s.Put(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	logs := &bytes.Buffer{} // openStore logs on the caller's goroutine only
	d := newBase(&cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	return d, logs
}

// truncateStore cuts the store file after its meta pages.
func truncateStore(t *testing.T, path string) {
	t.Helper()
	if err := os.Truncate(path, 3*4096); err != nil {
		t.Fatal(err)
	}
}

// breakRecord replaces the value of "bad" with something that does not decode.
func breakRecord(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte(`"container_id":"bad"`))
	if i < 0 {
		t.Fatal("record not found")
	}
	copy(data[i:], `"container_id":"BAD"`)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func asides(t *testing.T, path string) []string {
	m, err := filepath.Glob(path + ".corrupt-*")
	if err != nil {
		t.Fatal(err)
	}
	// A file's write-ahead log segments are moved aside with it.
	return slices.DeleteFunc(m, func(p string) bool { return strings.HasSuffix(p, ".wal0") || strings.HasSuffix(p, ".wal1") })
}

// TestAgentRebuildsUnusableStore: the damaged file is moved aside, what it still holds
// is salvaged, the addresses of the node's running pods are held, and it is all logged
// at Error level with the path.
func TestAgentRebuildsUnusableStore(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(*testing.T, string)
	}{
		{"bad record", breakRecord},
		{"not a store", func(t *testing.T, path string) { _ = os.WriteFile(path, []byte("garbage"), 0o600) }},
		{"truncated", truncateStore},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, logs := rebuildRig(t, "agent", "")
			path := d.cfg.Store.Path
			c.damage(t, path)
			d.listPods = func(context.Context) ([]store.Record, error) {
				return podRecords([]corev1.Pod{
					pod("p-bad", "uid-bad", "10.5.0.11", false, corev1.PodRunning),
					pod("p-good", "uid-good", "10.5.0.10", false, corev1.PodRunning),
					pod("p-host", "uid-host", "192.168.1.1", true, corev1.PodRunning),
					pod("p-done", "uid-done", "10.5.0.12", false, corev1.PodSucceeded),
				}, time.Now()), nil
			}
			s, err := d.openStore(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if a := asides(t, path); len(a) != 1 {
				t.Fatalf("moved-aside files: %v, want one", a)
			}
			recs, err := s.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			holders := map[string]string{}
			for _, r := range recs {
				for _, a := range r.Addresses {
					holders[a.Prefix.Addr().String()] = r.Owner.String()
				}
			}
			// .11 is held whichever way (salvaged, or from its pod); the host-network
			// and finished pods add nothing.
			if holders["10.5.0.11"] == "" || holders["192.168.1.1"] != "" || holders["10.5.0.12"] != "" {
				t.Fatalf("rebuilt store holds %v", holders)
			}
			if c.name == "bad record" && holders["10.5.0.10"] != "good/eth0" {
				t.Fatalf("rebuilt store holds %v; want the good record salvaged", holders)
			}
			var moved bool
			for _, l := range logLines(t, logs) {
				if l["level"] == "ERROR" && strings.Contains(l["msg"].(string), "moved aside") && l["path"] == path && strings.HasPrefix(l["moved_to"].(string), path+".corrupt-") {
					moved = true
				}
			}
			if !moved {
				t.Fatalf("no Error log naming the path and where it went:\n%s", logs.String())
			}
			// And nothing a pod holds is handed out from the rebuilt store.
			allocateAllExcept(t, s, holders)
		})
	}
}

// allocateAllExcept allocates the whole 10.5.0.0/24 through ipam and fails on an address
// of holders.
func allocateAllExcept(t *testing.T, s *store.Store, holders map[string]string) {
	t.Helper()
	pol := static.New()
	m, err := ipam.New(context.Background(), ipam.Options{
		Pools:  []ipam.PoolSpec{{Allocator: allocator.Config{Name: "default", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.5.0.0/24")}}, Default: true}},
		Store:  s,
		Logger: quiet,
		Policy: func(string) policy.PoolPolicy { return pol },
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		a, err := m.Allocate(context.Background(), &api.AllocateRequest{Owner: api.Owner{ContainerID: "n" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), IfName: "eth0"}, Network: "net"})
		if err != nil {
			if api.CodeOf(err) != api.CodeExhausted {
				t.Fatal(err)
			}
			return
		}
		got := netip.MustParsePrefix(a.IPs[0].Address).Addr().String()
		if h, ok := holders[got]; ok {
			t.Fatalf("handed out %s, held by %s", got, h)
		}
	}
}

func pod(name, uid, ip string, host bool, phase corev1.PodPhase) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{HostNetwork: host},
		Status:     corev1.PodStatus{Phase: phase, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

// TestRebuildNeedsTheAPIServer: without an answer from the API server the file is left
// as it is and allotd stops (exit 3); the next start tries again.
func TestRebuildNeedsTheAPIServer(t *testing.T) {
	d, _ := rebuildRig(t, "agent", "")
	truncateStore(t, d.cfg.Store.Path)
	d.listPods = func(context.Context) ([]store.Record, error) { return nil, errors.New("connection refused") }
	_, err := d.openStore(context.Background())
	if !errors.Is(err, store.ErrUnusable) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "left as it is") {
		t.Fatalf("openStore = %v", err)
	}
	if a := asides(t, d.cfg.Store.Path); len(a) != 0 {
		t.Fatalf("moved aside without the API server: %v", a)
	}
}

// TestNoRebuildWhenConfiguredOrStandalone: store.onCorruption fail, and standalone mode,
// stop on an unusable store and leave the file where it is.
func TestNoRebuildWhenConfiguredOrStandalone(t *testing.T) {
	for _, c := range []struct{ mode, on string }{{"agent", config.OnCorruptionFail}, {"standalone", ""}} {
		d, _ := rebuildRig(t, c.mode, c.on)
		truncateStore(t, d.cfg.Store.Path)
		d.listPods = func(context.Context) ([]store.Record, error) { t.Fatal("asked the API server"); return nil, nil }
		_, err := d.openStore(context.Background())
		if !errors.Is(err, store.ErrUnusable) || !strings.Contains(err.Error(), d.cfg.Store.Path) {
			t.Fatalf("%s/%q: openStore = %v", c.mode, c.on, err)
		}
		if a := asides(t, d.cfg.Store.Path); len(a) != 0 {
			t.Fatalf("%s/%q moved the file aside: %v", c.mode, c.on, a)
		}
	}
}

// TestSoundStoreIsNotRebuilt: a sound store opens as it is.
func TestSoundStoreIsNotRebuilt(t *testing.T) {
	d, _ := rebuildRig(t, "agent", "")
	d.listPods = func(context.Context) ([]store.Record, error) { t.Fatal("asked the API server"); return nil, nil }
	s, err := d.openStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if recs, err := s.List(context.Background()); err != nil || len(recs) != 2 {
		t.Fatalf("List = %d records, %v", len(recs), err)
	}
}
