package none

import (
	"context"
	"net/netip"
	"testing"

	"github.com/allot-ipam/allot/sdk/datapath"
)

func TestNone(t *testing.T) {
	ctx := context.Background()
	d := New(nil)
	if err := d.Apply(ctx, datapath.Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	st, err := d.Status(ctx)
	if err != nil || st.Name != Name || st.Active || st.Detail["applied"] != "true" {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if err := d.Apply(ctx, datapath.Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.1/24")}}); err == nil {
		t.Fatal("want validation error")
	}
	for range 2 {
		if err := d.Remove(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := d.Status(ctx); st.Detail["applied"] != "false" {
		t.Fatalf("after Remove: %+v", st)
	}
}
