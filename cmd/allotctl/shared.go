package main

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Shared pool views: SharedIPPools with their usage, and the AddressClaims saying who holds
// each address. Both read the API server; no agent is asked.

// SharedPoolRow is one family of one SharedIPPool (allotctl cluster shared-pools).
type SharedPoolRow struct {
	Pool   string `json:"pool"`
	Family string `json:"family"`
	Subnet string `json:"subnet"`
	// Used counts the pool's AddressClaims of this family: the record of who holds what, so
	// it is exact even when the operator has not refreshed the pool's status yet.
	Used int64 `json:"used"`
	// Total is status.<family>.totalIPs as the operator computed it (ips minus excludeIPs
	// minus reserved addresses); nil until the operator has written it.
	Total    *int64   `json:"total,omitempty"`
	Gateway  string   `json:"gateway,omitempty"`
	Routes   []string `json:"routes,omitempty"`
	Default  bool     `json:"default"`
	Disable  bool     `json:"disable"`
	Selected []string `json:"selectedBy,omitempty"`
	// Terminating is true once the pool is being deleted (it hands nothing out any more).
	Terminating bool               `json:"terminating,omitempty"`
	Conditions  []metav1.Condition `json:"conditions,omitempty"`
}

// ClaimRow is one held address (allotctl cluster claims).
type ClaimRow struct {
	IP          string    `json:"ip"`
	Pool        string    `json:"pool"`
	Namespace   string    `json:"namespace"`
	Pod         string    `json:"pod"`
	PodUID      string    `json:"podUID,omitempty"`
	Node        string    `json:"node"`
	Interface   string    `json:"interface"`
	ContainerID string    `json:"containerID,omitempty"`
	StatefulSet string    `json:"statefulSet,omitempty"`
	Created     time.Time `json:"created"`
}

// claimFilter narrows allotctl cluster claims.
type claimFilter struct {
	pool, node, namespace string
}

func (o *options) sharedCommands(run func(func(context.Context, client.Client) (any, func(*tabwriter.Writer), error)) func(*cobra.Command, []string) error) []*cobra.Command {
	var f claimFilter
	claims := &cobra.Command{
		Use:   "claims",
		Short: "Addresses held from shared pools: pool, pod, node, interface, StatefulSet",
		Args:  cobra.NoArgs,
		RunE: run(func(ctx context.Context, c client.Client) (any, func(*tabwriter.Writer), error) {
			list, err := listClaims(ctx, c, f)
			if err != nil {
				return nil, nil, err
			}
			rows := claimRows(list, f)
			return rows, func(w *tabwriter.Writer) { printClaims(w, rows, time.Now()) }, nil
		}),
	}
	claims.Flags().StringVar(&f.pool, "pool", "", "only addresses of this SharedIPPool")
	claims.Flags().StringVar(&f.node, "node", "", "only addresses held by pods on this node")
	claims.Flags().StringVar(&f.namespace, "namespace", "", "only addresses held by pods of this namespace")
	return []*cobra.Command{
		{
			Use:   "shared-pools",
			Short: "SharedIPPools per family: subnet, used/total, gateway, default/disable, conditions",
			Args:  cobra.NoArgs,
			RunE: run(func(ctx context.Context, c client.Client) (any, func(*tabwriter.Writer), error) {
				var pl allotv1.SharedIPPoolList
				if err := c.List(ctx, &pl); err != nil {
					return nil, nil, fmt.Errorf("list SharedIPPools: %w", err)
				}
				cl, err := listClaims(ctx, c, claimFilter{})
				if err != nil {
					return nil, nil, err
				}
				rows := sharedPoolRows(pl.Items, cl)
				return rows, func(w *tabwriter.Writer) { printSharedPools(w, rows) }, nil
			}),
		},
		claims,
	}
}

// listClaims lists AddressClaims, narrowed on the server by the labels every claim carries
// (allot.io/pool, allot.io/node, allot.io/pod-namespace). A value too long to be a label
// value is stored hashed, so for such a value the narrowing is left to claimRows, which
// checks the spec in every case.
func listClaims(ctx context.Context, c client.Client, f claimFilter) ([]allotv1.AddressClaim, error) {
	sel := client.MatchingLabels{}
	for _, l := range []struct{ key, val string }{
		{allotv1.LabelClaimPool, f.pool},
		{allotv1.LabelClaimNode, f.node},
		{allotv1.LabelClaimNamespace, f.namespace},
	} {
		if l.val != "" && len(validation.IsValidLabelValue(l.val)) == 0 {
			sel[l.key] = l.val
		}
	}
	var list allotv1.AddressClaimList
	if err := c.List(ctx, &list, sel); err != nil {
		return nil, fmt.Errorf("list AddressClaims: %w", err)
	}
	return list.Items, nil
}

func claimFamily(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	if a.Unmap().Is4() {
		return "ipv4"
	}
	return "ipv6"
}

