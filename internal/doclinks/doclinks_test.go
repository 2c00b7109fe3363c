// Package doclinks checks that the repository's Markdown documents point at things that
// exist: every relative link, and every repository path quoted in backticks, resolves to a
// file or directory of the repository. A rename that forgets a doc fails here.
package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// [text](target) and [text]: target; the target ends at whitespace or ')'.
	mdLink  = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)[^)]*\)|(?m)^\s*\[[^\]]+\]:\s*(\S+)`)
	codeRef = regexp.MustCompile("`([^`\\s]+)`")
	// goIdent is a final path element naming a Go identifier: core/eni.Config, sdk/cloud.CloudBackend.
	goIdent = regexp.MustCompile(`/([a-z0-9_]+)\.[A-Z][A-Za-z0-9_.]*(\(\))?$`)
	// topDirs are the repository's top-level folders: a backticked path starting with one
	// of them names a file of this repository (generated ones, under bin/, are not listed).
	topDirs = []string{"bpf/", "cmd/", "conf/", "core/", "deploy/", "hack/", "internal/", "mk/", "plugin-examples/", "plugins/", "sdk/", "test/"}
)

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "sdk")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("repository root (go.mod beside sdk/) not found")
		}
		dir = parent
	}
}

// markdownFiles lists the .md files of the repository, skipping hidden folders.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// linkTargets returns the relative link targets of a Markdown text (no URLs, no anchors
// within the page), without their #fragment.
func linkTargets(text string) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target := m[1] + m[2]
		if target == "" || strings.HasPrefix(target, "#") || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		out = append(out, target)
	}
	return out
}

// pathRefs returns the backticked repository paths of a Markdown text: those starting with a
// top-level folder, without wildcards, placeholders, a trailing ":line" or ".Identifier", and
// not generated output (bin/).
func pathRefs(text string) []string {
	var out []string
	for _, m := range codeRef.FindAllStringSubmatch(text, -1) {
		ref := m[1]
		if strings.ContainsAny(ref, "*<>{}$=") || strings.Contains(ref, "...") || strings.Contains(ref, "/bin/") {
			continue
		}
		for _, d := range topDirs {
			if strings.HasPrefix(ref, d) {
				ref, _, _ = strings.Cut(ref, ":")
				ref = goIdent.ReplaceAllString(strings.TrimSuffix(ref, "."), "/$1")
				out = append(out, ref)
				break
			}
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestMarkdownLinks: every relative link of every .md resolves from the document's folder,
// and every backticked repository path from the root or the document's folder.
func TestMarkdownLinks(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files under %s; the walk is wrong", len(files), root)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		text := string(b)
		for _, target := range linkTargets(text) {
			if !exists(filepath.Join(filepath.Dir(f), target)) {
				t.Errorf("%s: link %q: no such file", rel, target)
			}
		}
		for _, ref := range pathRefs(text) {
			if !exists(filepath.Join(root, ref)) && !exists(filepath.Join(filepath.Dir(f), ref)) {
				t.Errorf("%s: path `%s`: no such file or folder", rel, ref)
			}
		}
	}
}

func TestLinkParsing(t *testing.T) {
	text := "See [the ABI](sdk/ABI.md#memory), [Cilium](https://docs.cilium.io), [top](#top),\n" +
		"[ref]: ../README.md\nand `core/api/API.md`, `core/eni/*.go`, `plugins/<name>/`, `ipam.cilium.io/ip-pool`, `hack/x.sh:12`, `sdk/cloud.CloudBackend`, `plugins/builtin.Registry()`, `plugin-examples/bin/`."
	if got := strings.Join(linkTargets(text), " "); got != "sdk/ABI.md ../README.md" {
		t.Errorf("links %q", got)
	}
	if got := strings.Join(pathRefs(text), " "); got != "core/api/API.md hack/x.sh sdk/cloud plugins/builtin" {
		t.Errorf("paths %q", got)
	}
}

var (
	makeRule = regexp.MustCompile(`(?m)^([A-Za-z0-9_.%-]+(?:[ \t]+[A-Za-z0-9_.%-]+)*)[ \t]*:([^=]|$)`)
	// makeCmd is `make targets...` quoted in backticks or at the start of a line of a
	// code block (after an optional prompt or sudo).
	makeCmd = regexp.MustCompile("`make ([^`]+)`|(?m)^\\s*(?:\\$ |sudo )?make ([^\\n#;&|]+)")
)

// makeTargets lists the targets of the root Makefile and its mk/*.mk fragments.
func makeTargets(t *testing.T, root string) map[string]bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "mk", "*.mk"))
	files = append(files, filepath.Join(root, "Makefile"))
	targets := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range makeRule.FindAllStringSubmatch(string(b), -1) {
			for _, name := range strings.Fields(m[1]) {
				targets[name] = true
			}
		}
	}
	return targets
}

// TestMakeTargetsExist: every `make target` a document names is a target of the Makefile.
func TestMakeTargetsExist(t *testing.T) {
	root := repoRoot(t)
	targets := makeTargets(t, root)
	if !targets["lint"] || !targets["test"] {
		t.Fatalf("parsed targets %v: lint and test missing, the parser is wrong", targets)
	}
	for _, f := range markdownFiles(t, root) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		if strings.HasPrefix(rel, "plugin-examples"+string(filepath.Separator)) {
			continue // their own Makefile
		}
		for _, m := range makeCmd.FindAllStringSubmatch(string(b), -1) {
			args := strings.Fields(m[1] + m[2])
			if slices.Contains(args, "-C") {
				continue
			}
			for _, a := range args {
				if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
					continue
				}
				if !targets[a] {
					t.Errorf("%s: `make %s`: no target %q in Makefile or mk/*.mk", rel, strings.Join(args, " "), a)
				}
			}
		}
	}
}

func TestMakeCmdParsing(t *testing.T) {
	text := "Run `make lint test-unit`, then:\n\n```\nsudo make e2e GOTEST_FLAGS=-v\n```\nand `make -C plugin-examples all`."
	var got []string
	for _, m := range makeCmd.FindAllStringSubmatch(text, -1) {
		got = append(got, strings.TrimSpace(m[1]+m[2]))
	}
	if strings.Join(got, "|") != "lint test-unit|e2e GOTEST_FLAGS=-v|-C plugin-examples all" {
		t.Fatalf("make commands %q", got)
	}
}
