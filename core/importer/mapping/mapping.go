// Package mapping is what the peer importers (cilium, spiderpool, clustercidr) share: the
// result of an import, warnings and errors that name the peer object and field, the strict
// decoding of a peer object into its Go shape, and the check that reports every field of a
// peer object no importer maps, so that nothing is dropped silently.
package mapping

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Result is what an importer makes of peer objects: allot objects (typed, from
// core/k8s/apis/allot/v1alpha1) and warnings about what it could not carry over.
type Result struct {
	Objects  []client.Object
	Warnings []Warning
}

// Add appends o's objects and warnings to r.
func (r *Result) Add(o Result) {
	r.Objects = append(r.Objects, o.Objects...)
	r.Warnings = append(r.Warnings, o.Warnings...)
}

// Warning is something of a peer object the import could not map (or mapped with a caveat).
type Warning struct {
	// Kind, Namespace and Name are the peer object's.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Field is the path of the field inside the object (spec.ipv4.cidrs[0]); empty for the
	// object as a whole.
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (w Warning) String() string {
	return objectRef(w.Kind, w.Namespace, w.Name) + fieldRef(w.Field) + w.Message
}

// FieldError is invalid peer input: the object and the field it is about.
type FieldError struct {
	Kind, Namespace, Name, Field, Message string
}

func (e *FieldError) Error() string {
	return objectRef(e.Kind, e.Namespace, e.Name) + fieldRef(e.Field) + e.Message
}

func objectRef(kind, ns, name string) string {
	if ns != "" {
		name = ns + "/" + name
	}
	return kind + " " + name + ": "
}

func fieldRef(f string) string {
	if f == "" {
		return ""
	}
	return f + ": "
}

// Object names one peer object in warnings and errors, which it appends to a Result.
type Object struct {
	Kind, Namespace, Name string
	res                   *Result
}

// On returns the reporter of u's warnings into r.
func (r *Result) On(u *unstructured.Unstructured) Object {
	return Object{Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName(), res: r}
}

// Warn records a warning about field.
func (o Object) Warn(field, format string, args ...any) {
	o.res.Warnings = append(o.res.Warnings, Warning{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
		Field: field, Message: fmt.Sprintf(format, args...)})
}

// Errorf returns a FieldError about field.
func (o Object) Errorf(field, format string, args ...any) error {
	return &FieldError{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Decode converts u into out, a pointer to a struct of the peer's JSON shape. A value of
// the wrong type is an error naming its field.
func (o Object) Decode(u *unstructured.Unstructured, out any) error {
	if o.Name == "" {
		return o.Errorf("metadata.name", "must not be empty")
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return o.Errorf("", "%v", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return o.Errorf(te.Field, "a %s cannot be a %s", te.Value, te.Type)
		}
		return o.Errorf("", "%v", err)
	}
	return nil
}

// Fields is the tree of the fields of a peer object an importer reads. A nil subtree reads
// the field whole (a map of addresses, a label selector).
type Fields map[string]Fields

// Unmapped warns about every field under u's top-level field root (spec, status) that is
// not in known: a field of a newer peer version, or one allot has no equivalent of.
func (o Object) Unmapped(u *unstructured.Unstructured, root string, known Fields) {
	v, ok := u.Object[root]
	if !ok {
		return
	}
	o.unmapped(root, v, known)
}

func (o Object) unmapped(path string, v any, known Fields) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			sub, ok := known[k]
			switch {
			case !ok:
				o.Warn(path+"."+k, "allot has no equivalent of this field; not imported")
			case sub != nil:
				o.unmapped(path+"."+k, t[k], sub)
			}
		}
	case []any:
		for i, e := range t {
			o.unmapped(fmt.Sprintf("%s[%d]", path, i), e, known)
		}
	}
}

// Prefix parses a CIDR of field and returns it canonical; host bits set are an error (the
// peer would have refused it too, and guessing the network could widen a block).
func (o Object) Prefix(field, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return netip.Prefix{}, o.Errorf(field, "%q is not a CIDR", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, o.Errorf(field, "%s has host bits set; the network is %s", s, p.Masked())
	}
	return p, nil
}

// Addr parses an address of field; a CIDR form ("10.0.0.5/24", as some peers record pod
// addresses) yields its address.
func (o Object) Addr(field, s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, o.Errorf(field, "%q is not an IP address", s)
	}
	return a.Unmap(), nil
}

// Family is "ipv4" or "ipv6", as allot's fields name them.
func Family(a netip.Addr) string {
	if a.Is4() {
		return "ipv4"
	}
	return "ipv6"
}

// Bits is the address length of a family.
func Bits(is4 bool) int {
	if is4 {
		return 32
	}
	return 128
}
