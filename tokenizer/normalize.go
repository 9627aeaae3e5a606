package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// maxDepth bounds nesting of Sequence components.
const maxDepth = 8

// normalizer transforms a string piece (one split between added tokens).
type normalizer interface {
	normalize(s string) string
}

type normSeq []normalizer

func (n normSeq) normalize(s string) string {
	for _, x := range n {
		s = x.normalize(s)
	}
	return s
}

type normForm struct{ f norm.Form }

func (n normForm) normalize(s string) string { return n.f.String(s) }

type normLower struct{}

func (normLower) normalize(s string) string { return rustLower(s) }

// rustLower is Rust's str::to_lowercase: simple mappings plus the unconditional special
// case U+0130 -> "i\u0307" and the final-sigma rule for U+03A3.
func rustLower(s string) string {
	if !strings.ContainsAny(s, "\u0130\u03a3") {
		return strings.ToLower(s)
	}
	var b strings.Builder
	b.Grow(len(s) + 4)
	for i, r := range s {
		switch r {
		case 0x130:
			b.WriteString("i\u0307")
		case 0x3A3:
			if finalSigma(s, i) {
				b.WriteRune(0x3C2)
			} else {
				b.WriteRune(0x3C3)
			}
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

func isCaseIgnorable(r rune) bool {
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk) ||
		r == '\'' || r == '.' || r == ':' || r == 0xB7 || r == 0x2019
}

// finalSigma: the sigma at byte i is preceded by a cased letter and not followed by one
// (skipping case-ignorable characters on both sides).
func finalSigma(s string, i int) bool {
	before := false
	for j := i; j > 0; {
		r, w := utf8.DecodeLastRuneInString(s[:j])
		j -= w
		if isCaseIgnorable(r) {
			continue
		}
		before = isCased(r)
		break
	}
	if !before {
		return false
	}
	for j := i + 2; j < len(s); {
		r, w := utf8.DecodeRuneInString(s[j:])
		j += w
		if isCaseIgnorable(r) {
			continue
		}
		return !isCased(r)
	}
	return true
}

type normPrepend struct{ p string }

func (n normPrepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.p + s
}

// replacer is shared by the Replace normalizer and the Replace decoder.
type replacer struct {
	lit     string
	re      *regexp.Regexp
	content string
}

func (r replacer) replace(s string) string {
	if r.re != nil {
		return r.re.ReplaceAllLiteralString(s, r.content)
	}
	if r.lit == "" {
		return s
	}
	return strings.ReplaceAll(s, r.lit, r.content)
}

func (r replacer) normalize(s string) string { return r.replace(s) }

type normStrip struct{ left, right bool }

func (n normStrip) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type normByteLevel struct{}

func (normByteLevel) normalize(s string) string { return byteLevelMap(s) }

type typed struct {
	Type string `json:"type"`
}

// parseSequence parses the list under key of a "Sequence" component at field
// with parse (one nesting level deeper), dropping null members.
func parseSequence[T any](r json.RawMessage, field, key string, depth int,
	parse func(json.RawMessage, string, int) (T, error)) ([]T, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(r, &v); err != nil {
		return nil, errf(ErrFormat, field, "%v", err)
	}
	var items []json.RawMessage
	if raw, ok := v[key]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, errf(ErrFormat, field+"."+key, "%v", err)
		}
	}
	var seq []T
	for i, x := range items {
		p, err := parse(x, fmt.Sprintf("%s.%s[%d]", field, key, i), depth+1)
		if err != nil {
			return nil, err
		}
		if any(p) != nil { // T is an interface: a null member parses to nil
			seq = append(seq, p)
		}
	}
	return seq, nil
}

func componentType(r json.RawMessage, field string) (string, error) {
	var t typed
	if err := json.Unmarshal(r, &t); err != nil {
		return "", errf(ErrFormat, field, "%v", err)
	}
	if t.Type == "" {
		return "", errf(ErrFormat, field+".type", "missing")
	}
	return t.Type, nil
}

func parseReplace(r json.RawMessage, field string) (replacer, error) {
	var v struct {
		Pattern struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(r, &v); err != nil {
		return replacer{}, errf(ErrFormat, field, "%v", err)
	}
	if v.Content == nil {
		return replacer{}, errf(ErrFormat, field+".content", "missing")
	}
	rep := replacer{content: *v.Content}
	switch {
	case v.Pattern.String != nil:
		rep.lit = *v.Pattern.String
	case v.Pattern.Regex != nil:
		re, err := compileOnig(*v.Pattern.Regex)
		if err != nil {
			return replacer{}, errf(ErrUnsupported, field+".pattern.Regex", "%v", err)
		}
		rep.re = re
	default:
		return replacer{}, errf(ErrFormat, field+".pattern", "want String or Regex")
	}
	return rep, nil
}

func parseNormalizer(r json.RawMessage, field string, depth int) (normalizer, error) {
	if isNull(r) {
		return nil, nil
	}
	if depth > maxDepth {
		return nil, errf(ErrFormat, field, "nested deeper than %d", maxDepth)
	}
	typ, err := componentType(r, field)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := parseSequence(r, field, "normalizers", depth, parseNormalizer)
		return normSeq(seq), err
	case "NFC":
		return normForm{norm.NFC}, nil
	case "NFD":
		return normForm{norm.NFD}, nil
	case "NFKC":
		return normForm{norm.NFKC}, nil
	case "NFKD":
		return normForm{norm.NFKD}, nil
	case "Lowercase":
		return normLower{}, nil
	case "Prepend":
		var v struct {
			Prepend *string `json:"prepend"`
		}
		if err := json.Unmarshal(r, &v); err != nil || v.Prepend == nil {
			return nil, errf(ErrFormat, field+".prepend", "missing or not a string")
		}
		return normPrepend{*v.Prepend}, nil
	case "Replace":
		return parseReplace(r, field)
	case "Strip":
		var v struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		return normStrip{v.Left, v.Right}, nil
	case "ByteLevel":
		return normByteLevel{}, nil
	}
	return nil, errf(ErrUnsupported, field+".type", "normalizer %q", typ)
}
