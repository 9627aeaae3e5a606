// Command gostructure prints structure measures of Go packages: files,
// lines, the largest file and the largest function (in lines, tests
// excluded) and the number of exported package-level names.
//
//	go run ./tools/gostructure ./gateway/ ./cmd/specgate/
//
// Packages are resolved with `go list -f '{{.Dir}} {{.GoFiles}}'`, so build
// tags and test files follow go list's defaults (test files are not
// counted).
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

type measure struct {
	pkg          string
	files, lines int
	bigFile      string
	bigFileLines int
	bigFunc      string
	bigFuncLines int
	exported     int
	funcsOver100 int
}

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"./..."}
	}
	out, err := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \",\"}}"}, args...)...).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gostructure: go list:", err)
		os.Exit(1)
	}
	fmt.Println("| package | files | lines | largest file (lines) | largest function (lines) | functions > 100 lines | exported names |")
	fmt.Println("|---|---:|---:|---|---|---:|---:|")
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "|", 3)
		if len(f) != 3 || f[2] == "" {
			continue
		}
		m, err := measurePkg(f[0], f[1], strings.Split(f[2], ","))
		if err != nil {
			fmt.Fprintln(os.Stderr, "gostructure:", err)
			os.Exit(1)
		}
		fmt.Printf("| %s | %d | %d | %s (%d) | %s (%d) | %d | %d |\n", m.pkg, m.files, m.lines, m.bigFile, m.bigFileLines,
			m.bigFunc, m.bigFuncLines, m.funcsOver100, m.exported)
	}
}

func measurePkg(pkg, dir string, files []string) (measure, error) {
	m := measure{pkg: pkg}
	fset := token.NewFileSet()
	for _, name := range files {
		path := filepath.Join(dir, name)
		src, err := os.ReadFile(path)
		if err != nil {
			return m, err
		}
		n := bytes.Count(src, []byte("\n")) // what wc -l counts
		m.files++
		m.lines += n
		if n > m.bigFileLines {
			m.bigFile, m.bigFileLines = name, n
		}
		af, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return m, err
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					m.exported++
				}
				if d.Body == nil {
					continue
				}
				l := fset.Position(d.End()).Line - fset.Position(d.Pos()).Line + 1
				if l > 100 {
					m.funcsOver100++
				}
				if l > m.bigFuncLines {
					fn := d.Name.Name
					if d.Recv != nil && len(d.Recv.List) == 1 {
						fn = recvName(d.Recv.List[0].Type) + "." + fn
					}
					m.bigFunc, m.bigFuncLines = fn, l
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							m.exported++
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								m.exported++
							}
						}
					}
				}
			}
		}
	}
	return m, nil
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
