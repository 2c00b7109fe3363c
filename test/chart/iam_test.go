package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const ec2Pkg = "github.com/aws/aws-sdk-go-v2/service/ec2"

// TestIAMPolicyMatchesBackend type-checks the aws-eni backend (plugins/cloud/awseni and its
// commands) and collects every EC2 action it can call: any call of a function or method one
// of whose parameters is *ec2.<Action>Input (the EC2 client, the backend's EC2API interface,
// the SDK's paginators, and any wrapper of them). The actions of deploy/aws/iam-policy.json
// must be exactly those, plus ec2:CreateTags limited to tag-on-create for each action whose
// input gets TagSpecifications (IAM authorizes tags given at creation as CreateTags).
func TestIAMPolicyMatchesBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: compiles the aws-eni backend's dependencies for their export data")
	}
	root := repoRoot(t)
	calls, tagOnCreate := ec2Usage(t, root, "./plugins/cloud/awseni/...")
	if len(calls) < 5 {
		t.Fatalf("found only %v in the backend: the analysis is broken", calls)
	}
	want := map[string]bool{}
	for a := range calls {
		want["ec2:"+a] = true
	}
	if len(tagOnCreate) > 0 {
		want["ec2:CreateTags"] = true
	}

	pol := readPolicy(t, filepath.Join(root, "deploy", "aws", "iam-policy.json"))
	got := map[string]bool{}
	var tagCond []string
	for i, st := range pol.Statement {
		if st.Effect != "Allow" {
			t.Errorf("Statement[%d]: Effect %q: the policy only allows", i, st.Effect)
		}
		for _, a := range st.Action {
			if got[a] {
				t.Errorf("%s is allowed twice", a)
			}
			got[a] = true
			if a == "ec2:CreateTags" {
				tagCond = st.Condition["StringEquals"]["ec2:CreateAction"]
				if st.Resource.has("*") {
					t.Errorf("ec2:CreateTags on every resource: limit it to the resources created with tags")
				}
				continue
			}
			if !st.Resource.has("*") || len(st.Condition) > 0 {
				t.Errorf("%s: Resource %v Condition %v; the backend acts on instances, interfaces and subnets it discovers: use \"*\"", a, st.Resource, st.Condition)
			}
		}
	}
	for a := range want {
		if !got[a] {
			t.Errorf("the backend calls %s but deploy/aws/iam-policy.json does not allow it (%s)", a, calls[strings.TrimPrefix(a, "ec2:")])
		}
	}
	for a := range got {
		if !want[a] {
			t.Errorf("deploy/aws/iam-policy.json allows %s, which the backend never calls: remove it (least privilege)", a)
		}
	}
	var wantCond []string
	for a := range tagOnCreate {
		wantCond = append(wantCond, a)
	}
	sort.Strings(wantCond)
	sort.Strings(tagCond)
	if !slices.Equal(tagCond, wantCond) {
		t.Errorf("ec2:CreateTags must be allowed exactly for tag-on-create of %v (Condition StringEquals ec2:CreateAction), got %v", wantCond, tagCond)
	}
	t.Logf("EC2 actions of the aws-eni backend: %s; tag on create: %v", strings.Join(sortedKeys(calls), ", "), wantCond)
}

// ec2Usage type-checks the packages matching pattern and returns the EC2 actions they call
// (with where) and the actions whose input they set TagSpecifications on.
func ec2Usage(t *testing.T, root, pattern string) (calls map[string]string, tagOnCreate map[string]bool) {
	t.Helper()
	type pkgInfo struct {
		ImportPath string
		Dir        string
		GoFiles    []string
		Export     string
		DepOnly    bool
	}
	// Export data of every dependency, from the build cache (built if needed).
	cmd := exec.Command("go", "list", "-export", "-deps", "-json", pattern)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	var targets []pkgInfo
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			targets = append(targets, p)
		}
	}
	if len(targets) == 0 {
		t.Fatalf("no package matches %s", pattern)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	calls, tagOnCreate = map[string]string{}, map[string]bool{}
	for _, p := range targets {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-checking %s: %v", p.ImportPath, err)
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					sig, ok := info.Types[n.Fun].Type.(*types.Signature)
					if !ok {
						return true
					}
					for i := 0; i < sig.Params().Len(); i++ {
						if a := ec2Input(sig.Params().At(i).Type()); a != "" {
							if _, seen := calls[a]; !seen {
								calls[a] = fset.Position(n.Pos()).String()
							}
						}
					}
				case *ast.SelectorExpr:
					// x.TagSpecifications = ... on an ec2 input.
					if s := info.Selections[n]; s != nil && s.Kind() == types.FieldVal && n.Sel.Name == "TagSpecifications" {
						if a := ec2Input(s.Recv()); a != "" {
							tagOnCreate[a] = true
						}
					}
				case *ast.CompositeLit:
					// &ec2.XInput{TagSpecifications: ...}.
					tv := info.Types[n]
					a := ec2Input(tv.Type)
					if a == "" {
						return true
					}
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "TagSpecifications" {
								tagOnCreate[a] = true
							}
						}
					}
				}
				return true
			})
		}
	}
	return calls, tagOnCreate
}

// ec2Input returns X for the types ec2.XInput and *ec2.XInput, else "".
func ec2Input(typ types.Type) string {
	if p, ok := typ.(*types.Pointer); ok {
		typ = p.Elem()
	}
	n, ok := typ.(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != ec2Pkg {
		return ""
	}
	name := n.Obj().Name()
	if !strings.HasSuffix(name, "Input") || name == "Input" {
		return ""
	}
	return strings.TrimSuffix(name, "Input")
}

type iamPolicy struct {
	Version   string
	Statement []struct {
		Sid       string
		Effect    string
		Action    stringOrList
		Resource  stringOrList
		Condition map[string]map[string]stringOrList
	}
}

// stringOrList is IAM's "a string or a list of strings".
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*s = many
	return nil
}

func (s stringOrList) has(v string) bool { return slices.Contains(s, v) }

func readPolicy(t *testing.T, p string) iamPolicy {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var pol iamPolicy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pol); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	if pol.Version != "2012-10-17" || len(pol.Statement) == 0 {
		t.Fatalf("%s: Version %q with %d statements", p, pol.Version, len(pol.Statement))
	}
	return pol
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
