// Command structure prints structure measures of the module, so that
// anyone can rerun them before and after a restructure:
//
//	go run ./tools/structure            # from the repository root
//
// Per package (go list ./..., non-test Go files of the default build plus
// every build-tagged file in the package directory): files, lines, exported
// top-level names (funcs, types, vars, consts) and exported methods. Then the
// largest files and the largest functions by lines (func keyword to closing
// brace), test files excluded, generated files (// Code generated) excluded.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

type pkg struct {
	path, dir           string
	files, lines        int
	exported, exMethods int
}

type item struct {
	name  string
	lines int
}

func main() {
	top := flag.Int("top", 5, "largest files and functions to list")
	flag.Parse()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}}", "./...").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go list:", err)
		os.Exit(1)
	}
	root, _ := os.Getwd()
	var pkgs []*pkg
	var files, funcs []item
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		p := &pkg{path: strings.TrimPrefix(f[0], "github.com/specgate/specgate"), dir: f[1]}
		if p.path == "" {
			p.path = "/"
		}
		p.path = "." + p.path
		names, _ := filepath.Glob(filepath.Join(p.dir, "*.go"))
		fset := token.NewFileSet()
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				continue
			}
			af, err := parser.ParseFile(fset, name, src, parser.ParseComments)
			if err != nil || ast.IsGenerated(af) {
				continue
			}
			rel, _ := filepath.Rel(root, name)
			n := bytes.Count(src, []byte("\n"))
			p.files++
			p.lines += n
			files = append(files, item{rel, n})
			for _, d := range af.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					l := fset.Position(d.End()).Line - fset.Position(d.Pos()).Line + 1
					fn := d.Name.Name
					if d.Recv != nil && len(d.Recv.List) > 0 {
						fn = recvName(d.Recv.List[0].Type) + "." + fn
					}
					funcs = append(funcs, item{fmt.Sprintf("%s:%d %s", rel, fset.Position(d.Pos()).Line, fn), l})
					if d.Name.IsExported() {
						if d.Recv == nil {
							p.exported++
						} else if ast.IsExported(recvName(d.Recv.List[0].Type)) {
							p.exMethods++
						}
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								p.exported++
							}
						case *ast.ValueSpec:
							for _, id := range s.Names {
								if id.IsExported() {
									p.exported++
								}
							}
						}
					}
				}
			}
		}
		total += p.lines
		pkgs = append(pkgs, p)
	}
	fmt.Printf("%-34s %5s %7s %6s %8s %8s\n", "package", "files", "lines", "share", "exported", "methods")
	for _, p := range pkgs {
		fmt.Printf("%-34s %5d %7d %5.1f%% %8d %8d\n", p.path, p.files, p.lines, 100*float64(p.lines)/float64(total), p.exported, p.exMethods)
	}
	fmt.Printf("%-34s %5s %7d\n", "total (non-test, non-generated)", "", total)
	show := func(title string, it []item) {
		sort.SliceStable(it, func(i, j int) bool { return it[i].lines > it[j].lines })
		fmt.Println(title)
		for i := 0; i < *top && i < len(it); i++ {
			fmt.Printf("  %6d  %s\n", it[i].lines, it[i].name)
		}
	}
	show("largest files (lines):", files)
	show("largest functions (lines):", funcs)
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
