package pluginhost

import (
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/config"
)

func TestCallTimeout(t *testing.T) {
	for _, tc := range []struct {
		kind    string
		timeout time.Duration
		want    time.Duration
	}{
		{KindCloudBackend, 0, DefaultCloudBackendTimeout},
		{KindCloudBackend, 30 * time.Second, 30 * time.Second},
		{KindPoolPolicy, 0, 0}, // the transport's default
		{KindDatapath, time.Second, time.Second},
	} {
		if got := callTimeout(config.Plugin{Kind: tc.kind, Timeout: tc.timeout}); got != tc.want {
			t.Errorf("%s with timeout %s: got %s, want %s", tc.kind, tc.timeout, got, tc.want)
		}
	}
}
