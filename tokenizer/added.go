package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json added_tokens.
type addedToken struct {
	id         int32
	content    string
	match      string // what is searched for: content, or its normalized form when normalized
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// tokenSet finds added tokens with leftmost-longest semantics (as HF's Aho-Corasick
// with MatchKind::LeftmostLongest).
type tokenSet struct {
	first [256]bool
	byLen []*addedToken // sorted by len(match) descending
}

type addedVocab struct {
	byContent map[string]int32
	byID      map[int32]*addedToken
	raw       *tokenSet // normalized == false: matched on the raw input
	norm      *tokenSet // normalized == true: matched on normalized pieces
}

func newTokenSet(toks []*addedToken) *tokenSet {
	if len(toks) == 0 {
		return nil
	}
	ts := &tokenSet{byLen: toks}
	sort.SliceStable(ts.byLen, func(i, j int) bool { return len(ts.byLen[i].match) > len(ts.byLen[j].match) })
	for _, t := range toks {
		ts.first[t.match[0]] = true
	}
	return ts
}

func newAddedVocab(toks []addedToken) *addedVocab {
	av := &addedVocab{byContent: map[string]int32{}, byID: map[int32]*addedToken{}}
	var raw, nrm []*addedToken
	for i := range toks {
		t := &toks[i]
		av.byContent[t.content] = t.id
		av.byID[t.id] = t
		if t.match == "" {
			continue
		}
		if t.normalized {
			nrm = append(nrm, t)
		} else {
			raw = append(raw, t)
		}
	}
	av.raw, av.norm = newTokenSet(raw), newTokenSet(nrm)
	return av
}

// next returns the leftmost-longest match at or after i.
func (ts *tokenSet) next(s string, i int) (*addedToken, int) {
	for ; i < len(s); i++ {
		if !ts.first[s[i]] {
			continue
		}
		for _, t := range ts.byLen {
			if strings.HasPrefix(s[i:], t.match) {
				return t, i
			}
		}
	}
	return nil, -1
}

// isWordRune approximates Rust regex's Unicode \w.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) ||
		unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

// segment is a piece of input during encoding: either an added token (id >= 0) or text.
type segment struct {
	s      string
	id     int32
	origin bool
}

// split is HF AddedVocabulary::find_matches + split_with_indices for one text piece; it
// appends segments (empty ones dropped) to dst.
func (ts *tokenSet) split(dst []segment, s string, origin bool) []segment {
	if ts == nil {
		if s != "" {
			dst = append(dst, segment{s: s, id: -1, origin: origin})
		}
		return dst
	}
	startOff := 0
	emit := func(a, b int, id int32) {
		if b > a {
			dst = append(dst, segment{s: s[a:b], id: id, origin: origin && a == 0})
		}
	}
	for i := 0; i < len(s); {
		t, at := ts.next(s, i)
		if t == nil {
			break
		}
		start, stop := at, at+len(t.match)
		i = stop
		if t.singleWord {
			if start > 0 {
				if r, _ := utf8.DecodeLastRuneInString(s[:start]); isWordRune(r) {
					continue
				}
			}
			if stop < len(s) {
				if r, _ := utf8.DecodeRuneInString(s[stop:]); isWordRune(r) {
					continue
				}
			}
		}
		if t.lstrip {
			ns := len(strings.TrimRightFunc(s[:start], unicode.IsSpace))
			start = max(ns, startOff)
		}
		if t.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
			i = stop
		}
		emit(startOff, start, -1)
		emit(start, stop, t.id)
		startOff = stop
	}
	emit(startOff, len(s), -1)
	return dst
}
