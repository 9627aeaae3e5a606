package cache

import (
	"strconv"
	"strings"
	"unicode"
)

// token is one word of a key text.
type token struct {
	orig  string // as written (case kept, apostrophes normalized)
	low   string // lower-cased
	stem  string // lower-cased, light suffix stripping, number words as digits
	first bool   // first word of a sentence
	neg   bool   // a negation marker (not, never, n't, without, ...)
	// stop and stemStop: low and stem are function words (stopwords[low],
	// stopwords[stem]), looked up once per token.
	stop, stemStop bool
}

// tokenize splits s into words: runs of letters, digits and inner
// apostrophes, dots or commas between digits. Contractions are split
// ("isn't" → "is" + negation "not", "what's" → "what" + "is").
// Input longer than 64 KiB is truncated (callers bound key texts anyway).
func tokenize(s string) []token {
	if len(s) > 64<<10 {
		s = s[:64<<10]
	}
	if isASCII(s) {
		return tokenizeASCII(s)
	}
	return tokenizeRunes(s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isDigitByte(c byte) bool { return c >= '0' && c <= '9' }

func isLetterByte(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// tokenizeASCII is tokenizeRunes for ASCII s (the letters and digits of
// unicode.IsLetter / IsDigit below 0x80 are exactly [A-Za-z0-9]), with
// words cut from s instead of from a rune copy: the same tokens
// (TestTokenizeASCIIMatchesRunes, FuzzTokenizeASCII).
func tokenizeASCII(s string) []token {
	var out []token
	first := true
	for i := 0; i < len(s); {
		c := s[i]
		if !isWordByte(c) {
			if c == '.' || c == '?' || c == '!' || c == ';' || c == ':' {
				first = true
			}
			i++
			continue
		}
		j := i
		for j < len(s) {
			c := s[j]
			if isWordByte(c) {
				j++
				continue
			}
			// Keep 3.14 and 1,000 and don't / O'Brien together.
			if j+1 < len(s) && j > i {
				if (c == '.' || c == ',') && isDigitByte(s[j-1]) && isDigitByte(s[j+1]) {
					j++
					continue
				}
				if c == '\'' && isLetterByte(s[j-1]) && isLetterByte(s[j+1]) {
					j++
					continue
				}
			}
			break
		}
		out = appendWord(out, s[i:j], first)
		i = j
		first = false
	}
	return out
}

// tokenizeRunes is tokenize for any text.
func tokenizeRunes(s string) []token {
	rs := []rune(s)
	var out []token
	first := true
	for i := 0; i < len(rs); {
		r := rs[i]
		if !isWordRune(r) {
			if r == '.' || r == '?' || r == '!' || r == ';' || r == ':' {
				first = true
			}
			i++
			continue
		}
		j := i
		for j < len(rs) {
			c := rs[j]
			if isWordRune(c) {
				j++
				continue
			}
			// Keep 3.14 and 1,000 and don't / O'Brien together.
			if j+1 < len(rs) && j > i {
				if (c == '.' || c == ',') && unicode.IsDigit(rs[j-1]) && unicode.IsDigit(rs[j+1]) {
					j++
					continue
				}
				if (c == '\'' || c == '’') && unicode.IsLetter(rs[j-1]) && unicode.IsLetter(rs[j+1]) {
					j++
					continue
				}
			}
			break
		}
		w := strings.ReplaceAll(string(rs[i:j]), "’", "'")
		i = j
		out = appendWord(out, w, first)
		first = false
	}
	return out
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

var contractions = map[string][2]string{
	"can't": {"can", "not"}, "won't": {"will", "not"}, "shan't": {"shall", "not"},
	"cannot": {"can", "not"}, "ain't": {"is", "not"},
}

func appendWord(out []token, w string, first bool) []token {
	low := strings.ToLower(w)
	if c, ok := contractions[low]; ok {
		out = append(out, mkToken(w[:min(len(w), len(c[0]))], c[0], first))
		return append(out, mkToken("not", "not", false))
	}
	if strings.HasSuffix(low, "n't") && len(low) > 3 {
		base := low[:len(low)-3]
		out = append(out, mkToken(w[:len(base)], base, first))
		return append(out, mkToken("not", "not", false))
	}
	if k := strings.IndexByte(low, '\''); k > 0 {
		suf := low[k+1:]
		switch suf {
		case "s": // possessive or "is": keep the base only
			return append(out, mkToken(w[:k], low[:k], first))
		case "re", "ve", "ll", "d", "m":
			exp := map[string]string{"re": "are", "ve": "have", "ll": "will", "d": "would", "m": "am"}[suf]
			out = append(out, mkToken(w[:k], low[:k], first))
			return append(out, mkToken(exp, exp, false))
		}
	}
	return append(out, mkToken(w, low, first))
}

func mkToken(orig, low string, first bool) token {
	low = strings.ReplaceAll(low, ",", "")
	t := token{orig: orig, low: low, first: first}
	t.stem = stem(low)
	t.neg = negations[low]
	t.stop, t.stemStop = stopwords[low], stopwords[t.stem]
	return t
}

var negations = map[string]bool{
	"not": true, "no": true, "never": true, "without": true, "none": true, "nobody": true,
	"nothing": true, "neither": true, "nor": true, "nowhere": true, "non": true,
}

var numberWords = map[string]string{
	"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
	"six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11",
	"twelve": "12", "thirteen": "13", "fourteen": "14", "fifteen": "15", "sixteen": "16",
	"seventeen": "17", "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30",
	"forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80",
	"ninety": "90", "hundred": "100", "thousand": "1000", "million": "1000000",
	"billion": "1000000000", "dozen": "12", "half": "0.5", "twice": "2", "double": "2",
	"triple": "3", "once": "1",
}

// stem strips a few English suffixes and maps number words to digits. It is
// deliberately light: it only has to make "lists"/"list" and
// "boiling"/"boil" meet.
func stem(w string) string {
	if d, ok := numberWords[w]; ok {
		return d
	}
	if o := ordinal(w); o != "" {
		return o
	}
	if isNumber(w) {
		if f, err := strconv.ParseFloat(w, 64); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return w
	}
	b := suffixStrip(w)
	if len(b) > 3 && b[len(b)-1] == 'e' && !strings.HasSuffix(b, "ee") {
		b = b[:len(b)-1] // handle/handled → handl
	}
	return b
}

// ordinal maps "1st", "2nd", "12th" and the words first…tenth to "#1" … so
// that different ordinals never look equal; "" when w is not one.
func ordinal(w string) string {
	if o, ok := ordinalWords[w]; ok {
		return o
	}
	if len(w) > 2 {
		d, suf := w[:len(w)-2], w[len(w)-2:]
		if (suf == "st" || suf == "nd" || suf == "rd" || suf == "th") && isNumber(d) {
			return "#" + d
		}
	}
	return ""
}

var ordinalWords = map[string]string{
	"first": "#1", "second": "#2", "third": "#3", "fourth": "#4", "fifth": "#5",
	"sixth": "#6", "seventh": "#7", "eighth": "#8", "ninth": "#9", "tenth": "#10",
}

func suffixStrip(w string) string {
	n := len(w)
	switch {
	case n > 5 && strings.HasSuffix(w, "ly") && !strings.HasSuffix(w, "ily"):
		return w[:n-2] // naturally → natural, slowly → slow
	case n > 4 && strings.HasSuffix(w, "ies"):
		return w[:n-3] + "y"
	case n > 5 && (strings.HasSuffix(w, "sses") || strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes")):
		return w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return w[:n-1]
	case n > 5 && strings.HasSuffix(w, "ing"):
		b := w[:n-3]
		if len(b) > 2 && b[len(b)-1] == b[len(b)-2] && !strings.ContainsRune("aeiouls", rune(b[len(b)-1])) {
			b = b[:len(b)-1] // running → run
		}
		return b
	case n > 4 && strings.HasSuffix(w, "ed") && !strings.HasSuffix(w, "eed"):
		b := w[:n-2]
		if len(b) > 2 && b[len(b)-1] == b[len(b)-2] && !strings.ContainsRune("aeiouls", rune(b[len(b)-1])) {
			b = b[:len(b)-1]
		}
		return b
	}
	return w
}

// isNumeric reports whether a stem is a number or an ordinal.
func isNumeric(stem string) bool {
	return isNumber(stem) || (len(stem) > 1 && stem[0] == '#' && isNumber(stem[1:]))
}

func isNumber(w string) bool {
	digit := false
	for _, r := range w {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r == '.' || r == ',':
		default:
			return false
		}
	}
	return digit
}

// stopwords are function words: low weight in the embedder, ignored as
// "content" by the guard.
var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the and or but if then else of to in on at by for with from into onto
	about as is are was were be been being am do does did doing done have has had having i me my mine we us our
	you your yours he him his she her it its they them their this that these those there here what which who whom
	whose when where why how can could should would will shall may might must so than too very just also any some
	all each every both either more most much many such own same other another get got give tell explain show
	please help want need know like way best good thing something someone anything one's s t ll re ve d m
	up down out over under again further once only really quite there's let lets make made use using used
	difference between vs versus per via whether`) {
		stopwords[w] = true
	}
}

func isContent(t token) bool {
	return !t.stop && !t.neg
}
