package operator_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
	"github.com/allot-ipam/allot/test/k8senv"
)

// TestSharedWebhook: the operator serves the webhook with a generated CA, registers it, and
// the real API server calls it: conflicting pools, unparsable or out-of-subnet entries and the
// removal of a held address are refused with the field named; valid changes and
// metadata-only updates pass.
func TestSharedWebhook(t *testing.T) {
	h := newHarness(t)
	h.create(node("n1"), sharedPool("a", "10.0.0.0/24", "10.0.0.10-10.0.0.20"),
		sharedPool("b", "10.1.0.0/16", "10.1.0.10"))
	r := h.run("op", func(o *operator.Options) {
		sharedOpts(o)
		o.SharedPools.Webhook = operator.WebhookOptions{Address: "127.0.0.1:0", Register: true}
	})
	r.waitLeader(t, waitFor)
	// Registered, and the API server has picked the configuration up.
	eventually(t, waitFor, "webhook answering", func() error {
		var vwc admissionregv1.ValidatingWebhookConfiguration
		if err := h.c.Get(h.ctx, client.ObjectKey{Name: operator.DefaultWebhookConfigName}, &vwc); err != nil {
			return err
		}
		err := h.c.Create(h.ctx, sharedPool("probe", "10.0.0.0/24", "10.0.0.20"), client.DryRunAll)
		if err == nil {
			return fmt.Errorf("not refused yet")
		}
		return nil
	})
	if got := *mustVWC(t, h).Webhooks[0].FailurePolicy; got != admissionregv1.Fail {
		t.Errorf("failurePolicy %s; want Fail", got)
	}
	a := h.pod("a0", "n1", nil)
	h.claim("10.0.0.15", "a", a, "eth0", "")

	tests := []struct {
		name string
		obj  client.Object
		upd  func(*allotv1.SharedIPPool) // update pool "a" instead of creating obj
		want string                      // "" allowed
	}{
		{"shares an address", sharedPool("c", "10.0.0.0/24", "10.0.0.5-10.0.0.10"), nil,
			`spec.ipv4.ips: 1 address(es) (10.0.0.10) are also in SharedIPPool "a"`},
		{"overlapping subnet", sharedPool("c", "10.1.4.0/24", "10.1.4.1"), nil,
			`spec.ipv4.subnet: 10.1.4.0/24 overlaps the subnet 10.1.0.0/16 of SharedIPPool "b"`},
		{"unparsable range", sharedPool("c", "10.2.0.0/24", "10.2.0.1", "10.2.0.9-10.2.0.3"), nil, "spec.ipv4.ips[1]"},
		{"outside the subnet", sharedPool("c", "10.2.0.0/24", "10.2.0.1", "10.3.0.1"), nil,
			`spec.ipv4.ips[1]: "10.3.0.1" is not inside the subnet`},
		{"valid", sharedPool("c", "10.0.0.0/24", "10.0.0.21-10.0.0.30"), nil, ""},
		{"remove a held address", nil, func(p *allotv1.SharedIPPool) { p.Spec.IPv4.IPs = []string{"10.0.0.10-10.0.0.14"} },
			"cannot remove addresses pods hold: 10.0.0.15 held by default/a0"},
		{"exclude a held address", nil, func(p *allotv1.SharedIPPool) { p.Spec.IPv4.ExcludeIPs = []string{"10.0.0.15"} },
			"cannot remove addresses pods hold"},
		{"remove a free address", nil, func(p *allotv1.SharedIPPool) { p.Spec.IPv4.IPs = []string{"10.0.0.10-10.0.0.19"} }, ""},
		{"metadata only", nil, func(p *allotv1.SharedIPPool) { p.Labels = map[string]string{"x": "y"} }, ""},
		{"reserved ok", &allotv1.ReservedIP{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: allotv1.ReservedIPSpec{IPs: []string{"10.0.0.1", "fd00::1-fd00::5"}}}, nil, ""},
		{"reserved unparsable", &allotv1.ReservedIP{ObjectMeta: metav1.ObjectMeta{Name: "r2"}, Spec: allotv1.ReservedIPSpec{IPs: []string{"10.0.0.1", "10.0.0.1-fd00::1"}}}, nil, "spec.ips[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.upd != nil {
				// The operator writes the pool's status meanwhile: retry resourceVersion conflicts.
				for range 20 {
					p := h.getSharedPool("a")
					tt.upd(p)
					if err = h.c.Update(h.ctx, p); !apierrors.IsConflict(err) {
						break
					}
				}
			} else {
				err = h.c.Create(h.ctx, tt.obj)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("allowed; want refusal containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("refusal %q does not contain %q", err, tt.want)
			case tt.want != "" && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
				t.Fatalf("refusal %v is not Invalid", err)
			}
		})
	}
	// Deleting a pool is not the webhook's business: the finalizer holds it while claims exist,
	// and removing the finalizer (a metadata update) never goes to the webhook.
	if err := h.c.Delete(h.ctx, h.getSharedPool("c")); err != nil {
		t.Fatal(err)
	}
	h.waitGone("unused pool deleted", &allotv1.SharedIPPool{ObjectMeta: metav1.ObjectMeta{Name: "c"}})
	if v := metricValue(t, r, "allot_operator_shared_admission_total", "result", "denied"); v < 6 {
		t.Errorf("denied admissions %v; want at least 6", v)
	}
}

