package policy

import (
	"fmt"
	"path"
)

// Valid reports whether f is IPv4 or IPv6.
func (f Family) Valid() bool { return f == IPv4 || f == IPv6 }

// Label is the family as operators write it: "IPv4" or "IPv6".
func (f Family) Label() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("family(%q)", string(f))
}

// IsPoolNamePattern reports whether a pool name written by a user is a glob pattern
// (Spiderpool's wildcard pool names): it contains '*' or '?', or both '[' and ']'.
// Pool names are Kubernetes object names, which never contain these characters, so a
// pattern can never be confused with a real name.
func IsPoolNamePattern(s string) bool {
	// A plain byte loop: this runs for every name of every decision.
	open, closed := false, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?':
			return true
		case '[':
			open = true
		case ']':
			closed = true
		}
	}
	return open && closed
}

// ValidatePoolNamePattern checks that pattern is a well-formed glob: '*' any run of
// characters, '?' one character, '[abc]', '[a-z]' and '[^a-z]' classes, '\' escapes.
func ValidatePoolNamePattern(pattern string) error {
	// path.Match checks the whole pattern for syntax errors before reporting a mismatch.
	if _, err := path.Match(pattern, ""); err != nil {
		return fmt.Errorf("malformed pool name pattern %q: %w", pattern, err)
	}
	return nil
}

// MatchPoolName reports whether name matches pattern. A name that is not a pattern
// (IsPoolNamePattern false) matches only itself; a pattern uses path.Match glob syntax.
// The error is non-nil only for a malformed pattern.
func MatchPoolName(pattern, name string) (bool, error) {
	if !IsPoolNamePattern(pattern) {
		return pattern == name, nil
	}
	ok, err := path.Match(pattern, name)
	if err != nil {
		return false, fmt.Errorf("malformed pool name pattern %q: %w", pattern, err)
	}
	return ok, nil
}

// LookupPool returns the view of the pool called name with family fam, or nil. A pool
// that has both families (a Cilium CiliumPodIPPool with ipv4 and ipv6) appears as two
// views with the same name, one per family.
//
// The names' lengths and last bytes are compared first, then the families' last bytes, and
// only then whole strings: pool names often share long prefixes ("pool-v4-07"), and a WASM
// guest compares two strings of equal length (a Family is a string too) through two runtime
// calls of tens of nanoseconds each, so most misses cost no call at all.
func LookupPool(pools []PoolView, name string, fam Family) *PoolView {
	if name == "" {
		return nil
	}
	last := name[len(name)-1]
	for i := range pools {
		p := &pools[i]
		if len(p.Name) == len(name) && p.Name[len(name)-1] == last && sameFamily(p.Family, fam) && p.Name == name {
			return p
		}
	}
	return nil
}

// sameFamily is a == b, deciding by length and last byte where it can (IPv4 and IPv6 differ
// in the last).
func sameFamily(a, b Family) bool {
	return len(a) == len(b) && (len(a) == 0 || a[len(a)-1] == b[len(b)-1]) && a == b
}

// PoolExists reports whether any view (of any family) is called name.
func PoolExists(pools []PoolView, name string) bool {
	for i := range pools {
		if pools[i].Name == name {
			return true
		}
	}
	return false
}

// Candidates returns one candidate per pool name, in order.
func Candidates(names ...string) []Candidate {
	if len(names) == 0 {
		return nil
	}
	out := make([]Candidate, len(names))
	for i, n := range names {
		out[i] = Candidate{Pool: n}
	}
	return out
}
