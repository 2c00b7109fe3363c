package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Label selector operators, spelled as Kubernetes spells them (case-sensitive).
const (
	OpIn           = "In"
	OpNotIn        = "NotIn"
	OpExists       = "Exists"
	OpDoesNotExist = "DoesNotExist"
)

// ErrInvalidSelector is wrapped by every error Validate returns.
var ErrInvalidSelector = errors.New("invalid label selector")

// Matches reports whether labels satisfy the selector, with Kubernetes semantics: every
// MatchLabels entry and every MatchExpressions requirement must hold. A nil or empty
// selector matches everything (including a nil label set).
//
// A structurally invalid requirement (unknown operator, In/NotIn without values,
// Exists/DoesNotExist with values) matches nothing, so a broken selector fails closed;
// Validate says what is wrong with it. Matches does not check label syntax: that is
// Validate's job and would cost every decision.
func (s *LabelSelector) Matches(labels map[string]string) bool {
	if s == nil {
		return true
	}
	for k, v := range s.MatchLabels {
		lv, ok := labels[k]
		if !ok || lv != v {
			return false
		}
	}
	for i := range s.MatchExpressions {
		if !s.MatchExpressions[i].Matches(labels) {
			return false
		}
	}
	return true
}

// Empty reports whether the selector has no requirement (and so matches everything).
func (s *LabelSelector) Empty() bool {
	return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
}

// Matches reports whether labels satisfy this one requirement (see LabelSelector.Matches).
func (r *Requirement) Matches(labels map[string]string) bool {
	v, ok := labels[r.Key]
	switch r.Operator {
	case OpIn:
		return ok && len(r.Values) > 0 && slices.Contains(r.Values, v)
	case OpNotIn:
		// Kubernetes: NotIn holds when the label is absent, or present with another value.
		return len(r.Values) > 0 && (!ok || !slices.Contains(r.Values, v))
	case OpExists:
		return ok && len(r.Values) == 0
	case OpDoesNotExist:
		return !ok && len(r.Values) == 0
	}
	return false
}

// Validate checks the selector as the Kubernetes API server would: label keys are qualified
// names, label values are valid label values, operators are known, In/NotIn carry values
// and Exists/DoesNotExist carry none. The error names the offending field, e.g.
// `matchExpressions[1].values: must be non-empty for operator In`. A nil selector is valid.
func (s *LabelSelector) Validate() error {
	if s == nil {
		return nil
	}
	// Report the failing entry with the smallest key, so the error does not depend on map
	// order; the happy path allocates nothing.
	var badKey string
	var badErr error
	for k, v := range s.MatchLabels {
		var err error
		if kerr := ValidateLabelKey(k); kerr != nil {
			err = fmt.Errorf("%w: matchLabels: key %q: %v", ErrInvalidSelector, k, kerr)
		} else if verr := ValidateLabelValue(v); verr != nil {
			err = fmt.Errorf("%w: matchLabels[%q]: %v", ErrInvalidSelector, k, verr)
		}
		if err != nil && (badErr == nil || k < badKey) {
			badKey, badErr = k, err
		}
	}
	if badErr != nil {
		return badErr
	}
	for i := range s.MatchExpressions {
		if err := s.MatchExpressions[i].validate(); err != nil {
			return fmt.Errorf("%w: matchExpressions[%d].%v", ErrInvalidSelector, i, err)
		}
	}
	return nil
}

func (r *Requirement) validate() error {
	if err := ValidateLabelKey(r.Key); err != nil {
		return fmt.Errorf("key: %q: %v", r.Key, err)
	}
	switch r.Operator {
	case OpIn, OpNotIn:
		if len(r.Values) == 0 {
			return fmt.Errorf("values: must be non-empty for operator %s", r.Operator)
		}
	case OpExists, OpDoesNotExist:
		if len(r.Values) != 0 {
			return fmt.Errorf("values: must be empty for operator %s", r.Operator)
		}
	default:
		return fmt.Errorf("operator: %q is not one of In, NotIn, Exists, DoesNotExist", r.Operator)
	}
	for j, v := range r.Values {
		if err := ValidateLabelValue(v); err != nil {
			return fmt.Errorf("values[%d]: %v", j, err)
		}
	}
	return nil
}

