// Package archtest keeps docs/architecture.md true: its package map must
// name every package of the module, and every import of one of our
// packages must be allowed by the importer's row.
package archtest

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/specgate/specgate/"

// row is one line of the package map: pattern ("engine", or "tools/*" for
// every package under tools/) and the packages it may import (any: all).
type row struct {
	pattern string
	allow   map[string]bool
	any     bool
	line    int
}

func (r row) matches(pkg string) bool {
	if p, ok := strings.CutSuffix(r.pattern, "/*"); ok {
		return strings.HasPrefix(pkg, p+"/")
	}
	return pkg == r.pattern
}

var tick = regexp.MustCompile("`([^`]+)`")

// parseMap reads the "## Package map" table of the architecture page.
func parseMap(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []row
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(l, "## ") {
			in = l == "## Package map"
			continue
		}
		if !in || !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) != 3 {
			return nil, fmt.Errorf("%s:%d: want 3 cells (package | holds | may import), got %d", path, n, len(cells))
		}
		m := tick.FindStringSubmatch(cells[0])
		r := row{pattern: m[1], allow: map[string]bool{}, line: n}
		switch may := strings.TrimSpace(cells[2]); may {
		case "nothing of ours":
		case "anything of ours":
			r.any = true
		default:
			for _, a := range tick.FindAllStringSubmatch(may, -1) {
				r.allow[a[1]] = true
			}
			if len(r.allow) == 0 {
				return nil, fmt.Errorf("%s:%d: may-import cell %q names no package", path, n, may)
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no package map rows under \"## Package map\"", path)
	}
	return rows, sc.Err()
}

// importGraph maps every package directory of the module (relative path)
// to the packages of ours its non-test files import, whatever their build
// tags.
func importGraph(root string) (map[string]map[string]bool, error) {
	g := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		if g[rel] == nil {
			g[rel] = map[string]bool{}
		}
		if strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			if v, ok := strings.CutPrefix(strings.Trim(im.Path.Value, `"`), module); ok {
				g[rel][v] = true
			}
		}
		return nil
	})
	return g, err
}

// check lists every disagreement between the map and the graph.
func check(rows []row, g map[string]map[string]bool) []string {
	var bad []string
	used := make([]bool, len(rows))
	var pkgs []string
	for p := range g {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		ri := -1
		for i, r := range rows {
			if r.matches(p) && (ri < 0 || !strings.HasSuffix(r.pattern, "/*")) {
				ri = i
			}
		}
		if ri < 0 {
			bad = append(bad, fmt.Sprintf("package %s has no row in the package map", p))
			continue
		}
		used[ri] = true
		r := rows[ri]
		var imps []string
		for im := range g[p] {
			imps = append(imps, im)
		}
		sort.Strings(imps)
		for _, im := range imps {
			if !r.any && !r.allow[im] {
				bad = append(bad, fmt.Sprintf("%s imports %s, which its row (line %d) does not allow", p, im, r.line))
			}
		}
	}
	for i, r := range rows {
		if !used[i] {
			bad = append(bad, fmt.Sprintf("row %q (line %d) names no package of the module", r.pattern, r.line))
		}
		for a := range r.allow {
			if g[a] == nil {
				bad = append(bad, fmt.Sprintf("row %q (line %d) allows %s, which is not a package of the module", r.pattern, r.line, a))
			}
		}
	}
	return bad
}

// TestPackageMap checks docs/architecture.md against the module's imports.
func TestPackageMap(t *testing.T) {
	root := filepath.Join("..", "..")
	rows, err := parseMap(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := importGraph(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, leaf := range []string{"policy", "kernels", "safetensors", "tokenizer", "vecmath"} {
		if len(g[leaf]) != 0 {
			t.Errorf("leaf %s imports %v", leaf, g[leaf])
		}
	}
	for _, p := range []string{"cache", "cache/bert", "cache/redisstore", "cache/milvusstore", "cache/cachetest"} {
		if g[p]["engine"] {
			t.Errorf("%s imports engine (DESIGN.md: cache never imports engine)", p)
		}
	}
	for _, b := range check(rows, g) {
		t.Error(b)
	}
	t.Logf("%d packages, %d map rows", len(g), len(rows))
}

// TestCheckCatchesViolations: the checker reports an unlisted import, a
// package without a row and a row without a package.
func TestCheckCatchesViolations(t *testing.T) {
	rows := []row{
		{pattern: "a", allow: map[string]bool{}, line: 1},
		{pattern: "b", allow: map[string]bool{"a": true}, line: 2},
		{pattern: "gone", allow: map[string]bool{}, line: 3},
		{pattern: "tools/*", any: true, line: 4},
	}
	g := map[string]map[string]bool{
		"a": {"b": true}, "b": {"a": true}, "c": {}, "tools/x": {"a": true, "b": true},
	}
	got := strings.Join(check(rows, g), "\n")
	for _, want := range []string{"a imports b", "package c has no row", `row "gone" (line 3) names no package`} {
		if !strings.Contains(got, want) {
			t.Errorf("check missed %q; reported:\n%s", want, got)
		}
	}
	if strings.Contains(got, "tools/x") || strings.Contains(got, "b imports") {
		t.Errorf("check reported allowed imports:\n%s", got)
	}
}