func mustVWC(t *testing.T, h *harness) *admissionregv1.ValidatingWebhookConfiguration {
	t.Helper()
	var vwc admissionregv1.ValidatingWebhookConfiguration
	if err := h.c.Get(h.ctx, client.ObjectKey{Name: operator.DefaultWebhookConfigName}, &vwc); err != nil {
		t.Fatal(err)
	}
	return &vwc
}

// TestSharedCRDRules exercises the CEL rules of the shared-pool kinds on the real API server
// (no operator, no webhook): what the CRDs alone refuse.
func TestSharedCRDRules(t *testing.T) {
	h := newHarness(t)
	base := func() *allotv1.SharedIPPool {
		p := sharedPool("p", "10.0.0.0/24", "10.0.0.10-10.0.0.20")
		p.Spec.IPv4.Gateway = "10.0.0.1"
		return p
	}
	h.create(base())
	creates := []struct {
		name string
		mod  func(*allotv1.SharedIPPool)
		want string
	}{
		{"no family", func(p *allotv1.SharedIPPool) { p.Spec.IPv4 = nil }, "at least one of spec.ipv4 and spec.ipv6"},
		{"host bits", func(p *allotv1.SharedIPPool) { p.Spec.IPv4.Subnet = "10.0.0.1/24" }, "no host bits"},
		{"v6 subnet in ipv4", func(p *allotv1.SharedIPPool) { p.Spec.IPv4.Subnet = "fd00::/64" }, "spec.ipv4.subnet must be an IPv4 subnet"},
		{"gateway outside", func(p *allotv1.SharedIPPool) { p.Spec.IPv4.Gateway = "10.9.0.1" }, "gateway must lie inside subnet"},
		{"gateway not an IP", func(p *allotv1.SharedIPPool) { p.Spec.IPv4.Gateway = "x" }, "must be an IP address"},
		{"no ips", func(p *allotv1.SharedIPPool) { p.Spec.IPv4.IPs = nil }, "spec.ipv4.ips"},
		{"bad route", func(p *allotv1.SharedIPPool) {
			p.Spec.IPv4.Routes = []allotv1.RouteSpec{{Dst: "nope"}}
		}, "must be a CIDR"},
	}
	for _, tt := range creates {
		t.Run("create/"+tt.name, func(t *testing.T) {
			p := base()
			p.Name = "new"
			tt.mod(p)
			err := h.c.Create(h.ctx, p, client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want refusal containing %q", err, tt.want)
			}
		})
	}
	updates := []struct {
		name string
		mod  func(*allotv1.SharedIPPool)
		want string
	}{
		{"subnet immutable", func(p *allotv1.SharedIPPool) { p.Spec.IPv4.Subnet = "10.0.0.0/16" }, "subnet is immutable"},
		{"family added", func(p *allotv1.SharedIPPool) {
			p.Spec.IPv6 = &allotv1.SharedPoolFamily{Subnet: "fd00::/64", IPs: []string{"fd00::10"}}
		}, "families are immutable"},
		{"ips may change", func(p *allotv1.SharedIPPool) { p.Spec.IPv4.IPs = []string{"10.0.0.10-10.0.0.30"} }, ""},
	}
	for _, tt := range updates {
		t.Run("update/"+tt.name, func(t *testing.T) {
			p := h.getSharedPool("p")
			tt.mod(p)
			err := h.c.Update(h.ctx, p, client.DryRunAll)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want refusal containing %q", err, tt.want)
			}
		})
	}
	// AddressClaim: ip and pool immutable; ReservedIP needs entries.
	a := h.pod("x", "", nil)
	c := h.claim("10.0.0.10", "p", a, "eth0", "")
	c.Spec.IP = "10.0.0.11"
	if err := h.c.Update(h.ctx, c, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "ip and pool are immutable") {
		t.Fatalf("claim ip change: %v", err)
	}
	err := h.c.Create(h.ctx, &allotv1.ReservedIP{ObjectMeta: metav1.ObjectMeta{Name: "r"}}, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "spec.ips") {
		t.Fatalf("empty ReservedIP: %v", err)
	}
}

// TestDeployWebhookManifests: deploy/webhook is accepted by the API server (schema, CEL
// matchConditions), dry-run.
func TestDeployWebhookManifests(t *testing.T) {
	h := newHarness(t)
	dir, err := k8senv.FindCRDDir()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(filepath.Dir(dir), "webhook", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/webhook: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := h.c.Create(h.ctx, &u, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Errorf("%s: %s %s: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
		}
	}
}
