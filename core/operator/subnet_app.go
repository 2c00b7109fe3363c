package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	spiderpool "github.com/allot-ipam/allot/internal/spiderpoolanno"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Workload annotations of Spiderpool's SpiderSubnet feature (Spiderpool docs, "SpiderSubnet"),
// read from the pod template, where the pods get them too.
const (
	// AnnoIPPoolIPNumber sizes an application's auto pool: "N" addresses, or "+N" more than
	// the replica count (resized with it).
	AnnoIPPoolIPNumber = "ipam.spidernet.io/ippool-ip-number"
	// AnnoIPPoolReclaim: "false" keeps the auto pool (and its addresses) when the
	// application is deleted; default "true".
	AnnoIPPoolReclaim = "ipam.spidernet.io/ippool-reclaim"
	// defaultFlexibleIPNumber is Spiderpool's clusterDefaultSubnetFlexibleIPNumber: without
	// ippool-ip-number a pool holds one address more than the replicas ("+1").
	defaultFlexibleIPNumber = 1
	// defaultSubnetInterface is the interface a singular subnet annotation without
	// "interface" is for (Spiderpool: the pod's first interface, eth0).
	defaultSubnetInterface = "eth0"
)

// appKinds are the workloads whose pod template may ask for an auto pool (Spiderpool supports
// Deployment, StatefulSet, ReplicaSet, DaemonSet and Job).
var appKinds = []string{"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job"}

