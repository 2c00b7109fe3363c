// Package archtest checks the dependency rules of ARCHITECTURE.md ("Dependency rules") with
// the go command's own view of a module (go list): which package may import which. It looks
// at non-test builds only; test files may use whatever they need.
package archtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
)

// Rule forbids the packages under From to depend on packages under any of Deny, except
// those under Allow. Paths are relative to the root given to Check ("core/", "plugins/").
// A prefix matches the path itself and everything below it.
type Rule struct {
	Name string
	From string
	Deny []string
	// Allow lists exceptions to Deny, each "importer=>imported" or just "imported".
	Allow []string
	// Direct checks only the packages a package imports itself; otherwise every package in
	// its dependency closure counts (a forbidden dependency through a third package is
	// still one).
	Direct bool
}

// pkg is the part of go list's JSON a rule needs.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// Check lists every package of the module in dir (go list ./..., non-test builds) and
// returns one line per broken rule and offending edge, sorted. root is the import path
// prefix rule paths are relative to, e.g. "github.com/allot-ipam/allot/".
func Check(ctx context.Context, dir, root string, rules []Rule) ([]string, error) {
	pkgs, err := list(ctx, dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rules {
		for _, p := range pkgs {
			out = append(out, r.violations(root, p)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (r Rule) violations(root string, p pkg) []string {
	from, ok := strings.CutPrefix(p.ImportPath, root)
	if !ok || !under(from, r.From) {
		return nil
	}
	deps := p.Deps
	if r.Direct {
		deps = p.Imports
	}
	var out []string
	for _, d := range deps {
		to, ok := strings.CutPrefix(d, root)
		if !ok || !r.denies(from, to) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s imports %s", r.Name, from, to))
	}
	return out
}

func (r Rule) denies(from, to string) bool {
	denied := false
	for _, d := range r.Deny {
		denied = denied || under(to, d)
	}
	if !denied {
		return false
	}
	for _, a := range r.Allow {
		if imp, exp, ok := strings.Cut(a, "=>"); ok {
			if under(from, imp) && under(to, exp) {
				return false
			}
		} else if under(to, a) {
			return false
		}
	}
	return true
}

// under reports whether path is prefix or lies below it ("core/" covers "core/daemon";
// "bpf" covers "bpf" and "bpf/x").
func under(path, prefix string) bool {
	if prefix == "" {
		return true
	}
	p := strings.TrimSuffix(prefix, "/")
	return path == p || strings.HasPrefix(path, p+"/")
}

func list(ctx context.Context, dir string) ([]pkg, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-e", "-json=ImportPath,Imports,Deps,Error", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w: %s", dir, err, stderr.String())
	}
	var out []pkg
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p struct {
			pkg
			Error *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list in %s: %w", dir, err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("go list in %s: package %s: %s", dir, p.ImportPath, p.Error.Err)
		}
		out = append(out, p.pkg)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("go list in %s: no packages", dir)
	}
	return out, nil
}