func sharedPoolRows(pools []allotv1.SharedIPPool, claims []allotv1.AddressClaim) []SharedPoolRow {
	used := map[[2]string]int64{} // (pool, family) -> claims
	for i := range claims {
		used[[2]string{claims[i].Spec.Pool, claimFamily(claims[i].Spec.IP)}]++
	}
	slices.SortFunc(pools, func(a, b allotv1.SharedIPPool) int { return strings.Compare(a.Name, b.Name) })
	rows := []SharedPoolRow{}
	for i := range pools {
		p := &pools[i]
		conds := slices.Clone(p.Status.Conditions)
		slices.SortFunc(conds, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
		for _, f := range []struct {
			name   string
			spec   *allotv1.SharedPoolFamily
			status *allotv1.SharedFamilyStatus
		}{{"ipv4", p.Spec.IPv4, p.Status.IPv4}, {"ipv6", p.Spec.IPv6, p.Status.IPv6}} {
			if f.spec == nil {
				continue
			}
			r := SharedPoolRow{
				Pool: p.Name, Family: f.name, Subnet: f.spec.Subnet, Gateway: f.spec.Gateway,
				Used: used[[2]string{p.Name, f.name}], Default: p.Spec.Default, Disable: p.Spec.Disable,
				Selected: selectionKinds(&p.Spec.PoolSelection), Terminating: p.DeletionTimestamp != nil,
				Conditions: conds,
			}
			for _, rt := range f.spec.Routes {
				s := rt.Dst
				if rt.Gw != "" {
					s += " via " + rt.Gw
				}
				r.Routes = append(r.Routes, s)
			}
			if f.status != nil {
				t := f.status.TotalIPs
				r.Total = &t
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// selectionKinds names the selection fields a pool sets, in the order the spiderpool-priority
// policy ranks them (podAffinity first), so the column also reads as the pool's rank.
func selectionKinds(s *allotv1.PoolSelection) []string {
	var out []string
	if s.PodAffinity != nil && !emptySelector(s.PodAffinity) {
		out = append(out, "podAffinity")
	}
	if len(s.NodeName) > 0 {
		out = append(out, "nodeName")
	}
	if s.NodeAffinity != nil && !emptySelector(s.NodeAffinity) {
		out = append(out, "nodeAffinity")
	}
	if len(s.NamespaceName) > 0 {
		out = append(out, "namespaceName")
	}
	if s.NamespaceAffinity != nil && !emptySelector(s.NamespaceAffinity) {
		out = append(out, "namespaceAffinity")
	}
	if len(s.MultusName) > 0 {
		out = append(out, "multusName")
	}
	return out
}

func emptySelector(s *metav1.LabelSelector) bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

// conditionsText is the table's CONDITIONS column: the conditions that are set (True), plus
// Ready when it is not True, sorted by type; the JSON output carries them in full.
func conditionsText(r *SharedPoolRow) string {
	var parts []string
	if r.Terminating {
		parts = append(parts, "Terminating")
	}
	for _, c := range r.Conditions {
		switch {
		case c.Status == metav1.ConditionTrue:
			parts = append(parts, c.Type)
		case c.Type == allotv1.ConditionReady || c.Status == metav1.ConditionUnknown:
			parts = append(parts, c.Type+"="+string(c.Status))
		}
	}
	return dash(strings.Join(parts, ","))
}

func printSharedPools(w *tabwriter.Writer, rows []SharedPoolRow) {
	fmt.Fprintln(w, "POOL\tFAMILY\tSUBNET\tUSED/TOTAL\tGATEWAY\tDEFAULT\tDISABLE\tSELECTED BY\tCONDITIONS")
	for i := range rows {
		r := &rows[i]
		total := "?"
		if r.Total != nil {
			total = fmt.Sprint(*r.Total)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d/%s\t%s\t%v\t%v\t%s\t%s\n", r.Pool, r.Family, r.Subnet, r.Used, total,
			dash(r.Gateway), r.Default, r.Disable, dash(strings.Join(r.Selected, ",")), conditionsText(r))
	}
}

// claimRows applies the filter (again: the label narrowing may have been skipped) and sorts
// by pool, then address numerically (IPv4 before IPv6).
func claimRows(claims []allotv1.AddressClaim, f claimFilter) []ClaimRow {
	type keyed struct {
		row  ClaimRow
		addr netip.Addr
	}
	ks := make([]keyed, 0, len(claims))
	for i := range claims {
		c := &claims[i]
		h := c.Spec.Holder
		if (f.pool != "" && c.Spec.Pool != f.pool) || (f.node != "" && h.Node != f.node) || (f.namespace != "" && h.Namespace != f.namespace) {
			continue
		}
		a, _ := netip.ParseAddr(c.Spec.IP) // an unparsable address (none pass the CRD) sorts first
		ks = append(ks, keyed{addr: a.Unmap(), row: ClaimRow{
			IP: c.Spec.IP, Pool: c.Spec.Pool, Namespace: h.Namespace, Pod: h.Pod, PodUID: h.PodUID, Node: h.Node,
			Interface: h.Interface, ContainerID: h.ContainerID, StatefulSet: h.StatefulSet, Created: c.CreationTimestamp.Time,
		}})
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := strings.Compare(a.row.Pool, b.row.Pool); c != 0 {
			return c
		}
		if c := a.addr.Compare(b.addr); c != 0 {
			return c
		}
		return strings.Compare(a.row.IP, b.row.IP)
	})
	rows := make([]ClaimRow, len(ks))
	for i := range ks {
		rows[i] = ks[i].row
	}
	return rows
}

func printClaims(w *tabwriter.Writer, rows []ClaimRow, now time.Time) {
	fmt.Fprintln(w, "IP\tPOOL\tPOD\tNODE\tINTERFACE\tSTATEFULSET\tAGE")
	for _, r := range rows {
		pod := "-"
		if r.Pod != "" {
			pod = r.Namespace + "/" + r.Pod
		}
		a := "-"
		if !r.Created.IsZero() {
			a = now.Sub(r.Created).Round(time.Second).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.IP, r.Pool, pod, dash(r.Node), dash(r.Interface), dash(r.StatefulSet), a)
	}
}
