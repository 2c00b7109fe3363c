package wasm

import (
	"bytes"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
	"github.com/allot-ipam/allot/sdk/wire"
)

// TestEncodePodMatchesPoolRefs: the view mirror's shortcut sends exactly the bytes that
// encoding every pool and replacing the known ones by references does, whatever changes
// between requests, including views changed in place by the caller.
func TestEncodePodMatchesPoolRefs(t *testing.T) {
	viaViews, viaBytes := &instance{}, &instance{}
	req := podRequest("web", nil)
	steps := []struct {
		name   string
		change func()
	}{
		{"first request", func() {}},
		{"unchanged", func() {}},
		{"free count changed", func() { req.Pools[3].Free++ }},
		{"free count to zero", func() { req.Pools[4].Free = 0 }},
		{"free count back from zero", func() { req.Pools[4].Free = 7 }},
		{"flag changed in place", func() { req.Pools[5].Disabled = true }},
		{"selector map changed in place", func() { req.Pools[0].NodeAffinity.MatchLabels["zone"] = "b" }},
		{"list changed in place", func() { req.Pools[2].NamespaceName[0] = "other" }},
		{"CIDR changed in place", func() { req.Pools[1].CIDRs[0] = netip.MustParsePrefix("fd00:99::/64") }},
		{"empty selector is not a nil one", func() { req.Pools[1].PodAffinity = &policy.LabelSelector{} }},
		{"pool removed", func() { req.Pools = slices.Delete(req.Pools, 0, 1) }},
		{"unchanged again", func() {}},
		{"pod changed", func() { req.Pod.Name = "web-2" }},
		{"forgotten", func() { viaViews.forgetPools(); viaBytes.forgetPools() }},
		{"after forgetting", func() {}},
	}
	for _, s := range steps {
		s.change()
		got, err := viaViews.encodePod(nil, req, true)
		if err != nil {
			t.Fatal(err)
		}
		full, err := wire.AppendPodRequest(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		if want := viaBytes.withPoolRefs(nil, full); !bytes.Equal(got, want) {
			t.Fatalf("%s: the view mirror's request differs from the byte mirror's", s.name)
		}
	}
}

// TestSameViewCoversEveryField: changing any field of a PoolView but Free makes it a
// different view, so a field added to policy.PoolView cannot be forgotten by sameView.
func TestSameViewCoversEveryField(t *testing.T) {
	base := benchPools()[0]
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		v := cloneView(&base)
		changeField(t, reflect.ValueOf(&v).Elem().Field(i), f.Name)
		if same := sameView(&base, &v); same != (f.Name == "Free") {
			t.Errorf("field %s changed: sameView = %v", f.Name, same)
		}
	}
	c := cloneView(&base)
	base.NodeAffinity.MatchLabels["zone"] = "b"
	if sameView(&base, &c) {
		t.Error("a clone shares its selector's map with the original")
	}
}

// changeField sets v to a value different from any benchPools gives it.
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
		t.Fatalf("field %s: kind %s not handled; extend sameView and this test", name, v.Kind())
	}
}
