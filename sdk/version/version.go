// Package version parses semantic versions and decides whether a host can speak to a plugin.
//
// The rule, for contract versions: same major, and the plugin's minor not newer than the
// host's. A newer plugin minor may rely on fields or calls the host does not have; an older
// one only lacks additions the host tolerates. Patch levels and pre-release or build suffixes
// never matter for compatibility.
package version

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrIncompatible is wrapped by every error of Compatible and Check.
var ErrIncompatible = errors.New("incompatible contract version")

// Version is a parsed semantic version (https://semver.org); a leading "v" is accepted.
type Version struct {
	Major, Minor, Patch uint64
	// Pre is the pre-release part without its "-", Build the build metadata without its "+".
	Pre, Build string
}

// String returns the canonical form, without a leading "v".
func (v Version) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	if v.Build != "" {
		s += "+" + v.Build
	}
	return s
}

// Parse parses "MAJOR.MINOR.PATCH[-pre][+build]", with an optional leading "v".
func Parse(s string) (Version, error) {
	in := s
	s = strings.TrimPrefix(s, "v")
	var v Version
	if i := strings.IndexByte(s, '+'); i >= 0 {
		v.Build, s = s[i+1:], s[:i]
		if !validIdents(v.Build, false) {
			return Version{}, fmt.Errorf("version %q: bad build metadata %q", in, v.Build)
		}
	}
	if i := strings.IndexByte(s, '-'); i >= 0 {
		v.Pre, s = s[i+1:], s[:i]
		if !validIdents(v.Pre, true) {
			return Version{}, fmt.Errorf("version %q: bad pre-release %q", in, v.Pre)
		}
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH", in)
	}
	nums := [3]*uint64{&v.Major, &v.Minor, &v.Patch}
	for i, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') || strings.TrimLeft(p, "0123456789") != "" {
			return Version{}, fmt.Errorf("version %q: bad %s %q", in, [3]string{"major", "minor", "patch"}[i], p)
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return Version{}, fmt.Errorf("version %q: bad %s %q", in, [3]string{"major", "minor", "patch"}[i], p)
		}
		*nums[i] = n
	}
	return v, nil
}

// validIdents checks dot-separated identifiers of [0-9A-Za-z-]; numeric pre-release
// identifiers must not have leading zeros.
func validIdents(s string, pre bool) bool {
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return false
		}
		numeric := true
		for _, r := range id {
			switch {
			case r >= '0' && r <= '9':
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '-':
				numeric = false
			default:
				return false
			}
		}
		if pre && numeric && len(id) > 1 && id[0] == '0' {
			return false
		}
	}
	return true
}

// Compatible reports whether a host speaking contract version host can use a plugin built
// against contract version plugin: same major, plugin minor <= host minor. The error wraps
// ErrIncompatible (or names the unparsable version) and names both versions.
func Compatible(host, plugin string) error {
	h, err := Parse(host)
	if err != nil {
		return fmt.Errorf("host contract: %w", err)
	}
	p, err := Parse(plugin)
	if err != nil {
		return fmt.Errorf("plugin contract: %w: %w", ErrIncompatible, err)
	}
	switch {
	case p.Major != h.Major:
		return fmt.Errorf("%w: plugin speaks %s, host speaks %s (major versions differ)", ErrIncompatible, p, h)
	case p.Minor > h.Minor:
		return fmt.Errorf("%w: plugin speaks %s, host speaks %s (plugin is newer)", ErrIncompatible, p, h)
	}
	return nil
}

// Check is Compatible with the plugin's name and kind in the message, the form hosts log:
//
//	plugin "x" speaks pool-policy contract 2.0.0, host speaks 1.0.0 (major versions differ)
func Check(name, kind, host, plugin string) error {
	if err := Compatible(host, plugin); err != nil {
		h, herr := Parse(host)
		p, perr := Parse(plugin)
		if herr != nil || perr != nil {
			return fmt.Errorf("plugin %q (%s contract): %w", name, kind, err)
		}
		why := "major versions differ"
		if p.Major == h.Major {
			why = "plugin is newer"
		}
		return fmt.Errorf("plugin %q speaks %s contract %s, host speaks %s (%s): %w", name, kind, p, h, why, ErrIncompatible)
	}
	return nil
}
