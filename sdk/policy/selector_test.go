package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestLabelSelectorMatches(t *testing.T) {
	labels := map[string]string{"zone": "a", "tier": "web", "empty": ""}
	tests := []struct {
		name string
		sel  *LabelSelector
		lbl  map[string]string
		want bool
	}{
		{"nil selector matches all", nil, labels, true},
		{"empty selector matches all", &LabelSelector{}, labels, true},
		{"empty selector matches nil labels", &LabelSelector{}, nil, true},
		{"matchLabels hit", &LabelSelector{MatchLabels: map[string]string{"zone": "a"}}, labels, true},
		{"matchLabels all must hold", &LabelSelector{MatchLabels: map[string]string{"zone": "a", "tier": "db"}}, labels, false},
		{"matchLabels missing key", &LabelSelector{MatchLabels: map[string]string{"rack": "1"}}, labels, false},
		{"matchLabels empty value present", &LabelSelector{MatchLabels: map[string]string{"empty": ""}}, labels, true},
		{"matchLabels empty value absent", &LabelSelector{MatchLabels: map[string]string{"rack": ""}}, labels, false},
		{"In hit", req("zone", OpIn, "b", "a"), labels, true},
		{"In miss", req("zone", OpIn, "b"), labels, false},
		{"In absent key", req("rack", OpIn, "1"), labels, false},
		{"In without values is invalid, fails closed", req("zone", OpIn), labels, false},
		{"NotIn other value", req("zone", OpNotIn, "b"), labels, true},
		{"NotIn same value", req("zone", OpNotIn, "a"), labels, false},
		{"NotIn absent key holds", req("rack", OpNotIn, "1"), labels, true},
		{"NotIn without values fails closed", req("rack", OpNotIn), labels, false},
		{"Exists present", req("tier", OpExists), labels, true},
		{"Exists present with empty value", req("empty", OpExists), labels, true},
		{"Exists absent", req("rack", OpExists), labels, false},
		{"Exists with values fails closed", req("tier", OpExists, "web"), labels, false},
		{"DoesNotExist absent", req("rack", OpDoesNotExist), labels, true},
		{"DoesNotExist present", req("tier", OpDoesNotExist), labels, false},
		{"unknown operator fails closed", req("tier", "in", "web"), labels, false},
		{"labels and expressions combined", &LabelSelector{
			MatchLabels:      map[string]string{"zone": "a"},
			MatchExpressions: []Requirement{{Key: "tier", Operator: OpIn, Values: []string{"web"}}, {Key: "gpu", Operator: OpDoesNotExist}},
		}, labels, true},
		{"nil labels with Exists", req("x", OpExists), nil, false},
		{"nil labels with DoesNotExist", req("x", OpDoesNotExist), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sel.Matches(tt.lbl); got != tt.want {
				t.Fatalf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func req(key, op string, values ...string) *LabelSelector {
	return &LabelSelector{MatchExpressions: []Requirement{{Key: key, Operator: op, Values: values}}}
}

func TestLabelSelectorValidate(t *testing.T) {
	tests := []struct {
		name    string
		sel     *LabelSelector
		wantErr string // substring; "" means valid
	}{
		{"nil", nil, ""},
		{"empty", &LabelSelector{}, ""},
		{"good", &LabelSelector{
			MatchLabels:      map[string]string{"node.kubernetes.io/instance-type": "m5.large", "rack": ""},
			MatchExpressions: []Requirement{{Key: "zone", Operator: OpIn, Values: []string{"a", "b"}}, {Key: "gpu", Operator: OpExists}},
		}, ""},
		{"empty key", &LabelSelector{MatchLabels: map[string]string{"": "x"}}, `matchLabels: key ""`},
		{"bad key chars", &LabelSelector{MatchLabels: map[string]string{"a b": "x"}}, `matchLabels: key "a b"`},
		{"bad prefix", &LabelSelector{MatchLabels: map[string]string{"Bad_Prefix/x": "y"}}, `prefix "Bad_Prefix"`},
		{"empty name after prefix", &LabelSelector{MatchLabels: map[string]string{"example.com/": "y"}}, "name part must not be empty"},
		{"long name", &LabelSelector{MatchLabels: map[string]string{strings.Repeat("a", 64): "y"}}, "longer than 63"},
		{"bad value", &LabelSelector{MatchLabels: map[string]string{"k": "-x"}}, `matchLabels["k"]`},
		{"first error is deterministic", &LabelSelector{MatchLabels: map[string]string{"b b": "", "a a": ""}}, `key "a a"`},
		{"In without values", req("zone", OpIn), "matchExpressions[0].values: must be non-empty for operator In"},
		{"NotIn without values", req("zone", OpNotIn), "matchExpressions[0].values: must be non-empty for operator NotIn"},
		{"Exists with values", req("zone", OpExists, "a"), "matchExpressions[0].values: must be empty for operator Exists"},
		{"DoesNotExist with values", req("zone", OpDoesNotExist, "a"), "matchExpressions[0].values: must be empty for operator DoesNotExist"},
		{"unknown operator", req("zone", "Gt", "1"), `matchExpressions[0].operator: "Gt" is not one of`},
		{"bad expression key", req("", OpExists), "matchExpressions[0].key"},
		{"bad expression value", req("zone", OpIn, "a", "b c"), "matchExpressions[0].values[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.sel.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want error containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidSelector) {
				t.Fatalf("error %v does not wrap ErrInvalidSelector", err)
			}
		})
	}
}

func TestLabelSelectorString(t *testing.T) {
	s := &LabelSelector{
		MatchLabels: map[string]string{"zone": "a", "rack": "r1"},
		MatchExpressions: []Requirement{
			{Key: "tier", Operator: OpIn, Values: []string{"web", "api"}},
			{Key: "gpu", Operator: OpDoesNotExist},
			{Key: "arch", Operator: OpNotIn, Values: []string{"arm"}},
			{Key: "ssd", Operator: OpExists},
		},
	}
	want := "!gpu,arch notin (arm),rack=r1,ssd,tier in (api,web),zone=a"
	if got := s.String(); got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	// Rendering must not reorder the caller's values.
	if s.MatchExpressions[0].Values[0] != "web" {
		t.Fatal("String mutated Values")
	}
	var nilSel *LabelSelector
	if nilSel.String() != "" || !nilSel.Empty() {
		t.Fatal("nil selector should render empty and be Empty")
	}
}

func FuzzLabelSelectorMatches(f *testing.F) {
	f.Add("zone", "In", "a", "zone", "a")
	f.Add("zone", "NotIn", "a", "rack", "x")
	f.Add("gpu", "Exists", "", "gpu", "")
	f.Add("gpu", "DoesNotExist", "", "zone", "a")
	f.Fuzz(func(t *testing.T, key, op, val, lk, lv string) {
		var vals []string
		if val != "" {
			vals = []string{val}
		}
		s := &LabelSelector{MatchExpressions: []Requirement{{Key: key, Operator: op, Values: vals}}}
		labels := map[string]string{lk: lv}
		got := s.Matches(labels)
		// A valid selector must agree with the direct reading of the operator.
		if s.Validate() == nil {
			v, ok := labels[key]
			var want bool
			switch op {
			case OpIn:
				want = ok && v == val
			case OpNotIn:
				want = !ok || v != val
			case OpExists:
				want = ok
			case OpDoesNotExist:
				want = !ok
			}
			if got != want {
				t.Fatalf("Matches(%v) on %+v = %v, want %v", labels, s, got, want)
			}
		}
		_ = s.String()
	})
}
