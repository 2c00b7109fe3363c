package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allot-ipam/allot/core/api"
)

// writeExplanation prints one explanation for people: the request, the outcome, the policy
// chain in order, then every pool's verdict.
func writeExplanation(out io.Writer, e api.Explanation) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, explainHeading(e))
	fmt.Fprintln(w, explainOutcome(e))
	fmt.Fprintln(w, "\nPolicy chain:")
	if len(e.Policies) == 0 {
		fmt.Fprintln(w, "  (no policy was asked)")
	}
	for i, p := range e.Policies {
		fmt.Fprintf(w, "  %d. %s\t%s\t%s\n", i+1, p.Policy, stepCode(p), stepDetail(p))
	}
	if len(e.Pools) > 0 {
		fmt.Fprintln(w, "\nPools:")
		fmt.Fprintln(w, "  POOL\tFAMILY\tVERDICT\tBY\tFREE/TOTAL\tWHY")
		for _, v := range e.Pools {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s/%s\t%s\n", v.Pool, v.Family, v.Verdict, dash(v.By), count(v.Free), count(v.Total), verdictWhy(v))
		}
	}
	return w.Flush()
}

func explainHeading(e api.Explanation) string {
	var b strings.Builder
	if e.DryRun {
		b.WriteString("Dry run (nothing taken or written): ")
	}
	if e.Pod.Name != "" {
		fmt.Fprintf(&b, "pod %s/%s, ", e.Pod.Namespace, e.Pod.Name)
	}
	fmt.Fprintf(&b, "interface %s", e.Owner.IfName)
	if !e.DryRun {
		fmt.Fprintf(&b, " (container %s)", short(e.Owner.ContainerID))
	}
	fmt.Fprintf(&b, ", network %q", e.Network)
	if e.Service != "" {
		fmt.Fprintf(&b, ", %s", e.Service)
	}
	if !e.Time.IsZero() {
		fmt.Fprintf(&b, ", %s", e.Time.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// explainOutcome is the result line: the addresses with their blocks, or the error.
func explainOutcome(e api.Explanation) string {
	if e.Error != nil {
		verb := "Failed"
		if e.DryRun {
			verb = "Would fail"
		}
		return fmt.Sprintf("%s (%s): %s", verb, e.Error.Code, e.Error.Message)
	}
	verb := "Got"
	if e.DryRun {
		verb = "Would get"
	}
	if len(e.Addresses) == 0 {
		return verb + " no address"
	}
	parts := make([]string, len(e.Addresses))
	for i, a := range e.Addresses {
		s := fmt.Sprintf("%s from pool %q", a.Address, a.Pool)
		if a.Block != "" {
			s += " block " + a.Block
		}
		if a.Gateway != "" {
			s += " gateway " + a.Gateway
		}
		parts[i] = s
	}
	return verb + " " + strings.Join(parts, "; ")
}

func stepCode(p api.PolicyStep) string {
	switch {
	case p.Error != "":
		return "failed"
	case p.Fallback:
		return p.Code + " (fallback)"
	}
	return p.Code
}

func stepDetail(p api.PolicyStep) string {
	var parts []string
	if p.Error != "" {
		parts = append(parts, p.Error)
	}
	if p.Cause != "" {
		parts = append(parts, "cause "+p.Cause)
	}
	if p.Source != "" {
		parts = append(parts, "by "+p.Source)
	}
	if len(p.IPv4) > 0 {
		parts = append(parts, "ipv4 "+strings.Join(p.IPv4, ","))
	}
	if len(p.IPv6) > 0 {
		parts = append(parts, "ipv6 "+strings.Join(p.IPv6, ","))
	}
	if p.Reason != "" {
		parts = append(parts, p.Reason)
	}
	return strings.Join(parts, "; ")
}

func verdictWhy(v api.PoolVerdict) string {
	switch {
	case v.Cause != "" && v.Reason != "":
		return v.Cause + ": " + v.Reason
	case v.Reason != "":
		return v.Reason
	case v.Verdict == api.VerdictNotChosen:
		return "the policy named other pools (it gives no per-pool reason)"
	case v.Verdict == api.VerdictCandidate:
		return "named by the policy; an earlier candidate served, or none was tried"
	}
	return "-"
}

// short cuts a container ID to its first 12 characters, as container runtimes print it.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
