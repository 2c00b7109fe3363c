package policychain

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/allot-ipam/allot/sdk/policy"
)

// maxTextLen bounds Reason and Source: they end up in logs and events, and a plugin must not
// be able to flood them.
const maxTextLen = 2048

// ValidatePodDecision checks a pod decision against its request, as every policy's output is
// untrusted: a known code; Skip and NoFit carry no candidate; NoFit says why; Decided names
// at least one candidate, each an existing pool of the list's family, none twice. Reason and
// Source are cut to a bounded length and made valid UTF-8. Errors wrap ErrInvalidDecision and
// name the field.
func ValidatePodDecision(d *policy.PodDecision, req *policy.PodRequest) error {
	if err := checkCode(d.Code, d.Cause, d.Reason); err != nil {
		return err
	}
	d.Reason, d.Source = clean(d.Reason), clean(d.Source)
	d.Rejected = cleanRejected(d.Rejected, len(req.Pools))
	n := len(d.IPv4) + len(d.IPv6)
	if d.Code != policy.Decided {
		if n > 0 {
			return fmt.Errorf("%w: ipv4/ipv6: code %v must carry no candidates, got %d", ErrInvalidDecision, d.Code, n)
		}
		return nil
	}
	if n == 0 {
		return fmt.Errorf("%w: ipv4/ipv6: code Decided needs at least one candidate", ErrInvalidDecision)
	}
	if err := checkCandidates("ipv4", d.IPv4, policy.IPv4, req.Pools); err != nil {
		return err
	}
	return checkCandidates("ipv6", d.IPv6, policy.IPv6, req.Pools)
}

func checkCandidates(field string, cs []policy.Candidate, fam policy.Family, pools []policy.PoolView) error {
	for i, c := range cs {
		if c.Pool == "" {
			return fmt.Errorf("%w: %s[%d].pool: must not be empty", ErrInvalidDecision, field, i)
		}
		if policy.LookupPool(pools, c.Pool, fam) == nil {
			if policy.PoolExists(pools, c.Pool) {
				return fmt.Errorf("%w: %s[%d].pool: %q is not an %s pool", ErrInvalidDecision, field, i, c.Pool, fam.Label())
			}
			return fmt.Errorf("%w: %s[%d].pool: %q is not a pool of this request", ErrInvalidDecision, field, i, c.Pool)
		}
		for j := range i {
			if cs[j].Pool == c.Pool {
				return fmt.Errorf("%w: %s[%d].pool: %q is listed twice", ErrInvalidDecision, field, i, c.Pool)
			}
		}
	}
	return nil
}

// ValidateNodeDecision checks a node decision against its request: a known code; Skip and
// NoFit carry no config; NoFit says why; Decided names at least one config of the request,
// none twice.
func ValidateNodeDecision(d *policy.NodeDecision, req *policy.NodeRequest) error {
	if err := checkCode(d.Code, d.Cause, d.Reason); err != nil {
		return err
	}
	d.Reason = clean(d.Reason)
	if d.Code != policy.Decided {
		if len(d.Configs) > 0 {
			return fmt.Errorf("%w: configs: code %v must carry no configs, got %d", ErrInvalidDecision, d.Code, len(d.Configs))
		}
		return nil
	}
	if len(d.Configs) == 0 {
		return fmt.Errorf("%w: configs: code Decided needs at least one config", ErrInvalidDecision)
	}
	for i, name := range d.Configs {
		found := false
		for j := range req.Configs {
			if req.Configs[j].Name == name {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%w: configs[%d]: %q is not a CIDR config of this request", ErrInvalidDecision, i, name)
		}
		for j := range i {
			if d.Configs[j] == name {
				return fmt.Errorf("%w: configs[%d]: %q is listed twice", ErrInvalidDecision, i, name)
			}
		}
	}
	return nil
}

func checkCode(c policy.Code, cause policy.Cause, reason string) error {
	if cause < policy.CauseUnspecified || cause > policy.MaxCause {
		return fmt.Errorf("%w: cause: %v is not a cause of this contract", ErrInvalidDecision, cause)
	}
	switch c {
	case policy.Decided, policy.Skip:
		return nil
	case policy.NoFit:
		if strings.TrimSpace(reason) == "" {
			return fmt.Errorf("%w: reason: code NoFit needs a reason", ErrInvalidDecision)
		}
		return nil
	}
	return fmt.Errorf("%w: code: %v is not Decided, Skip or NoFit", ErrInvalidDecision, c)
}

func clean(s string) string {
	if len(s) <= maxTextLen && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxTextLen {
		cut := maxTextLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// cleanRejected bounds a decision's per-pool detail, which people read and nothing acts on:
// at most two entries per pool (one per family), texts cleaned, causes out of range dropped.
func cleanRejected(rs []policy.Rejection, pools int) []policy.Rejection {
	if len(rs) > 2*pools {
		rs = rs[:2*pools]
	}
	for i := range rs {
		rs[i].Pool, rs[i].Reason = clean(rs[i].Pool), clean(rs[i].Reason)
		if rs[i].Cause < 0 || rs[i].Cause > policy.MaxCause {
			rs[i].Cause = policy.CauseUnspecified
		}
	}
	return rs
}
