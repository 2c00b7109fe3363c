package main

import (
	"context"
	"reflect"
	"testing"

	"github.com/allot-ipam/allot/sdk/policy"
)

func pools() []policy.PoolView {
	return []policy.PoolView{
		{Name: "blue", Family: policy.IPv4, Free: 10},
		{Name: "cni4", Family: policy.IPv4, Free: 10},
		{Name: "cni6", Family: policy.IPv6, Free: 10},
		{Name: "def4", Family: policy.IPv4, Free: 10, Default: true},
		{Name: "def6", Family: policy.IPv6, Free: 10, Default: true},
		{Name: "disabled", Family: policy.IPv4, Free: 10, Disabled: true, Default: true},
		{Name: "empty", Family: policy.IPv4, Free: 0},
		{Name: "green6", Family: policy.IPv6, Free: 10},
		{Name: "gone", Family: policy.IPv4, Free: 10, Terminating: true},
	}
}

func cand(names ...string) []policy.Candidate {
	var out []policy.Candidate
	for _, n := range names {
		out = append(out, policy.Candidate{Pool: n})
	}
	return out
}

func TestLabelPolicy(t *testing.T) {
	tests := []struct {
		name   string
		label  string // policy's configured label
		labels map[string]string
		cni    policy.CNIRequest
		pools  []policy.PoolView
		want   policy.PodDecision
	}{
		{name: "label v4", labels: map[string]string{DefaultLabel: "blue"},
			want: policy.PodDecision{Code: policy.Decided, IPv4: cand("blue"), Source: "pod label allot.io/pool"}},
		{name: "label v6", labels: map[string]string{DefaultLabel: "green6"},
			want: policy.PodDecision{Code: policy.Decided, IPv6: cand("green6"), Source: "pod label allot.io/pool"}},
		{name: "custom label", label: "team/pool", labels: map[string]string{"team/pool": "blue", DefaultLabel: "green6"},
			want: policy.PodDecision{Code: policy.Decided, IPv4: cand("blue"), Source: "pod label team/pool"}},
		{name: "label unknown pool", labels: map[string]string{DefaultLabel: "nope"},
			want: policy.PodDecision{Code: policy.NoFit, Reason: `pod label allot.io/pool names pool "nope", which does not exist`}},
		{name: "label disabled pool", labels: map[string]string{DefaultLabel: "disabled"},
			want: policy.PodDecision{Code: policy.NoFit, Reason: `pod label allot.io/pool names pool "disabled", which is disabled`}},
		{name: "label terminating pool", labels: map[string]string{DefaultLabel: "gone"},
			want: policy.PodDecision{Code: policy.NoFit, Reason: `pod label allot.io/pool names pool "gone", which is terminating`}},
		{name: "label exhausted pool", labels: map[string]string{DefaultLabel: "empty"},
			want: policy.PodDecision{Code: policy.NoFit, Reason: `pod label allot.io/pool names pool "empty", which is exhausted`}},
		{name: "cni defaults, in config order, unusable skipped",
			cni:  policy.CNIRequest{DefaultIPv4Pools: []string{"empty", "cni4", "blue"}, DefaultIPv6Pools: []string{"cni6", "missing"}},
			want: policy.PodDecision{Code: policy.Decided, IPv4: cand("cni4", "blue"), IPv6: cand("cni6"), Source: "CNI config default pools"}},
		{name: "cluster defaults", cni: policy.CNIRequest{DefaultIPv4Pools: []string{"missing"}},
			want: policy.PodDecision{Code: policy.Decided, IPv4: cand("def4"), IPv6: cand("def6"), Source: "cluster default pools"}},
		{name: "nothing: skip", pools: []policy.PoolView{{Name: "blue", Family: policy.IPv4, Free: 1}},
			want: policy.PodDecision{Code: policy.Skip, Reason: "no allot.io/pool label and no usable default pool"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := tt.pools
			if ps == nil {
				ps = pools()
			}
			req := &policy.PodRequest{Pod: policy.Pod{Name: "p", Labels: tt.labels}, CNI: tt.cni, Pools: ps}
			got, err := LabelPolicy{Label: tt.label}.SelectPodPools(context.Background(), req)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
}

func TestNodeSkips(t *testing.T) {
	d, err := LabelPolicy{}.SelectNodeCIDRConfig(context.Background(), &policy.NodeRequest{})
	if err != nil || d.Code != policy.Skip {
		t.Fatalf("got %+v, %v", d, err)
	}
}
