// Package funclen finds long functions: the project keeps every non-test function under
// core/ at most Max lines, so that each reads as one idea (decisions in pure functions,
// effects in thin steps).
package funclen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// Max is the longest a function may be, in lines from its func keyword to its closing
// brace.
const Max = 60

// Func is a function (or method) declaration and its length in lines.
type Func struct {
	File  string // slash-separated, relative to the directory walked
	Line  int
	Name  string // Recv.Name for a method
	Lines int
}

// Key names the function in an allow-list: file:Name.
func (f Func) Key() string { return f.File + ":" + f.Name }

func (f Func) String() string {
	return fmt.Sprintf("%s:%d: %s is %d lines (max %d)", f.File, f.Line, f.Name, f.Lines, Max)
}

// Longer returns the functions with a body of the non-test Go files under dir that are
// longer than max lines, by file and line. Generated files (a "Code generated ... DO NOT
// EDIT." comment, as go generate's convention says) are skipped: their generator decides.
func Longer(dir string, max int) ([]Func, error) {
	var out []Func
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("funclen: %w", err)
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			begin, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
			if n := end - begin + 1; n > max {
				out = append(out, Func{File: filepath.ToSlash(rel), Line: begin, Name: funcName(fd), Lines: n})
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Line < out[j].Line
	})
	return out, err
}

// funcName is Name, or Recv.Name for a method (the receiver's type without * and type
// parameters).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
