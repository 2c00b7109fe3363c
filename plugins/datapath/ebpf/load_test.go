package ebpf

import (
	"testing"

	"github.com/allot-ipam/allot/internal/testenv"
	"github.com/allot-ipam/allot/sdk/datapath"
)

// TestLoad runs the verifier over both programs with default and small
// map sizes.
func TestLoad(t *testing.T) {
	testenv.RequireRoot(t, loadsPrograms)
	for _, sizes := range []datapath.MapSizes{{}, {ConnTrack: 1024, CIDRs: 16}} {
		objs, err := load(effectiveSizes(sizes), "")
		if err != nil {
			t.Fatalf("sizes %+v: %v", sizes, err)
		}
		if got := objs.Ct.MaxEntries(); got != effectiveSizes(sizes).ConnTrack {
			t.Errorf("ct max entries %d, want %d", got, effectiveSizes(sizes).ConnTrack)
		}
		objs.Close()
	}
}
