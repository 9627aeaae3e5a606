package tokenizer

import (
	"fmt"
	"strings"
)

// Jinja2 subset: lexing. The environment matches transformers' apply_chat_template:
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, loopcontrols.

type jtokKind int

const (
	jtEOF jtokKind = iota
	jtName
	jtString
	jtInt
	jtFloat
	jtOp
)

type jtok struct {
	kind jtokKind
	s    string // name, decoded string, number text, or operator
	pos  int    // byte offset in the template
}

// tmplPart is a lexed piece of a template: text, an expression tag or a statement tag.
type tmplPart struct {
	kind byte // 't' text, 'e' {{ }}, 's' {% %}
	text string
	toks []jtok
	pos  int
}

func tmplErr(base error, pos int, format string, args ...any) error {
	return fmt.Errorf("%s: chat_template: offset %d: %s: %w", fileCfg, pos, fmt.Sprintf(format, args...), base)
}

// lexTemplate splits src into parts, applying whitespace control.
func lexTemplate(src string) ([]tmplPart, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.TrimSuffix(src, "\n")
	var parts []tmplPart
	pos := 0
	lineStart := true // the pending text starts at a line start (for lstrip_blocks)
	for pos < len(src) {
		// Find the next tag opener.
		k := -1
		for i := pos; i+1 < len(src); i++ {
			if src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#') {
				k = i
				break
			}
		}
		if k < 0 {
			parts = append(parts, tmplPart{kind: 't', text: src[pos:], pos: pos})
			break
		}
		text := src[pos:k]
		open := src[k+1]
		i := k + 2
		stripBefore, noLstrip := false, false
		if i < len(src) && src[i] == '-' {
			stripBefore = true
			i++
		} else if i < len(src) && src[i] == '+' {
			noLstrip = true
			i++
		}
		switch {
		case stripBefore:
			text = strings.TrimRight(text, " \t\n\r\f\v")
		case (open == '%' || open == '#') && !noLstrip:
			l := strings.LastIndexByte(text, '\n') + 1
			if (l > 0 || lineStart) && strings.Trim(text[l:], " \t\f\v\r") == "" {
				text = text[:l]
			}
		}
		if text != "" {
			parts = append(parts, tmplPart{kind: 't', text: text, pos: pos})
		}
		var end int
		var stripAfter, noTrim bool
		if open == '#' {
			e := strings.Index(src[i:], "#}")
			if e < 0 {
				return nil, tmplErr(ErrTemplate, k, "unclosed comment")
			}
			end = i + e + 2
			stripAfter = e > 0 && src[i+e-1] == '-'
		} else {
			closer := byte('}')
			if open == '%' {
				closer = '%'
			}
			toks, e, err := lexExpr(src, i, closer)
			if err != nil {
				return nil, err
			}
			end = e
			if n := len(toks); n > 0 && toks[n-1].kind == jtOp && (toks[n-1].s == "-" || toks[n-1].s == "+") && toks[n-1].pos == end-3 {
				stripAfter = toks[n-1].s == "-"
				noTrim = toks[n-1].s == "+"
				toks = toks[:n-1]
			}
			kind := byte('e')
			if open == '%' {
				kind = 's'
			}
			parts = append(parts, tmplPart{kind: kind, toks: toks, pos: k})
		}
		pos = end
		lineStart = false
		if stripAfter {
			for pos < len(src) && strings.IndexByte(" \t\n\r\f\v", src[pos]) >= 0 {
				pos++
			}
		} else if open != '{' && !noTrim && pos < len(src) && src[pos] == '\n' {
			pos++ // trim_blocks
			lineStart = true
		}
	}
	return parts, nil
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdent(c byte) bool      { return isIdentStart(c) || c >= '0' && c <= '9' }

// lexExpr tokenizes from i until the closer ("}}" or "%}") and returns the tokens and the
// offset just past the closer.
func lexExpr(src string, i int, closer byte) ([]jtok, int, error) {
	var toks []jtok
	for {
		for i < len(src) && strings.IndexByte(" \t\n\r", src[i]) >= 0 {
			i++
		}
		if i >= len(src) {
			return nil, 0, tmplErr(ErrTemplate, i, "unclosed tag")
		}
		c := src[i]
		if c == closer && i+1 < len(src) && src[i+1] == '}' {
			return toks, i + 2, nil
		}
		switch {
		case isIdentStart(c):
			j := i
			for j < len(src) && isIdent(src[j]) {
				j++
			}
			toks = append(toks, jtok{jtName, src[i:j], i})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
				j++
			}
			kind := jtInt
			if j+1 < len(src) && src[j] == '.' && src[j+1] >= '0' && src[j+1] <= '9' {
				kind = jtFloat
				j++
				for j < len(src) && src[j] >= '0' && src[j] <= '9' {
					j++
				}
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && src[k] >= '0' && src[k] <= '9' {
					for k < len(src) && src[k] >= '0' && src[k] <= '9' {
						k++
					}
					kind, j = jtFloat, k
				}
			}
			toks = append(toks, jtok{kind, strings.ReplaceAll(src[i:j], "_", ""), i})
			i = j
		case c == '"' || c == '\'':
			s, j, err := lexString(src, i)
			if err != nil {
				return nil, 0, err
			}
			toks = append(toks, jtok{jtString, s, i})
			i = j
		default:
			op := ""
			for _, o := range []string{"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "|", ".", ",", ":", "(", ")", "[", "]", "{", "}", "=", "<", ">"} {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, 0, tmplErr(ErrUnsupportedTemplate, i, "unexpected character %q", c)
			}
			toks = append(toks, jtok{jtOp, op, i})
			i += len(op)
		}
	}
}

// lexString decodes a Python-style string literal starting at src[i].
func lexString(src string, i int) (string, int, error) {
	q := src[i]
	var b strings.Builder
	j := i + 1
	for j < len(src) {
		c := src[j]
		if c == q {
			return b.String(), j + 1, nil
		}
		if c != '\\' {
			b.WriteByte(c)
			j++
			continue
		}
		if j+1 >= len(src) {
			break
		}
		e := src[j+1]
		j += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if j+n > len(src) {
				return "", 0, tmplErr(ErrTemplate, j, "bad \\%c escape", e)
			}
			var v rune
			for _, h := range []byte(src[j : j+n]) {
				d := strings.IndexByte("0123456789abcdef", h|0x20)
				if d < 0 {
					return "", 0, tmplErr(ErrTemplate, j, "bad \\%c escape", e)
				}
				v = v<<4 | rune(d)
			}
			b.WriteRune(v)
			j += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, tmplErr(ErrTemplate, i, "unterminated string")
}