// RequirementStrings renders each requirement of the selector in Kubernetes selector syntax
// (`key=value`, `key in (a,b)`, `key notin (a,b)`, `key`, `!key`; values sorted), sorted
// ascending. It is the canonical form used to compare selectors deterministically.
func (s *LabelSelector) RequirementStrings() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.MatchLabels)+len(s.MatchExpressions))
	for k, v := range s.MatchLabels {
		out = append(out, k+"="+v)
	}
	for i := range s.MatchExpressions {
		out = append(out, s.MatchExpressions[i].String())
	}
	slices.Sort(out)
	return out
}

// String renders the selector in Kubernetes selector syntax, requirements sorted; "" when empty.
func (s *LabelSelector) String() string {
	return strings.Join(s.RequirementStrings(), ",")
}

// String renders the requirement in Kubernetes selector syntax, values sorted.
func (r *Requirement) String() string {
	vals := func() string {
		v := slices.Clone(r.Values)
		slices.Sort(v)
		return "(" + strings.Join(v, ",") + ")"
	}
	switch r.Operator {
	case OpIn:
		return r.Key + " in " + vals()
	case OpNotIn:
		return r.Key + " notin " + vals()
	case OpExists:
		return r.Key
	case OpDoesNotExist:
		return "!" + r.Key
	}
	return r.Key + " " + r.Operator + " " + vals()
}

// ValidateLabelKey checks a Kubernetes label (or annotation) key: an optional DNS subdomain
// prefix of at most 253 characters and a slash, then a name of 1 to 63 characters
// beginning and ending with an alphanumeric, with '-', '_' and '.' inside.
func ValidateLabelKey(key string) error {
	if key == "" {
		return errors.New("must not be empty")
	}
	name := key
	if i := strings.IndexByte(key, '/'); i >= 0 {
		prefix := key[:i]
		name = key[i+1:]
		if err := validateDNSSubdomain(prefix); err != nil {
			return fmt.Errorf("prefix %q: %v", prefix, err)
		}
	}
	if name == "" {
		return errors.New("name part must not be empty")
	}
	if len(name) > 63 {
		return fmt.Errorf("name part %q is longer than 63 characters", name)
	}
	if !isLabelToken(name) {
		return fmt.Errorf("name part %q must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric", name)
	}
	return nil
}

// ValidateLabelValue checks a Kubernetes label value: empty, or at most 63 characters
// beginning and ending with an alphanumeric, with '-', '_' and '.' inside.
func ValidateLabelValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 63 {
		return fmt.Errorf("value %q is longer than 63 characters", v)
	}
	if !isLabelToken(v) {
		return fmt.Errorf("value %q must consist of alphanumerics, '-', '_' or '.', and begin and end with an alphanumeric", v)
	}
	return nil
}

func isAlnum(c byte) bool {
	return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

func isLabelToken(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func validateDNSSubdomain(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if len(s) > 253 {
		return errors.New("is longer than 253 characters")
	}
	lc := func(c byte) bool { return ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') }
	for rest := s; ; {
		part, tail, more := strings.Cut(rest, ".")
		if part == "" || len(part) > 63 {
			return errors.New("must be dot-separated labels of 1 to 63 characters")
		}
		if !lc(part[0]) || !lc(part[len(part)-1]) {
			return errors.New("labels must begin and end with a lower-case alphanumeric")
		}
		for i := 1; i < len(part)-1; i++ {
			if c := part[i]; !lc(c) && c != '-' {
				return errors.New("labels must consist of lower-case alphanumerics and '-'")
			}
		}
		if !more {
			break
		}
		rest = tail
	}
	return nil
}
