package cache

import (
	"sort"
	"strings"
)

// Guard reasons, as returned by Guard and used as metric labels.
const (
	GuardNegation = "negation" // one side negates, the other does not
	GuardNumber   = "number"   // different numbers (digits or number words)
	GuardDate     = "date"     // different months, weekdays or relative days
	GuardEntity   = "entity"   // a named entity of one side is absent from the other
	GuardRole     = "role"     // same words, subject and object (or from/to) swapped
	GuardAntonym  = "antonym"  // one side says X where the other says its opposite
)

// Guard checks a semantic candidate against the query and returns "" when the
// candidate may be served, or the reason it must not be: one of the Guard*
// constants. It looks only at surface features (no model), so it is
// conservative: a rejection costs a generation, a false hit costs a wrong
// answer. Both texts are key texts as stored (normalized, case kept).
func Guard(query, cached string) string {
	a, b := tokenize(query), tokenize(cached)
	if countNeg(a) != countNeg(b) {
		return GuardNegation
	}
	if !sameMultiset(numbers(a), numbers(b)) {
		return GuardNumber
	}
	if !sameMultiset(dates(a), dates(b)) {
		return GuardDate
	}
	if entityMismatch(a, b) || entityMismatch(b, a) {
		return GuardEntity
	}
	if antonymMismatch(a, b) {
		return GuardAntonym
	}
	if roleSwap(a, b) {
		return GuardRole
	}
	return ""
}

func countNeg(ts []token) int {
	n := 0
	for _, t := range ts {
		if t.neg {
			n++
		}
	}
	return n
}

func numbers(ts []token) []string {
	var out []string
	for _, t := range ts {
		if isNumber(t.stem) {
			out = append(out, t.stem)
		}
	}
	return out
}

var dateWords = map[string]string{
	"january": "jan", "jan": "jan", "february": "feb", "feb": "feb", "march": "mar",
	"april": "apr", "apr": "apr", "may": "may", "june": "jun", "jun": "jun", "july": "jul",
	"jul": "jul", "august": "aug", "aug": "aug", "september": "sep", "sep": "sep", "sept": "sep",
	"october": "oct", "oct": "oct", "november": "nov", "nov": "nov", "december": "dec", "dec": "dec",
	"monday": "mon", "tuesday": "tue", "wednesday": "wed", "thursday": "thu", "friday": "fri",
	"saturday": "sat", "sunday": "sun", "today": "today", "tomorrow": "tomorrow",
	"yesterday": "yesterday", "tonight": "tonight", "weekend": "weekend",
	"morning": "morning", "evening": "evening", "afternoon": "afternoon",
	"spring": "spring", "summer": "summer", "autumn": "autumn", "fall": "autumn", "winter": "winter",
}

func dates(ts []token) []string {
	var out []string
	for _, t := range ts {
		d, ok := dateWords[t.low]
		if !ok {
			continue
		}
		// "may" and "march" and "fall" are months or seasons only when capitalized
		// or next to a number; as verbs they are not dates.
		if (t.low == "may" || t.low == "march" || t.low == "fall") && !isCapitalized(t.orig) {
			continue
		}
		if t.low == "may" && t.first {
			continue // "May I ..."
		}
		out = append(out, d)
	}
	return out
}

