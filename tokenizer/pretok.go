package tokenizer

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is a substring during pre-tokenization. origin reports whether it starts at byte 0
// of the original input (HF: offsets_original().0 == 0), which Metaspace prepend_scheme
// "first" depends on.
type piece struct {
	s      string
	origin bool
	raw    bool // s still needs the byte-level mapping (lazy final ByteLevel step)
}

// preTokenizer splits a piece further (and may transform it), calling emit for each
// non-empty result in order.
type preTokenizer interface {
	each(p piece, emit func(piece))
}

type preSeq []preTokenizer

func (s preSeq) each(p piece, emit func(piece)) { chain(s, emit)(p) }

// chain composes the steps of s into one function ending in emit (built once per Encode).
func chain(s preSeq, emit func(piece)) func(piece) {
	f := emit
	for i := len(s) - 1; i >= 0; i-- {
		x, next := s[i], f
		f = func(p piece) { x.each(p, next) }
	}
	return f
}

// pipeline returns the pre-tokenizer as one function ending in emit.
func pipeline(p preTokenizer, emit func(piece)) func(piece) {
	if s, ok := p.(preSeq); ok {
		return chain(s, emit)
	}
	return func(q piece) { p.each(q, emit) }
}

// matcher finds the next match in s at or after byte offset i, returning [start,end) or
// start < 0 when there is none. Matches must be non-empty.
type matcher func(s string, i int) (start, end int)

type behavior int

const (
	bIsolated behavior = iota
	bRemoved
	bMergedWithPrevious
	bMergedWithNext
	bContiguous
)

type seg struct {
	a, b  int
	match bool
}

// splitBy applies HF NormalizedString::split semantics for pattern matches found by m.
func splitBy(p piece, m matcher, beh behavior, invert bool, emit func(piece)) {
	s := p.s
	if s == "" {
		return
	}
	if beh == bIsolated && !invert {
		// Fast path: every match and every gap is its own piece.
		prev := 0
		for i := 0; i < len(s); {
			a, b := m(s, i)
			if a < 0 || b <= a {
				break
			}
			if prev != a {
				emit(piece{s: s[prev:a], origin: p.origin && prev == 0, raw: p.raw})
			}
			emit(piece{s: s[a:b], origin: p.origin && a == 0, raw: p.raw})
			prev, i = b, b
		}
		if prev != len(s) {
			emit(piece{s: s[prev:], origin: p.origin && prev == 0, raw: p.raw})
		}
		return
	}
	var segs []seg
	prev := 0
	for i := 0; i < len(s); {
		a, b := m(s, i)
		if a < 0 || b <= a {
			break
		}
		if prev != a {
			segs = append(segs, seg{prev, a, false})
		}
		segs = append(segs, seg{a, b, true})
		prev, i = b, b
	}
	if prev != len(s) {
		segs = append(segs, seg{prev, len(s), false})
	}
	if invert {
		for i := range segs {
			segs[i].match = !segs[i].match
		}
	}
	var out []seg
	switch beh {
	case bIsolated:
		out = segs
	case bRemoved:
		for _, x := range segs {
			if !x.match {
				out = append(out, x)
			}
		}
	case bContiguous:
		prevMatch := false
		for _, x := range segs {
			if len(out) > 0 && x.match == prevMatch {
				out[len(out)-1].b = x.b
			} else {
				out = append(out, seg{x.a, x.b, false})
			}
			prevMatch = x.match
		}
	case bMergedWithPrevious:
		prevMatch := false
		for _, x := range segs {
			if x.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].b = x.b
			} else {
				out = append(out, seg{x.a, x.b, false})
			}
			prevMatch = x.match
		}
	case bMergedWithNext:
		prevMatch := false
		for k := len(segs) - 1; k >= 0; k-- {
			x := segs[k]
			if x.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].a = x.a
			} else {
				out = append(out, seg{x.a, x.b, false})
			}
			prevMatch = x.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	for _, x := range out {
		if x.b > x.a {
			emit(piece{s: s[x.a:x.b], origin: p.origin && x.a == 0, raw: p.raw})
		}
	}
}

