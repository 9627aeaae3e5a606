package gateway

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// configLines maps every key path of a YAML document ("server.addr",
// "models[0].path", "models[0]") to its 1-based line, and every line to
// the deepest key path written on it.
type configLines struct {
	line   map[string]int
	byLine map[int]string
}

func parseConfigLines(data []byte) *configLines {
	cl := &configLines{line: map[string]int{}, byLine: map[int]string{}}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return cl
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				cl.set(p, k.Line)
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, v := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				cl.set(p, v.Line)
				walk(v, p)
			}
		}
	}
	walk(doc.Content[0], "")
	return cl
}

func (cl *configLines) set(path string, line int) {
	cl.line[path] = line
	if prev, ok := cl.byLine[line]; !ok || len(path) > len(prev) {
		cl.byLine[line] = path
	}
}

var (
	keyPathRE  = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_-]*(?:\[\d+\])?(?:\.[A-Za-z0-9_-]+(?:\[\d+\])?)*`)
	yamlLineRE = regexp.MustCompile(`line (\d+): `)
)

// keyIn returns the longest key path of the document named in msg, with
// its line; the cache pipeline's own keys ("default.threshold") are tried
// under "cache." too.
func (cl *configLines) keyIn(msg string) (string, int) {
	best, line := "", 0
	for _, m := range keyPathRE.FindAllString(msg, -1) {
		for _, cand := range []string{m, "cache." + m} {
			// an error may name a key deeper than the file spells out
			// (a default filled in): fall back to its nearest written parent.
			for c := cand; c != ""; c = parentPath(c) {
				if l, ok := cl.line[c]; ok {
					if len(c) > len(best) {
						best, line = c, l
					}
					break
				}
			}
		}
	}
	return best, line
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}

// AnnotateConfigError adds "line N" (and the key, where yaml named only the
// line) to an error about the config file at path (LoadConfigFile's
// errors have it already; this is for errors found later, e.g. by
// ApplyEnv). errors.Is/As still see err.
func AnnotateConfigError(path string, err error) error {
	data, rerr := os.ReadFile(path)
	if rerr != nil {
		return err
	}
	cl := parseConfigLines(data)
	msg := err.Error()
	if locs := yamlLineRE.FindAllStringSubmatchIndex(msg, -1); len(locs) > 0 {
		// yaml errors carry lines; add the key each line holds.
		var b strings.Builder
		last := 0
		for _, loc := range locs {
			n, _ := strconv.Atoi(msg[loc[2]:loc[3]])
			b.WriteString(msg[last:loc[1]])
			if key, ok := cl.byLine[n]; ok && !strings.Contains(msg[loc[1]:], "unknown key") {
				fmt.Fprintf(&b, "key %s: ", key)
			}
			last = loc[1]
		}
		b.WriteString(msg[last:])
		return wrapMsg{err, b.String()}
	}
	if _, line := cl.keyIn(strings.TrimPrefix(msg, path)); line > 0 {
		rest := strings.TrimPrefix(strings.TrimPrefix(msg, path), ": ")
		return wrapMsg{err, fmt.Sprintf("%s: line %d: %s", path, line, rest)}
	}
	return err
}

// AnnotateKeyErrors prefixes each error that names a key of the config
// file at path ("models[0].path: ...") with that key's line.
func AnnotateKeyErrors(path string, errs []error) []error {
	data, err := os.ReadFile(path)
	if err != nil {
		return errs
	}
	cl := parseConfigLines(data)
	out := make([]error, len(errs))
	for i, e := range errs {
		if _, line := cl.keyIn(e.Error()); line > 0 {
			out[i] = wrapMsg{e, fmt.Sprintf("line %d: %v", line, e)}
		} else {
			out[i] = e
		}
	}
	return out
}

// wrapMsg replaces an error's text and keeps it for errors.Is/As.
type wrapMsg struct {
	err error
	msg string
}

func (w wrapMsg) Error() string { return w.msg }
func (w wrapMsg) Unwrap() error { return w.err }