func sameMultiset(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	sort.Strings(a)
	sort.Strings(b)
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func isCapitalized(s string) bool {
	for _, r := range s {
		return r >= 'A' && r <= 'Z' || (r > 127 && strings.ToUpper(string(r)) == string(r) && strings.ToLower(string(r)) != string(r))
	}
	return false
}

// entities are capitalized words that are not sentence-initial, not "I",
// not a month or weekday (checked as dates), plus all-caps acronyms and
// words with inner capitals or digits mixed with letters ("iPhone", "GPT4").
func entities(ts []token) []string {
	var out []string
	for _, t := range ts {
		if t.low == "i" || len(t.low) < 2 || stopwords[t.low] {
			continue
		}
		if _, ok := dateWords[t.low]; ok {
			continue
		}
		named := isCapitalized(t.orig) && !t.first
		if !named {
			upper := 0
			for _, r := range t.orig[1:] {
				if r >= 'A' && r <= 'Z' {
					upper++
				}
			}
			named = upper > 0
		}
		if named {
			out = append(out, t.stem)
		}
	}
	return out
}

// entityMismatch reports whether a names an entity that b does not mention
// in any case (b may be written in lower case).
func entityMismatch(a, b []token) bool {
	words := make(map[string]bool, len(b))
	for _, t := range b {
		words[t.stem] = true
		words[t.low] = true
	}
	for i := 0; i+1 < len(b); i++ { // "New York" vs "newyork" is rare; join neighbours anyway
		words[b[i].low+b[i+1].low] = true
	}
	for _, e := range entities(a) {
		if !words[e] {
			return true
		}
	}
	return false
}

var antonymPairs = [][2]string{
	{"hot", "cold"}, {"warm", "cool"}, {"increase", "decrease"}, {"rise", "fall"}, {"up", "down"},
	{"fast", "slow"}, {"faster", "slower"}, {"fastest", "slowest"}, {"big", "small"}, {"large", "small"},
	{"larger", "smaller"}, {"largest", "smallest"}, {"bigger", "smaller"}, {"biggest", "smallest"},
	{"high", "low"}, {"higher", "lower"}, {"highest", "lowest"}, {"long", "short"}, {"longer", "shorter"},
	{"longest", "shortest"}, {"old", "new"}, {"older", "newer"}, {"oldest", "newest"}, {"old", "young"},
	{"good", "bad"}, {"better", "worse"}, {"best", "worst"}, {"more", "less"}, {"more", "fewer"},
	{"most", "least"}, {"max", "min"}, {"maximum", "minimum"}, {"before", "after"}, {"early", "late"},
	{"earlier", "later"}, {"first", "last"}, {"buy", "sell"}, {"import", "export"}, {"encode", "decode"},
	{"encrypt", "decrypt"}, {"compress", "decompress"}, {"serialize", "deserialize"}, {"push", "pop"},
	{"open", "close"}, {"start", "stop"}, {"enable", "disable"}, {"add", "remove"}, {"insert", "delete"},
	{"win", "lose"}, {"gain", "lose"}, {"safe", "dangerous"}, {"safe", "unsafe"}, {"healthy", "unhealthy"},
	{"legal", "illegal"}, {"possible", "impossible"}, {"true", "false"}, {"right", "wrong"},
	{"correct", "incorrect"}, {"left", "right"}, {"north", "south"}, {"east", "west"}, {"upper", "lower"},
	{"uppercase", "lowercase"}, {"ascending", "descending"}, {"positive", "negative"}, {"heavy", "light"},
	{"wet", "dry"}, {"rich", "poor"}, {"cheap", "expensive"}, {"cheapest", "most expensive"},
	{"easy", "hard"}, {"easy", "difficult"}, {"easier", "harder"}, {"strong", "weak"}, {"stronger", "weaker"},
	{"thick", "thin"}, {"deep", "shallow"}, {"light", "dark"}, {"inside", "outside"}, {"internal", "external"},
	{"input", "output"}, {"upload", "download"}, {"send", "receive"}, {"accept", "reject"}, {"allow", "deny"},
	{"allow", "block"}, {"love", "hate"}, {"like", "dislike"}, {"agree", "disagree"}, {"above", "below"},
	{"over", "under"}, {"overestimate", "underestimate"}, {"maximize", "minimize"}, {"import", "export"},
	{"lock", "unlock"}, {"install", "uninstall"}, {"mount", "unmount"}, {"freeze", "thaw"}, {"raw", "cooked"},
	{"sweet", "sour"}, {"sweet", "salty"}, {"acid", "base"}, {"acidic", "alkaline"}, {"male", "female"},
	{"boy", "girl"}, {"men", "women"}, {"man", "woman"}, {"day", "night"}, {"sunrise", "sunset"},
	{"winter", "summer"}, {"always", "sometimes"}, {"everything", "nothing"}, {"all", "none"},
	{"synchronous", "asynchronous"}, {"sync", "async"}, {"mutable", "immutable"}, {"public", "private"},
	{"client", "server"}, {"frontend", "backend"}, {"width", "height"}, {"row", "column"}, {"rows", "columns"},
	{"horizontal", "vertical"}, {"horizontally", "vertically"}, {"odd", "even"}, {"prime", "composite"},
	{"absolute", "relative"}, {"union", "intersection"}, {"plus", "minus"}, {"add", "subtract"},
	{"multiply", "divide"}, {"sum", "product"}, {"gain", "loss"}, {"profit", "loss"}, {"benefit", "risk"},
	{"benefits", "risks"}, {"advantage", "disadvantage"}, {"advantages", "disadvantages"}, {"pros", "cons"},
	{"cause", "cure"}, {"causes", "treatment"}, {"symptom", "cure"}, {"lose", "gain"}, {"before", "during"},
	{"during", "after"}, {"enter", "exit"}, {"arrive", "depart"}, {"import", "export"}, {"import", "exports"},
	{"import", "exporter"}, {"importer", "exporter"}, {"imports", "exports"}, {"borrow", "lend"},
	{"teach", "learn"}, {"parent", "child"}, {"ancestor", "descendant"}, {"predecessor", "successor"},
	{"prefix", "suffix"}, {"head", "tail"}, {"front", "back"}, {"top", "bottom"}, {"begin", "end"},
	{"beginning", "end"}, {"start", "end"}, {"min", "max"}, {"floor", "ceiling"}, {"round up", "round down"},
}

var antonyms = map[string][]string{}

func init() {
	for _, p := range antonymPairs {
		antonyms[p[0]] = append(antonyms[p[0]], p[1])
		antonyms[p[1]] = append(antonyms[p[1]], p[0])
	}
}

// antonymMismatch reports whether one side uses a word whose antonym the
// other side uses, while the other side does not also use the word itself.
func antonymMismatch(a, b []token) bool {
	wa, wb := wordSet(a), wordSet(b)
	check := func(x, y map[string]bool) bool {
		for w := range x {
			if y[w] {
				continue
			}
			for _, o := range antonyms[w] {
				if y[o] && !x[o] {
					return true
				}
			}
		}
		return false
	}
	return check(wa, wb) || check(wb, wa)
}

func wordSet(ts []token) map[string]bool {
	m := make(map[string]bool, 2*len(ts))
	for i, t := range ts {
		m[t.low] = true
		m[t.stem] = true
		if i+1 < len(ts) {
			m[t.low+" "+ts[i+1].low] = true
		}
	}
	return m
}

var symmetric = map[string]bool{"and": true, "or": true, "vs": true, "versus": true, "with": true, "between": true, "&": true, "plus": true, "times": true}

// roleSwap reports whether two content words x, y that occur once in both
// texts change order around a shared word v that sits between them in both
// ("Alice owes Bob" / "Bob owes Alice"; "Celsius to Fahrenheit" /
// "Fahrenheit to Celsius"). Symmetric connectives (and, or, vs, with) do not
// count as v, so "TCP and UDP" / "UDP and TCP" is not a swap.
func roleSwap(a, b []token) bool {
	pa, pb := positions(a), positions(b)
	var shared []string
	for w, i := range pa {
		if j, ok := pb[w]; ok && i >= 0 && j >= 0 {
			shared = append(shared, w)
		}
	}
	sort.Strings(shared)
	content := func(ts []token, i int) bool { return isContent(ts[i]) }
	for _, x := range shared {
		if !content(a, pa[x]) {
			continue
		}
		for _, y := range shared {
			if x == y || !content(a, pa[y]) || !(pa[x] < pa[y]) || !(pb[y] < pb[x]) {
				continue
			}
			for _, v := range shared {
				if v == x || v == y || symmetric[v] {
					continue
				}
				if pa[x] < pa[v] && pa[v] < pa[y] && pb[y] < pb[v] && pb[v] < pb[x] {
					return true
				}
			}
		}
	}
	return false
}

// positions maps each stem to its index, or -1 when it occurs more than once.
func positions(ts []token) map[string]int {
	m := make(map[string]int, len(ts))
	for i, t := range ts {
		if _, dup := m[t.stem]; dup {
			m[t.stem] = -1
			continue
		}
		m[t.stem] = i
	}
	return m
}