// wholeMatcher turns a "match at i" function (which always matches a non-empty prefix
// of s[i:]) into a matcher.
func wholeMatcher(at func(s string, i int) int) matcher {
	return func(s string, i int) (int, int) {
		if i >= len(s) {
			return -1, -1
		}
		return i, at(s, i)
	}
}

func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }
func isS(r rune) bool { return unicode.IsSpace(r) }

func runeAt(s string, i int) (rune, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// foldEq reports whether r equals the lower-case ASCII letter c under Unicode simple case
// folding (as Oniguruma's (?i) does: 's' also matches U+017F LATIN SMALL LETTER LONG S).
func foldEq(r rune, c byte) bool {
	if r == rune(c) || r == rune(c-'a'+'A') {
		return true
	}
	return c == 's' && r == 0x17F || c == 'k' && r == 0x212A
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at s[i] == '\”; returns the end or -1.
func contraction(s string, i int, fold bool) int {
	eq := func(j int, c byte) (int, bool) {
		if j >= len(s) {
			return j, false
		}
		r, w := runeAt(s, j)
		if fold {
			return j + w, foldEq(r, c)
		}
		return j + w, r == rune(c)
	}
	j := i + 1
	for _, alt := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
		k, ok := j, true
		for x := 0; x < len(alt) && ok; x++ {
			k, ok = eq(k, alt[x])
		}
		if ok {
			return k
		}
	}
	return -1
}

func runWhile(s string, i int, f func(rune) bool) int {
	for i < len(s) {
		r, w := runeAt(s, i)
		if !f(r) {
			break
		}
		i += w
	}
	return i
}

func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

// wsTail implements `\s+(?!\S)|\s+` at i where s[i] is whitespace.
func wsTail(s string, i int) int {
	k := runWhile(s, i, isS)
	if k == len(s) {
		return k
	}
	_, w := utf8.DecodeLastRuneInString(s[:k])
	if k-w > i {
		return k - w
	}
	return k
}

// gpt2At matches GPT-2's pattern
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ at i.
func gpt2At(s string, i int) int {
	r, w := runeAt(s, i)
	if r == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	j := i
	if r == ' ' {
		j = i + 1
	}
	if j < len(s) {
		r2, _ := runeAt(s, j)
		switch {
		case isL(r2):
			return runWhile(s, j, isL)
		case isN(r2):
			return runWhile(s, j, isN)
		case isOther(r2):
			return runWhile(s, j, isOther)
		}
	}
	if isS(r) {
		return wsTail(s, i)
	}
	return i + w // unreachable for the classes above; keeps progress
}

// llama3At matches the Llama-3 (cl100k) pattern
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// at i.
func llama3At(maxDigits int) func(s string, i int) int {
	return func(s string, i int) int {
		r, w := runeAt(s, i)
		if r == '\'' {
			if e := contraction(s, i, true); e > 0 {
				return e
			}
		}
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if isL(r) {
			return runWhile(s, i, isL)
		}
		if !isN(r) && r != '\r' && r != '\n' && i+w < len(s) {
			if r2, _ := runeAt(s, i+w); isL(r2) {
				return runWhile(s, i+w, isL)
			}
		}
		// \p{N}{1,maxDigits}
		if isN(r) {
			j, n := i, 0
			for j < len(s) && n < maxDigits {
				r2, w2 := runeAt(s, j)
				if !isN(r2) {
					break
				}
				j += w2
				n++
			}
			return j
		}
		// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
		j := i
		if r == ' ' {
			j = i + 1
		}
		if j < len(s) {
			if r2, _ := runeAt(s, j); isOther(r2) {
				e := runWhile(s, j, isOther)
				for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
					e++
				}
				return e
			}
		}
		if isS(r) {
			// \s*[\r\n]+ : ends after the last CR/LF of the whitespace run.
			k := runWhile(s, i, isS)
			if m := strings.LastIndexAny(s[i:k], "\r\n"); m >= 0 {
				return i + m + 1
			}
			return wsTail(s, i)
		}
		return i + w
	}
}

