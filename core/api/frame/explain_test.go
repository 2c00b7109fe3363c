package frame

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/allot-ipam/allot/core/api"
)

func TestExplainRoundTrip(t *testing.T) {
	req := &api.ExplainRequest{Pod: api.PodRef{Namespace: "web", Name: "p"}, Owner: api.Owner{IfName: "net1"},
		DryRun: &api.DryRun{Request: api.AllocateRequest{Owner: api.Owner{ContainerID: "dry", IfName: "eth0"}, Network: "n",
			Pools: []string{"a"}, IPs: []string{"10.0.0.1"}},
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"ipam.cilium.io/ip-pool": "blue"},
			OwnerKind: "StatefulSet", OwnerName: "web"}}
	var gotReq api.ExplainRequest
	if err := DecodeExplainRequest(AppendExplainRequest(nil, req), &gotReq); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&gotReq, req) {
		t.Fatalf("request: got %+v\nwant %+v", gotReq, *req)
	}

	resp := &api.ExplainResponse{Explanations: []api.Explanation{{
		Owner: api.Owner{ContainerID: "c", IfName: "eth0"}, Network: "n", Pod: api.PodRef{Namespace: "web", Name: "p"},
		Time: time.Unix(1700000000, 5), DryRun: true, Service: "node pools",
		Policies: []api.PolicyStep{{Policy: "a", Code: "Skip", Reason: strings.Repeat("r", 200)},
			{Policy: "b", Code: "Decided", Source: "s", IPv4: []string{"x"}, IPv6: []string{"y"}, Fallback: true, Error: "e"}},
		Pools: []api.PoolVerdict{{Pool: "x", Family: "ipv4", Verdict: api.VerdictTaken, By: "allocator", Free: 3, Total: 4},
			{Pool: "z", Family: "ipv4", Verdict: api.VerdictRejected, By: "b", Cause: "NoMatch", Reason: "selector"}},
		Addresses: []api.ChosenAddress{{Address: "10.0.0.2/24", Pool: "x", Family: "ipv4", Block: "10.0.0.0/24", Gateway: "10.0.0.1"}},
		Error:     &api.Error{Code: api.CodeExhausted, Message: "m", Field: "f"},
	}, {Owner: api.Owner{ContainerID: "d", IfName: "eth0"}}}}
	var gotResp api.ExplainResponse
	if err := DecodeExplainResponse(AppendExplainResponse(nil, resp), &gotResp); err != nil {
		t.Fatal(err)
	}
	if !gotResp.Explanations[0].Time.Equal(resp.Explanations[0].Time) {
		t.Fatalf("time %v", gotResp.Explanations[0].Time)
	}
	gotResp.Explanations[0].Time = resp.Explanations[0].Time
	if !reflect.DeepEqual(&gotResp, resp) {
		t.Fatalf("response: got %+v\nwant %+v", gotResp, *resp)
	}
}

func TestExplainRequestBadUTF8NamesField(t *testing.T) {
	req := &api.ExplainRequest{DryRun: &api.DryRun{Labels: map[string]string{"app": "\xff"}}}
	var got api.ExplainRequest
	err := DecodeExplainRequest(AppendExplainRequest(nil, req), &got)
	if err == nil || !strings.Contains(err.Error(), "explain.dryRun") {
		t.Fatalf("err = %v, want one naming explain.dryRun", err)
	}
}