// newAppObject returns an empty object of a workload kind.
func newAppObject(kind string) client.Object {
	switch kind {
	case "Deployment":
		return &appsv1.Deployment{}
	case "StatefulSet":
		return &appsv1.StatefulSet{}
	case "ReplicaSet":
		return &appsv1.ReplicaSet{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	case "Job":
		return &batchv1.Job{}
	}
	return nil
}

// app is a workload as the subnet controller sees it.
type app struct {
	Kind, Namespace, Name string
	UID                   types.UID
	Replicas              int
	// Annotations are the pod template's.
	Annotations map[string]string
	// Selector selects the application's pods; it becomes the auto pool's podAffinity.
	Selector *metav1.LabelSelector
	// Obj is the workload, for Events.
	Obj client.Object
}

// appID is Kind/namespace/name: the key of the work queue and SubnetAllocation.application.
func appID(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

func (a *app) id() string { return appID(a.Kind, a.Namespace, a.Name) }

// parseAppID splits an appID.
func parseAppID(id string) (kind, ns, name string, ok bool) {
	parts := strings.SplitN(id, "/", 3)
	if len(parts) != 3 || newAppObject(parts[0]) == nil {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// appOf reads a workload. ok is false when the object is not an application of its own: a
// ReplicaSet a Deployment controls (the Deployment is the application, as Spiderpool takes the
// top controller) or a Job a CronJob controls (not supported: each run would get a pool).
func appOf(obj client.Object) (a app, ok bool) {
	one := func(p *int32) int {
		if p == nil {
			return 1
		}
		return int(*p)
	}
	a = app{Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(), Obj: obj}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		a.Kind, a.Replicas, a.Annotations, a.Selector = "Deployment", one(o.Spec.Replicas), o.Spec.Template.Annotations, o.Spec.Selector
	case *appsv1.StatefulSet:
		a.Kind, a.Replicas, a.Annotations, a.Selector = "StatefulSet", one(o.Spec.Replicas), o.Spec.Template.Annotations, o.Spec.Selector
	case *appsv1.ReplicaSet:
		if c := metav1.GetControllerOf(o); c != nil && c.Kind == "Deployment" {
			return app{}, false
		}
		a.Kind, a.Replicas, a.Annotations, a.Selector = "ReplicaSet", one(o.Spec.Replicas), o.Spec.Template.Annotations, o.Spec.Selector
	case *appsv1.DaemonSet:
		// One pod per node it runs on: the scheduler's count, which follows nodes coming
		// and going.
		a.Kind, a.Replicas, a.Annotations, a.Selector = "DaemonSet", int(o.Status.DesiredNumberScheduled), o.Spec.Template.Annotations, o.Spec.Selector
	case *batchv1.Job:
		if c := metav1.GetControllerOf(o); c != nil && c.Kind == "CronJob" {
			return app{}, false
		}
		a.Kind, a.Replicas, a.Annotations, a.Selector = "Job", one(o.Spec.Parallelism), o.Spec.Template.Annotations, o.Spec.Selector
	default:
		return app{}, false
	}
	return a, true
}

// poolWant is one auto pool an application asks for: one family of one interface.
type poolWant struct {
	Pool      string
	Subnet    string
	Family    policy.Family
	Interface string
	Size      uint64
	Reclaim   bool
	// Existing are the addresses of an adopted pool (adopt): kept when no subnet allocation
	// records them.
	Existing []string
}

// wants parses the application's subnet annotations into the pools it needs. No subnet
// annotation: none. Errors name the annotation and the field.
func (a *app) wants() ([]poolWant, error) {
	var sels []spiderpool.Selection
	key := spiderpool.AnnoSubnets
	if v, ok := a.Annotations[spiderpool.AnnoSubnets]; ok {
		s, err := spiderpool.ParseSubnetsAnnotation(v)
		if err != nil {
			return nil, fmt.Errorf("spec.template.metadata.annotations[%s]: %w", key, err)
		}
		sels = s
	} else if v, ok := a.Annotations[spiderpool.AnnoSubnet]; ok {
		key = spiderpool.AnnoSubnet
		s, err := spiderpool.ParseSubnetAnnotation(v)
		if err != nil {
			return nil, fmt.Errorf("spec.template.metadata.annotations[%s]: %w", key, err)
		}
		if s.Interface == "" {
			s.Interface = defaultSubnetInterface
		}
		sels = []spiderpool.Selection{s}
	} else {
		return nil, nil
	}
	size, err := poolSize(a.Annotations, a.Replicas)
	if err != nil {
		return nil, err
	}
	reclaim := true
	if v, ok := a.Annotations[AnnoIPPoolReclaim]; ok {
		if reclaim, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("spec.template.metadata.annotations[%s]: %q is not true or false", AnnoIPPoolReclaim, v)
		}
	}
	var out []poolWant
	for _, s := range sels {
		for _, f := range []struct {
			fam   policy.Family
			names []string
		}{{policy.IPv4, s.IPv4}, {policy.IPv6, s.IPv6}} {
			if len(f.names) == 0 {
				continue
			}
			// An application's pool is cut from one subnet per family: the first named, as
			// Spiderpool does; the others are what a pod may fall back to by hand.
			if policy.IsPoolNamePattern(f.names[0]) {
				return nil, fmt.Errorf("spec.template.metadata.annotations[%s]: %s[0]: %q is a pattern; an application's pool is cut from one named subnet",
					key, f.fam, f.names[0])
			}
			out = append(out, poolWant{
				Pool:   autoPoolName(a.Kind, a.Namespace, a.Name, s.Interface, f.names[0], f.fam),
				Subnet: f.names[0], Family: f.fam, Interface: s.Interface, Size: size, Reclaim: reclaim,
			})
		}
	}
	return out, nil
}

// poolSize reads ippool-ip-number: "N" is a fixed size, "+N" the replicas plus N; absent is
// "+1" (Spiderpool's default).
func poolSize(ann map[string]string, replicas int) (uint64, error) {
	v, ok := ann[AnnoIPPoolIPNumber]
	if !ok {
		return uint64(max(replicas, 0) + defaultFlexibleIPNumber), nil
	}
	flexible := strings.HasPrefix(v, "+")
	n, err := strconv.ParseUint(strings.TrimPrefix(v, "+"), 10, 31)
	if err != nil {
		return 0, fmt.Errorf("spec.template.metadata.annotations[%s]: %q is neither a number of addresses (\"5\") nor a number over the replicas (\"+1\")",
			AnnoIPPoolIPNumber, v)
	}
	if flexible {
		return uint64(max(replicas, 0)) + n, nil
	}
	if n == 0 {
		return 0, fmt.Errorf("spec.template.metadata.annotations[%s]: must be at least 1", AnnoIPPoolIPNumber)
	}
	return n, nil
}

// autoPoolName names an application's pool for one interface and family:
// auto4-<name>-<interface>-<hash>. The hash of kind/namespace/name/interface/subnet makes it
// unique (names and namespaces may contain dashes; a pool's subnet is immutable, so moving
// to another subnet is another pool) and stable, so a workload deleted with ippool-reclaim
// "false" and created again finds its pool and its addresses.
func autoPoolName(kind, ns, name, iface, subnet string, fam policy.Family) string {
	sum := sha256.Sum256([]byte(appID(kind, ns, name) + "/" + iface + "/" + subnet))
	prefix := "auto4-"
	if fam == policy.IPv6 {
		prefix = "auto6-"
	}
	return prefix + dnsPart(name, 200) + "-" + dnsPart(iface, 15) + "-" + hex.EncodeToString(sum[:5])
}

// dnsPart lower-cases s and replaces what a DNS subdomain may not hold, at most n characters.
func dnsPart(s string, n int) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			b[i] = '-'
		}
	}
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
