package operator

import (
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-ipam/allot/core/addrset"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Spiderpool's ippool-ip-number: "N" fixed, "+N" over the replicas, absent "+1".
func TestPoolSize(t *testing.T) {
	for _, tc := range []struct {
		ann      string // "" = absent
		replicas int
		want     uint64
		err      string
	}{
		{"", 3, 4, ""},
		{"", 0, 1, ""},
		{"5", 3, 5, ""},
		{"+2", 3, 5, ""},
		{"+0", 3, 3, ""},
		{"0", 3, 0, "must be at least 1"},
		{"-1", 3, 0, "neither a number"},
		{"two", 3, 0, AnnoIPPoolIPNumber},
		{"+", 3, 0, "neither a number"},
	} {
		ann := map[string]string{}
		if tc.ann != "" {
			ann[AnnoIPPoolIPNumber] = tc.ann
		}
		got, err := poolSize(ann, tc.replicas)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q replicas %d: err %v, want one containing %q", tc.ann, tc.replicas, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q replicas %d: %d, %v; want %d", tc.ann, tc.replicas, got, err, tc.want)
		}
	}
}

func TestAppWants(t *testing.T) {
	two := int32(2)
	dep := func(ann map[string]string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
			Spec: appsv1.DeploymentSpec{Replicas: &two, Template: templateWith(ann)}}
	}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want []string // subnet/family/interface/size/reclaim
		err  string
	}{
		{"no annotation", nil, nil, ""},
		{"subnet, both families, default interface", map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":["s4"],"ipv6":["s6"]}`},
			[]string{"s4/ipv4/eth0/3/true", "s6/ipv6/eth0/3/true"}, ""},
		{"subnets wins over subnet; first subnet per family", map[string]string{
			"ipam.spidernet.io/subnet":  `{"ipv4":["ignored"]}`,
			"ipam.spidernet.io/subnets": `[{"interface":"eth0","ipv4":["a","b"]},{"interface":"net1","ipv4":["c"]}]`,
			AnnoIPPoolIPNumber:          "4", AnnoIPPoolReclaim: "false"},
			[]string{"a/ipv4/eth0/4/false", "c/ipv4/net1/4/false"}, ""},
		{"pattern refused", map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":["s*"]}`}, nil, "is a pattern"},
		{"bad JSON names the annotation", map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":`}, nil, "annotations[ipam.spidernet.io/subnet]"},
		{"bad reclaim", map[string]string{"ipam.spidernet.io/subnet": `{"ipv4":["s"]}`, AnnoIPPoolReclaim: "maybe"}, nil, AnnoIPPoolReclaim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, ok := appOf(dep(tc.ann))
			if !ok {
				t.Fatal("a Deployment is an application")
			}
			ws, err := a.wants()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range ws {
				got = append(got, strings.Join([]string{w.Subnet, string(w.Family), w.Interface, strconv.FormatUint(w.Size, 10), strconv.FormatBool(w.Reclaim)}, "/"))
				if w.Pool != autoPoolName("Deployment", "ns", "web", w.Interface, w.Subnet, w.Family) {
					t.Errorf("pool name %s", w.Pool)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("wants %v, want %v", got, tc.want)
			}
		})
	}
}

func templateWith(ann map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}
}

// A ReplicaSet a Deployment controls, or a Job a CronJob runs, is not an application.
func TestAppOfOwned(t *testing.T) {
	ctl := true
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", Controller: &ctl}}}}
	if _, ok := appOf(rs); ok {
		t.Error("a Deployment's ReplicaSet counted as an application")
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", OwnerReferences: []metav1.OwnerReference{{Kind: "CronJob", Name: "c", Controller: &ctl}}}}
	if _, ok := appOf(job); ok {
		t.Error("a CronJob's Job counted as an application")
	}
	par := int32(4)
	if a, ok := appOf(&batchv1.Job{Spec: batchv1.JobSpec{Parallelism: &par}}); !ok || a.Replicas != 4 {
		t.Errorf("a Job's replicas are its parallelism: %+v", a)
	}
	if a, ok := appOf(&appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 7}}); !ok || a.Replicas != 7 {
		t.Errorf("a DaemonSet's replicas are its desired pods: %+v", a)
	}
}

// Auto pool names are DNS subdomains, unique per application, interface and subnet.
func TestAutoPoolName(t *testing.T) {
	a := autoPoolName("Deployment", "a-b", "c", "eth0", "s", policy.IPv4)
	b := autoPoolName("Deployment", "a", "b-c", "eth0", "s", policy.IPv4)
	if a == b {
		t.Errorf("a-b/c and a/b-c share the pool name %s", a)
	}
	if c := autoPoolName("StatefulSet", "a-b", "c", "eth0", "s", policy.IPv4); c == a {
		t.Error("kinds share a pool name")
	}
	long := autoPoolName("Deployment", "ns", strings.Repeat("x", 253), "Net_1", "s", policy.IPv6)
	if len(long) > 253 || !strings.HasPrefix(long, "auto6-") || strings.ContainsAny(long, "_N") {
		t.Errorf("name %q is not a DNS subdomain", long)
	}
}