// Known Split patterns implemented without a lookahead regexp.
const (
	patGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

func regexMatcher(re *regexp.Regexp) matcher {
	return func(s string, i int) (int, int) {
		for i <= len(s) {
			loc := re.FindStringIndex(s[i:])
			if loc == nil {
				return -1, -1
			}
			if loc[1] > loc[0] {
				return i + loc[0], i + loc[1]
			}
			// Skip empty matches (HF drops empty splits).
			_, w := utf8.DecodeRuneInString(s[i+loc[0]:])
			if w == 0 {
				return -1, -1
			}
			i += loc[0] + w
		}
		return -1, -1
	}
}

func literalMatcher(lit string) matcher {
	return func(s string, i int) (int, int) {
		if lit == "" {
			return -1, -1
		}
		k := strings.Index(s[i:], lit)
		if k < 0 {
			return -1, -1
		}
		return i + k, i + k + len(lit)
	}
}

type preSplit struct {
	m      matcher
	beh    behavior
	invert bool
}

func (p preSplit) each(x piece, emit func(piece)) { splitBy(x, p.m, p.beh, p.invert, emit) }

type preByteLevel struct {
	addPrefixSpace bool
	useRegex       bool
	lazy           bool // last step of the pipeline: leave mapping to the model (piece.raw)
}

var gpt2Matcher = wholeMatcher(gpt2At)

func (p preByteLevel) each(x piece, emit func(piece)) {
	if x.s == "" {
		return
	}
	if p.addPrefixSpace && x.s[0] != ' ' {
		x.s = " " + x.s
	}
	out := func(q piece) {
		if p.lazy {
			q.raw = true
		} else {
			q.s = byteLevelMap(q.s)
		}
		emit(q)
	}
	if p.useRegex {
		splitBy(x, gpt2Matcher, bIsolated, false, out)
	} else {
		out(x)
	}
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

type preMetaspace struct {
	matcher matcher
	repl    string
	replR   rune
	scheme  prependScheme
	split   bool
}

func (p preMetaspace) each(x piece, emit func(piece)) {
	if x.s == "" {
		return
	}
	s := strings.ReplaceAll(x.s, " ", p.repl)
	switch p.scheme {
	case prependAlways:
		if !strings.HasPrefix(s, p.repl) {
			s = p.repl + s
		}
	case prependFirst:
		if !strings.HasPrefix(s, p.repl) && x.origin {
			s = p.repl + s
		}
	}
	x.s = s
	if p.split {
		splitBy(x, p.matcher, bMergedWithNext, false, emit)
	} else {
		emit(x)
	}
}

func parseBehavior(s, field string) (behavior, error) {
	switch s {
	case "Isolated":
		return bIsolated, nil
	case "Removed":
		return bRemoved, nil
	case "MergedWithPrevious":
		return bMergedWithPrevious, nil
	case "MergedWithNext":
		return bMergedWithNext, nil
	case "Contiguous":
		return bContiguous, nil
	}
	return 0, errf(ErrUnsupported, field, "split behavior %q", s)
}

// markLazy lets a final ByteLevel step defer its byte mapping to the model, which maps into
// a reused buffer and looks words up without allocating.
func markLazy(p preTokenizer) preTokenizer {
	switch x := p.(type) {
	case preByteLevel:
		x.lazy = true
		return x
	case preSeq:
		if len(x) > 0 {
			x[len(x)-1] = markLazy(x[len(x)-1])
		}
	}
	return p
}

func parsePreTokenizer(r json.RawMessage, field string, depth int) (preTokenizer, error) {
	if isNull(r) {
		return preSeq(nil), nil
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
		seq, err := parseSequence(r, field, "pretokenizers", depth, parsePreTokenizer)
		return preSeq(seq), err
	case "ByteLevel":
		v := struct {
			AddPrefixSpace *bool `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		p := preByteLevel{addPrefixSpace: true, useRegex: true}
		if v.AddPrefixSpace != nil {
			p.addPrefixSpace = *v.AddPrefixSpace
		}
		if v.UseRegex != nil {
			p.useRegex = *v.UseRegex
		}
		return p, nil
	case "Split":
		var v struct {
			Pattern struct {
				String *string `json:"String"`
				Regex  *string `json:"Regex"`
			} `json:"pattern"`
			Behavior string `json:"behavior"`
			Invert   bool   `json:"invert"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		beh, err := parseBehavior(v.Behavior, field+".behavior")
		if err != nil {
			return nil, err
		}
		p := preSplit{beh: beh, invert: v.Invert}
		switch {
		case v.Pattern.String != nil:
			p.m = literalMatcher(*v.Pattern.String)
		case v.Pattern.Regex != nil:
			switch *v.Pattern.Regex {
			case patGPT2:
				p.m = gpt2Matcher
			case patLlama3:
				p.m = wholeMatcher(llama3At(3))
			case patQwen2:
				p.m = wholeMatcher(llama3At(1))
			default:
				re, err := compileOnig(*v.Pattern.Regex)
				if err != nil {
					return nil, errf(ErrUnsupported, field+".pattern.Regex", "not a known pattern and not RE2-compatible: %v", err)
				}
				p.m = regexMatcher(re)
			}
		default:
			return nil, errf(ErrFormat, field+".pattern", "want String or Regex")
		}
		return p, nil
	case "Metaspace":
		var v struct {
			Replacement    *string `json:"replacement"`
			PrependScheme  *string `json:"prepend_scheme"`
			AddPrefixSpace *bool   `json:"add_prefix_space"`
			Split          *bool   `json:"split"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		p, err := metaspaceParams(v.Replacement, v.PrependScheme, v.AddPrefixSpace, field)
		if err != nil {
			return nil, err
		}
		p.split = v.Split == nil || *v.Split
		p.matcher = literalMatcher(p.repl)
		return p, nil
	case "Digits":
		var v struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		m := func(s string, i int) (int, int) {
			for i < len(s) {
				r, w := runeAt(s, i)
				if isN(r) {
					if v.Individual {
						return i, i + w
					}
					return i, runWhile(s, i, isN)
				}
				i += w
			}
			return -1, -1
		}
		if v.Individual {
			return preSplit{m: m, beh: bIsolated}, nil
		}
		return preSplit{m: m, beh: bContiguous}, nil
	}
	return nil, errf(ErrUnsupported, field+".type", "pre-tokenizer %q", typ)
}

func metaspaceParams(repl, scheme *string, addPrefix *bool, field string) (preMetaspace, error) {
	p := preMetaspace{repl: "▁", replR: '▁', scheme: prependAlways}
	if repl != nil {
		if utf8.RuneCountInString(*repl) != 1 {
			return p, errf(ErrFormat, field+".replacement", "want exactly one character, got %q", *repl)
		}
		p.repl = *repl
		p.replR, _ = utf8.DecodeRuneInString(*repl)
	}
	switch {
	case scheme != nil:
		switch *scheme {
		case "always":
			p.scheme = prependAlways
		case "first":
			p.scheme = prependFirst
		case "never":
			p.scheme = prependNever
		default:
			return p, errf(ErrFormat, field+".prepend_scheme", "unknown %q", *scheme)
		}
	case addPrefix != nil && !*addPrefix:
		p.scheme = prependNever
	}
	return p, nil
}

// byteLevel tables: GPT-2's reversible byte <-> printable rune mapping.
var (
	byteToRune [256]rune
	byteToStr  [256]string
	runeToByte map[rune]byte
)

func init() {
	runeToByte = make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		var r rune
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			r = rune(b)
		} else {
			r = rune(256 + n)
			n++
		}
		byteToRune[b] = r
		byteToStr[b] = string(r)
		runeToByte[r] = byte(b)
	}
}

// byteLevelMap maps every byte of s to its GPT-2 byte-level rune.
func byteLevelMap(s string) string {
	var b strings.Builder
	b.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		b.WriteString(byteToStr[s[i]])
	}
	return b.String()
}
