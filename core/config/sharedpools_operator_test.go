package config

import (
	"strings"
	"testing"
	"time"
)

func TestSharedPoolsOperator(t *testing.T) {
	c, err := load(writeFile(t, "mode: operator\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if gc := c.Cluster.SharedPools.GC; gc.Grace != 30*time.Second || gc.Interval != 10*time.Second {
		t.Fatalf("gc defaults %+v", gc)
	}
	if c.Cluster.SharedPools.Webhook.Enabled {
		t.Fatal("webhook on by default")
	}
	c, err = load(writeFile(t, "mode: operator\ncluster: {sharedPools: {webhook: {enabled: true, register: true, service: {namespace: kube-system, name: allot-operator}}}}\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Cluster.SharedPools.Webhook; w.Address != ":9443" || w.FailurePolicy != "Fail" || w.Service.Port != 443 || w.TimeoutSeconds != 5 {
		t.Fatalf("webhook defaults %+v", w)
	}
	for _, tt := range []struct{ name, body, want string }{
		{"grace too short", "gc: {grace: 10ms}", "cluster.sharedPools.gc.grace: 10ms must be between 1s and 24h"},
		{"interval", "gc: {interval: 2h}", "cluster.sharedPools.gc.interval: 2h0m0s must be between"},
		{"policy", "webhook: {enabled: true, failurePolicy: Maybe}", `cluster.sharedPools.webhook.failurePolicy: "Maybe" must be Fail or Ignore`},
		{"address", "webhook: {enabled: true, address: nope}", "cluster.sharedPools.webhook.address"},
		{"url", "webhook: {enabled: true, url: 'http://x/validate'}", "cluster.sharedPools.webhook.url"},
		{"service half", "webhook: {enabled: true, service: {name: x}}", "cluster.sharedPools.webhook.service: set both"},
		{"register nowhere", "webhook: {enabled: true, register: true}", "cluster.sharedPools.webhook.register: needs webhook.url or webhook.service"},
		{"timeout", "webhook: {enabled: true, timeoutSeconds: 60}", "cluster.sharedPools.webhook.timeoutSeconds: 60"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(writeFile(t, "mode: operator\ncluster: {sharedPools: {"+tt.body+"}}\n"), nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want %q", err, tt.want)
			}
		})
	}
}
