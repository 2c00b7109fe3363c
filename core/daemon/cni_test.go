package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/allocator"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/ipam"
	"github.com/allot-ipam/allot/internal/testenv"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
)

type fakeOwners struct {
	pod    *metav1.PartialObjectMetadata
	podErr error
	ds     *metav1.PartialObjectMetadata
	dsErr  error
	asked  []string
}

func (f *fakeOwners) Pod(_ context.Context, ns, name string) (*metav1.PartialObjectMetadata, error) {
	f.asked = append(f.asked, "pod "+ns+"/"+name)
	return f.pod, f.podErr
}

func (f *fakeOwners) DaemonSet(_ context.Context, ns, name string) (*metav1.PartialObjectMetadata, error) {
	f.asked = append(f.asked, "daemonset "+ns+"/"+name)
	return f.ds, f.dsErr
}

func podOwnedBy(kind, apiVersion, name string, uid types.UID, controller bool) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "kube-system", Name: "allot-agent-abcde",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: &controller}},
	}}
}

func TestUninstallVerdict(t *testing.T) {
	now := metav1.Now()
	gone := apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "allot-agent")
	ds := func(uid types.UID, deleting bool) *metav1.PartialObjectMetadata {
		m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "allot-agent", UID: uid}}
		if deleting {
			m.DeletionTimestamp = &now
		}
		return m
	}
	owned := podOwnedBy("DaemonSet", "apps/v1", "allot-agent", "uid-1", true)
	cases := []struct {
		name      string
		f         fakeOwners
		podName   string
		uninstall bool
		reason    string
	}{
		{"rolling update", fakeOwners{pod: owned, ds: ds("uid-1", false)}, "allot-agent-abcde", false, "exists"},
		{"daemonset deleted", fakeOwners{pod: owned, dsErr: gone}, "allot-agent-abcde", true, "is gone"},
		{"daemonset being deleted", fakeOwners{pod: owned, ds: ds("uid-1", true)}, "allot-agent-abcde", true, "being deleted"},
		{"daemonset recreated", fakeOwners{pod: owned, ds: ds("uid-2", false)}, "allot-agent-abcde", true, "deleted and created again"},
		{"API server down", fakeOwners{pod: owned, dsErr: errors.New("connection refused")}, "allot-agent-abcde", false, "connection refused"},
		{"pod gone", fakeOwners{podErr: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x")}, "allot-agent-abcde", false, "reading the agent's Pod"},
		{"pod unknown", fakeOwners{}, "", false, "unknown"},
		{"not a controller", fakeOwners{pod: podOwnedBy("DaemonSet", "apps/v1", "allot-agent", "uid-1", false)}, "allot-agent-abcde", false, "no controller"},
		{"another kind", fakeOwners{pod: podOwnedBy("ReplicaSet", "apps/v1", "rs", "uid-1", true)}, "allot-agent-abcde", false, "not a DaemonSet"},
		{"another group", fakeOwners{pod: podOwnedBy("DaemonSet", "example.com/v1", "x", "uid-1", true)}, "allot-agent-abcde", false, "not a DaemonSet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why, _ := uninstallVerdict(context.Background(), &tc.f, "kube-system", tc.podName)
			if got != tc.uninstall || !strings.Contains(why, tc.reason) {
				t.Fatalf("verdict %v (%s), want %v (%q)", got, why, tc.uninstall, tc.reason)
			}
		})
	}
	f := &fakeOwners{pod: owned, ds: ds("uid-1", false)}
	_, _, _ = uninstallVerdict(context.Background(), f, "kube-system", "allot-agent-abcde")
	if want := []string{"pod kube-system/allot-agent-abcde", "daemonset kube-system/allot-agent"}; !slices.Equal(f.asked, want) {
		t.Fatalf("reads %v, want %v", f.asked, want)
	}
}