func TestTopBottom(t *testing.T) {
	s, err := addrset.Parse("x", policy.IPv4, []string{"10.0.0.1-10.0.0.3", "10.0.0.10", "10.0.0.20-10.0.0.21"})
	if err != nil {
		t.Fatal(err)
	}
	if got := bottom(s, 4).String(); got != "10.0.0.1-10.0.0.3,10.0.0.10" {
		t.Errorf("bottom 4 = %s", got)
	}
	if got := top(s, 3).String(); got != "10.0.0.10,10.0.0.20-10.0.0.21" {
		t.Errorf("top 3 = %s", got)
	}
	if !top(s, 10).Subtract(s).Empty() || top(s, 10).Size() != s.Size() || !bottom(s, 0).Empty() {
		t.Error("top/bottom past the ends")
	}
}

func sn(name, cidr string, ips ...string) allotv1.AllotSubnet {
	return allotv1.AllotSubnet{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: allotv1.AllotSubnetSpec{IPv4: &allotv1.SubnetFamily{Subnet: cidr, IPs: ips}}}
}

// The webhook's decisions on AllotSubnets.
func TestSubnetProblems(t *testing.T) {
	others := []allotv1.AllotSubnet{sn("a", "10.0.0.0/24", "10.0.0.10-10.0.0.50"), sn("b", "10.1.0.0/16", "10.1.0.10")}
	held := sn("h", "10.2.0.0/24", "10.2.0.10-10.2.0.30")
	held.Status.Allocations = []allotv1.SubnetAllocation{{Pool: "auto4-web", Family: "ipv4", Application: "Deployment/default/web", IPs: []string{"10.2.0.20-10.2.0.22"}}}
	for _, tc := range []struct {
		name string
		obj  allotv1.AllotSubnet
		old  *allotv1.AllotSubnet
		want string // "" allowed
	}{
		{"valid", sn("c", "10.0.0.0/24", "10.0.0.60-10.0.0.70"), nil, ""},
		{"unparsable entry names the field", sn("c", "10.3.0.0/24", "10.3.0.10", "nope"), nil, "spec.ipv4.ips"},
		{"entry outside the subnet", sn("c", "10.3.0.0/24", "10.4.0.10"), nil, "spec.ipv4.ips[0]: \"10.4.0.10\" is not inside the subnet"},
		{"shares addresses with another subnet", sn("c", "10.0.0.0/24", "10.0.0.50-10.0.0.60"), nil, `spec.ipv4.ips: 1 address(es) (10.0.0.50) are also in AllotSubnet "a"`},
		{"overlapping different subnet", sn("c", "10.1.2.0/24", "10.1.2.10"), nil, `spec.ipv4.subnet: 10.1.2.0/24 overlaps the subnet 10.1.0.0/16 of AllotSubnet "b"`},
		{"update keeps allocated addresses", sn("h", "10.2.0.0/24", "10.2.0.15-10.2.0.30"), &held, ""},
		{"update takes out allocated addresses", sn("h", "10.2.0.0/24", "10.2.0.10-10.2.0.20"), &held, `10.2.0.21-10.2.0.22 of SharedIPPool "auto4-web"`},
		{"update excludes an allocated address", func() allotv1.AllotSubnet {
			s := sn("h", "10.2.0.0/24", "10.2.0.10-10.2.0.30")
			s.Spec.IPv4.ExcludeIPs = []string{"10.2.0.21"}
			return s
		}(), &held, "cannot take out addresses given to pools"},
		{"update makes an allocated address the gateway", func() allotv1.AllotSubnet {
			s := sn("h", "10.2.0.0/24", "10.2.0.10-10.2.0.30")
			s.Spec.IPv4.Gateway = "10.2.0.20"
			return s
		}(), &held, "10.2.0.20 of SharedIPPool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(subnetProblems(&tc.obj, tc.old, append(others, held)), "; ")
			if tc.want == "" {
				if got != "" {
					t.Fatalf("refused: %s", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("problems %q; want one containing %q", got, tc.want)
			}
		})
	}
}

// IPPools are refused, naming the mode, wherever multi-pool is off.
func TestIPPoolMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // "" allowed
	}{
		{"multi-pool", Options{}, ""},
		{"multi-pool and ClusterCIDRConfig", Options{ClusterCIDRConfig: true}, ""},
		{"ClusterCIDRConfig only", Options{DisableMultiPool: true, ClusterCIDRConfig: true}, "IPPool has no effect in ClusterCIDRConfig mode"},
		{"ENI", Options{DisableMultiPool: true, ENI: &ENIOptions{}}, "IPPool has no effect in ENI mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(ippoolProblems(ippoolMode(&tc.o)), "; ")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("problems %q; want %q", got, tc.want)
			}
		})
	}
}
