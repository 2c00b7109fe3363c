package wire

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

func snapshotBase() policy.PoolView {
	return policy.PoolView{
		Name: "pool-v4-00", Family: policy.IPv4, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")},
		Total: 65534, Free: 60000, Default: true,
		NodeAffinity:  &policy.LabelSelector{MatchLabels: map[string]string{"zone": "a", "rack": "r1"}},
		NamespaceName: []string{"default", "prod"},
		PodAffinity: &policy.LabelSelector{MatchExpressions: []policy.Requirement{
			{Key: "app", Operator: "In", Values: []string{"web"}}}},
	}
}

// TestPoolSnapshotCoversEveryField: changing any field of a PoolView but Free makes it a
// different view, so a field added to policy.PoolView cannot be forgotten by Same.
func TestPoolSnapshotCoversEveryField(t *testing.T) {
	base := snapshotBase()
	s := SnapshotPool(&base)
	if !s.Same(&base) {
		t.Fatal("a snapshot differs from its view")
	}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		v := base
		changeField(t, reflect.ValueOf(&v).Elem().Field(i), f.Name)
		if same := s.Same(&v); same != (f.Name == "Free") {
			t.Errorf("field %s changed: Same = %v", f.Name, same)
		}
	}
}

// TestPoolSnapshotIsDeep: changing the view in place, anywhere, is seen.
func TestPoolSnapshotIsDeep(t *testing.T) {
	for name, change := range map[string]func(*policy.PoolView){
		"label value":      func(v *policy.PoolView) { v.NodeAffinity.MatchLabels["zone"] = "b" },
		"label added":      func(v *policy.PoolView) { v.NodeAffinity.MatchLabels["x"] = "y" },
		"label removed":    func(v *policy.PoolView) { delete(v.NodeAffinity.MatchLabels, "rack") },
		"expression value": func(v *policy.PoolView) { v.PodAffinity.MatchExpressions[0].Values[0] = "db" },
		"list element":     func(v *policy.PoolView) { v.NamespaceName[0] = "other" },
		"CIDR":             func(v *policy.PoolView) { v.CIDRs[0] = netip.MustParsePrefix("10.1.0.0/16") },
	} {
		v := snapshotBase()
		s := SnapshotPool(&v)
		change(&v)
		if s.Same(&v) {
			t.Errorf("%s changed in place: still the same", name)
		}
	}
	// Empty and nil label maps encode alike; an empty selector is not a nil one.
	v := snapshotBase()
	v.NamespaceAffinity = &policy.LabelSelector{MatchLabels: map[string]string{}}
	s := SnapshotPool(&v)
	if v.NamespaceAffinity = (&policy.LabelSelector{}); !s.Same(&v) {
		t.Error("an empty label map differs from a nil one")
	}
	if v.NamespaceAffinity = nil; s.Same(&v) {
		t.Error("a nil selector is the same as an empty one")
	}
}

// changeField sets v to a value different from any snapshotBase gives it.
func changeField(t *testing.T, v reflect.Value, name string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		} else {
			v.Set(reflect.Zero(v.Type()))
		}
	default:
		t.Fatalf("field %s: kind %s not handled; extend PoolSnapshot.Same and this test", name, v.Kind())
	}
}
