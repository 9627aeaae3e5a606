package tokenizer

import (
	"regexp"
	"strings"
)

// Unicode-aware replacements for Oniguruma's \s, \d, \w (Go's RE2 classes are ASCII-only).
const (
	uniSpace = `\t\n\v\f\r \x{85}\p{Z}` // = Unicode White_Space
	uniDigit = `\p{Nd}`
	uniWord  = `\p{L}\p{M}\p{Nd}\p{Pc}`
)

// compileOnig compiles an Oniguruma-syntax pattern from tokenizer.json with Go's regexp,
// rewriting \s \d \w (and \S \D \W outside classes) to their Unicode meaning. Patterns
// Go cannot express (lookaround, backreferences) fail to compile.
func compileOnig(pat string) (*regexp.Regexp, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		if c == '\\' && i+1 < len(pat) {
			e := pat[i+1]
			i++
			var rep string
			switch e {
			case 's':
				rep = uniSpace
			case 'd':
				rep = uniDigit
			case 'w':
				rep = uniWord
			case 'S', 'D', 'W':
				if !inClass {
					rep = map[byte]string{'S': uniSpace, 'D': uniDigit, 'W': uniWord}[e]
					b.WriteString("[^" + rep + "]")
					continue
				}
			}
			if rep == "" {
				b.WriteByte('\\')
				b.WriteByte(e)
				continue
			}
			if inClass {
				b.WriteString(rep)
			} else {
				b.WriteString("[" + rep + "]")
			}
			continue
		}
		switch {
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// A leading ']' or '^]' is literal.
			if i+1 < len(pat) && pat[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(pat) && pat[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
			continue
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteByte(c)
	}
	return regexp.Compile(b.String())
}