func TestAgentPodCIDRs(t *testing.T) {
	p := netip.MustParsePrefix
	usage := []ipam.PoolUsage{
		{Name: "blue", CIDRs: []allocator.CIDRStats{{Prefix: p("10.20.0.0/28")}}},
		{Name: "default", CIDRs: []allocator.CIDRStats{{Prefix: p("10.10.0.0/28")}, {Prefix: p("10.10.0.16/28")}}},
		{Name: "default"}, // a pool with no block yet
		{Name: "eni", CIDRs: []allocator.CIDRStats{{Prefix: p("172.31.5.9/32")}, {Prefix: p("2600:1f14::9/128")}}},
	}
	want := []netip.Prefix{p("10.20.0.0/28"), p("10.10.0.0/28"), p("10.10.0.16/28"), p("172.31.5.9/32"), p("2600:1f14::9/128")}
	if got := agentPodCIDRs(usage); !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// TestDSFollower: the watch opened at start establishes the DaemonSet's deletion without any
// read at stop, and a stop refused by RBAC waits for it.
func TestDSFollower(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	dsMeta := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "allot-agent", UID: "uid-1"},
	}
	mc := metadatafake.NewSimpleMetadataClient(scheme, dsMeta)
	owners := &fakeOwners{pod: podOwnedBy("DaemonSet", "apps/v1", "allot-agent", "uid-1", true)}
	f := newDSFollower()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.follow(ctx, owners, mc, "kube-system", "allot-agent-abcde", slog.New(slog.DiscardHandler))

	testenv.Eventually(t, 10*time.Second, "the follower to list the DaemonSet", func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.synced && f.seen, fmt.Sprintf("synced %v, seen %v", f.synced, f.seen)
	})
	if gone, why, _ := f.verdict(); gone {
		t.Fatalf("verdict gone while the DaemonSet exists: %s", why)
	}

	// helm uninstall: the DaemonSet goes, then the agent's rights. The stop's reads are
	// refused; the watch delivers the delete within the grace.
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "allot-agent-abcde", errors.New("RBAC: no rules"))
	d := &AgentDaemon{Daemon: &Daemon{}, owners: &fakeOwners{podErr: forbidden}, follower: f}
	d.cfg = &config.Config{}
	d.cfg.CNI.Uninstall = config.UninstallAuto
	d.cfg.CNI.PodName, d.cfg.CNI.PodNamespace = "allot-agent-abcde", "kube-system"
	go func() {
		time.Sleep(200 * time.Millisecond) // sleep: the delete comes while decideUninstall waits
		_ = mc.Resource(daemonSetsResource).Namespace("kube-system").Delete(context.Background(), "allot-agent", metav1.DeleteOptions{})
	}()
	uninstall, why := d.decideUninstall(context.Background())
	if !uninstall || !strings.Contains(why, "was deleted (seen by the agent's watch)") {
		t.Fatalf("decision %v (%s), want uninstall from the watch", uninstall, why)
	}
	// Once known, no read at all is needed.
	d.owners = &fakeOwners{}
	if uninstall, why := d.decideUninstall(context.Background()); !uninstall {
		t.Fatalf("second decision keeps: %s", why)
	}
	if got := d.owners.(*fakeOwners).asked; len(got) != 0 {
		t.Fatalf("reads at stop although the watch knew: %v", got)
	}
}

// TestDSFollowerRefusedWithoutDelete: RBAC refuses the stop's reads but the DaemonSet is
// still there (an operator revoked the agent's rights): keep everything.
func TestDSFollowerRefusedWithoutDelete(t *testing.T) {
	f := newDSFollower()
	f.owner("allot-agent", "uid-1")
	f.observe(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "allot-agent", UID: "uid-1"}})
	f.listed()
	old := followerGrace
	followerGrace = 100 * time.Millisecond
	defer func() { followerGrace = old }()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("RBAC: no rules"))
	d := &AgentDaemon{Daemon: &Daemon{cfg: &config.Config{}}, owners: &fakeOwners{podErr: forbidden}, follower: f}
	d.cfg.CNI.Uninstall = config.UninstallAuto
	d.cfg.CNI.PodName, d.cfg.CNI.PodNamespace = "allot-agent-abcde", "kube-system"
	if uninstall, why := d.decideUninstall(context.Background()); uninstall || !strings.Contains(why, "saw no deletion either") {
		t.Fatalf("decision %v (%s), want keep", uninstall, why)
	}
}
