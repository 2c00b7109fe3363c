package scale

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/operator"
)

// audit reads what the run leaves in the cluster: the blocks held by more than one AllotNode
// (the operator must never hand a block out twice, however loaded the API server is; every
// block here is a /24 or a /120 of one pool, so overlapping blocks are equal ones), and the
// operator's Events by reason (a start that goes well records none: only failures have one).
func audit(tb testing.TB, c client.Client) (shared []string, events map[string]int64) {
	ctx := context.Background()
	var nodes allotv1.AllotNodeList
	if err := c.List(ctx, &nodes); err != nil {
		tb.Fatalf("audit: list AllotNodes: %v", err)
	}
	holder := map[string]string{}
	for _, n := range nodes.Items {
		for _, a := range n.Spec.IPAM.Pools.Allocated {
			for _, cidr := range a.CIDRs {
				if h, ok := holder[cidr]; ok {
					shared = append(shared, fmt.Sprintf("%s (%s and %s)", cidr, h, n.Name))
					continue
				}
				holder[cidr] = n.Name
			}
		}
	}
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(operator.EventsNamespace)); err != nil {
		tb.Fatalf("audit: list Events: %v", err)
	}
	events = map[string]int64{}
	for _, e := range evs.Items {
		events[e.Reason]++
	}
	return shared, events
}
