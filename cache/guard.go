package cache

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
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
	// GuardSubstitution: each side has one or two content words the other
	// lacks (and no synonym covers them): "area"/"circumference of a circle".
	GuardSubstitution = "substitution"
	// GuardQuestion: the questions ask for different kinds of answer
	// ("How deep is X?" / "Where is X?").
	GuardQuestion = "question"
	// GuardModifier: one side narrows a shared noun with a word the other
	// lacks ("tie" / "bow tie", "chicken" / "raw chicken").
	GuardModifier = "modifier"
)

// Guard checks a semantic candidate against the query and returns "" when the
// candidate may be served, or the reason it must not be: one of the Guard*
// constants. It looks only at surface features (no model), so it is
// conservative: a rejection costs a generation, a false hit costs a wrong
// answer. Both texts are key texts as stored (normalized, case kept).
func Guard(query, cached string) string {
	return guardTokens(tokenize(query), tokenize(cached))
}

// guardTokens is Guard on tokenized texts (the semantic tier tokenizes the
// query once per lookup and each hot entry's key once). It does not modify
// a or b.
func guardTokens(a, b []token) string {
	if countNeg(a) != countNeg(b) {
		return GuardNegation
	}
	if !sameMultiset(numbers(a), numbers(b)) {
		return GuardNumber
	}
	if !sameMultiset(dates(a), dates(b)) {
		return GuardDate
	}
	// Each side's vocabulary, made once for the rules that read it.
	va, vb := vocab(a), vocab(b)
	if entityMismatch(a, &vb) || entityMismatch(b, &va) {
		return GuardEntity
	}
	if qa, qb := questionType(a), questionType(b); qa != "" && qb != "" && qa != qb && qa != "what" && qb != "what" {
		return GuardQuestion
	}
	if antonymMismatch(a, b) {
		return GuardAntonym
	}
	if roleSwap(a, b) {
		return GuardRole
	}
	if substitution(a, b, &va, &vb) {
		return GuardSubstitution
	}
	if modifierAdded(a, b, &va) || modifierAdded(b, a, &vb) {
		return GuardModifier
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
		if isNumeric(t.stem) {
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

// named reports whether t looks like part of a name: capitalized and not
// sentence-initial (or next to another named word), not "I", not a
// function word, not a month or weekday (checked as dates); or an acronym or
// a word with inner capitals ("iPhone", "GPT").
func named(ts []token, i int) bool {
	t := ts[i]
	if t.low == "i" || len(t.low) < 2 || t.stop {
		return false
	}
	if _, ok := dateWords[t.low]; ok {
		return false
	}
	for _, r := range t.orig[1:] {
		if r >= 'A' && r <= 'Z' {
			return true
		}
	}
	if !isCapitalized(t.orig) {
		return false
	}
	if !t.first {
		return true
	}
	// Sentence-initial: a name only when the next word is one too ("New York").
	return i+1 < len(ts) && isCapitalized(ts[i+1].orig) && !ts[i+1].first && !ts[i+1].stop
}

// entityRuns groups consecutive named words ("United States", "Mount Everest").
func entityRuns(ts []token) [][]token {
	// Each run is a subslice of ts (capacity cut at its end: callers only
	// read runs), not a copy.
	var runs [][]token
	start := -1
	for i := range ts {
		if named(ts, i) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			runs = append(runs, ts[start:i:i])
			start = -1
		}
	}
	if start >= 0 {
		runs = append(runs, ts[start:len(ts):len(ts)])
	}
	return runs
}

func initials(run []token) string {
	var b strings.Builder
	for _, t := range run {
		b.WriteString(t.low[:1])
	}
	return b.String()
}

// vocabSet is the set of lower-cased words and stems of a text, with the
// initials of its capitalized runs ("United States" → "us"), and the
// indexes that mentions and isAcronymOf make from it on first use, so that
// each lookup costs O(1) whatever the text's length (the key text is
// untrusted).
type vocabSet struct {
	words map[string]bool
	ts    []token
	// ext holds each word's prefixes 1 to 3 bytes shorter and at least 4
	// bytes long (mentions of a longer form); made by mentions.
	ext map[string]bool
	// acr holds the initials of each run of 2 to 5 words of ts, packed by
	// acrKey; made by isAcronymOf.
	acr map[uint64]bool
}

// vocab returns the vocabulary of ts.
func vocab(ts []token) vocabSet {
	m := make(map[string]bool, 2*len(ts))
	for _, t := range ts {
		m[t.low] = true
		m[t.stem] = true
	}
	for _, r := range entityRuns(ts) {
		if len(r) > 1 {
			m[initials(r)] = true
		}
	}
	step(len(ts))
	return vocabSet{words: m, ts: ts}
}

// guardSteps, when not nil, counts the inner steps of the guard's rules that
// compare one text with the other (a test hook: tests bound the guard's
// work on untrusted keys with it). It is nil outside tests and never set
// while a guard runs.
var guardSteps *int

func step(n int) {
	if guardSteps != nil {
		*guardSteps += n
	}
}

// mentions reports whether word w (lower case) appears in v, directly or
// with a short suffix on either side ("africa"/"african",
// "canada"/"canadian"): some word x of v and w are such that the shorter is
// a prefix of the longer, the shorter has at least 4 bytes and the longer at
// most 3 more.
func mentions(v *vocabSet, w string) bool {
	step(1)
	if v.words[w] {
		return true
	}
	// x shorter than w: a prefix of w.
	for n := max(4, len(w)-3); n < len(w); n++ {
		step(1)
		if v.words[w[:n]] {
			return true
		}
	}
	if len(w) < 4 {
		return false
	}
	// x longer than w: w is one of x's prefixes in ext.
	if v.ext == nil {
		v.ext = make(map[string]bool, len(v.words))
		for x := range v.words {
			for n := max(4, len(x)-3); n < len(x); n++ {
				step(1)
				v.ext[x[:n]] = true
			}
		}
	}
	return v.ext[w]
}

// entityMismatch reports whether a names an entity that b does not mention
// in any case (b may be written in lower case). A multi-word name is also
// mentioned by its initials ("United States" / "US"). vb is vocab(b).
func entityMismatch(a []token, vb *vocabSet) bool {
	for _, run := range entityRuns(a) {
		if len(run) > 1 && vb.words[initials(run)] {
			continue
		}
		for _, t := range run {
			if !mentions(vb, t.low) && !mentions(vb, t.stem) && !(len(t.low) <= 5 && isAcronymOf(t, vb)) {
				return true
			}
		}
	}
	return false
}

// isAcronymOf reports whether an all-caps t of at most 5 bytes spells the
// initials (first bytes) of a run of words of vb's text ("US" and "united
// states").
func isAcronymOf(t token, vb *vocabSet) bool {
	step(1)
	if strings.ToUpper(t.orig) != t.orig || len(t.low) < 2 || len(t.low) > 5 {
		return false
	}
	if vb.acr == nil {
		vb.acr = make(map[uint64]bool, 4*len(vb.ts))
		for i := range vb.ts {
			var k uint64
			for n := 1; n <= 5 && i+n <= len(vb.ts); n++ {
				step(1)
				k |= uint64(vb.ts[i+n-1].low[0]) << (8 * (n - 1))
				if n >= 2 {
					vb.acr[k|uint64(n)<<56] = true
				}
			}
		}
	}
	return vb.acr[acrKey(t.low)]
}

// acrKey packs a string of 2 to 5 bytes and its length into a uint64.
func acrKey(s string) uint64 {
	var k uint64
	for i := 0; i < len(s); i++ {
		k |= uint64(s[i]) << (8 * i)
	}
	return k | uint64(len(s))<<56
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

// moreAntonyms are further common opposites, including irregular forms.
var moreAntonyms = [][2]string{
	{"exothermic", "endothermic"}, {"hard", "soft"}, {"thicken", "thin"}, {"raise", "lower"},
	{"float", "sink"}, {"heat", "cool"}, {"heat", "chill"}, {"least", "greatest"}, {"greatest", "smallest"},
	{"expand", "contract"}, {"attack", "defend"}, {"arrive", "leave"}, {"come", "go"}, {"give", "take"},
	{"inhale", "exhale"}, {"ascend", "descend"}, {"include", "exclude"}, {"accept", "decline"},
	{"succeed", "fail"}, {"pass", "fail"}, {"visible", "invisible"}, {"wide", "narrow"}, {"loud", "quiet"},
	{"full", "empty"}, {"clean", "dirty"}, {"tight", "loose"}, {"sharp", "dull"}, {"fresh", "stale"},
	{"urban", "rural"}, {"domestic", "international"}, {"attract", "repel"}, {"push", "pull"},
	{"on", "off"}, {"won", "lost"}, {"rose", "fell"}, {"bought", "sold"}, {"sent", "received"},
	{"gave", "took"}, {"came", "went"}, {"arrival", "departure"}, {"import", "export"}, {"win", "lose"},
	{"winner", "loser"}, {"victory", "defeat"}, {"rise", "decline"}, {"grow", "shrink"},
	{"increase", "reduce"}, {"increase", "lower"}, {"boost", "reduce"}, {"speed", "slow"},
	{"tighten", "loosen"}, {"widen", "narrow"}, {"lengthen", "shorten"}, {"strengthen", "weaken"},
	{"brighten", "dim"}, {"warm", "chill"}, {"shallow", "deep"}, {"dense", "sparse"},
	{"concave", "convex"}, {"natural", "artificial"}, {"organic", "inorganic"}, {"major", "minor"},
	{"majority", "minority"}, {"inbound", "outbound"}, {"incoming", "outgoing"}, {"ingress", "egress"},
	{"read", "write"}, {"reader", "writer"}, {"producer", "consumer"}, {"sender", "receiver"},
	{"buyer", "seller"}, {"lender", "borrower"}, {"employer", "employee"}, {"teacher", "student"},
	{"predator", "prey"}, {"host", "guest"}, {"master", "slave"}, {"primary", "secondary"},
	{"forward", "backward"}, {"forwards", "backwards"}, {"past", "future"}, {"previous", "next"},
	{"ancient", "modern"}, {"vertical", "horizontal"}, {"senior", "junior"}, {"adult", "child"},
	{"optimistic", "pessimistic"}, {"happy", "sad"}, {"calm", "anxious"}, {"able", "unable"},
	{"likely", "unlikely"}, {"lawful", "unlawful"}, {"valid", "invalid"}, {"known", "unknown"},
}

var antonyms = map[string][]string{}

func addAntonym(x, y string) {
	if x == y {
		return
	}
	for _, o := range antonyms[x] {
		if o == y {
			return
		}
	}
	antonyms[x] = append(antonyms[x], y)
	antonyms[y] = append(antonyms[y], x)
}

// inflect returns simple English inflections of a one-word base: plural or
// third person, past, gerund, comparative and superlative ("hot" → "hotter",
// "easy" → "easier"). Over-generation is harmless: a form that is not a word
// never appears in a text.
func inflect(w string) []string {
	if strings.ContainsRune(w, ' ') || len(w) < 2 {
		return nil
	}
	out := []string{w}
	base := w
	last := w[len(w)-1]
	vowel := func(c byte) bool { return strings.IndexByte("aeiou", c) >= 0 }
	switch {
	case last == 'e':
		base = w[:len(w)-1]
		out = append(out, w+"s", w+"d", base+"ing", w+"r", w+"st")
	case last == 'y' && len(w) > 2 && !vowel(w[len(w)-2]):
		b := w[:len(w)-1]
		out = append(out, b+"ies", b+"ied", w+"ing", b+"ier", b+"iest")
	default:
		d := w
		if len(w) >= 3 && !vowel(last) && vowel(w[len(w)-2]) && !vowel(w[len(w)-3]) && strings.IndexByte("wxy", last) < 0 {
			d = w + string(last) // hot → hott-er, stop → stopp-ed
		}
		out = append(out, w+"s", w+"es", w+"ed", d+"ed", w+"ing", d+"ing", w+"er", d+"er", w+"est", d+"est")
	}
	return out
}

func init() {
	for _, list := range [][][2]string{antonymPairs, moreAntonyms} {
		for _, p := range list {
			addAntonym(p[0], p[1])
			ix, iy := inflect(p[0]), inflect(p[1])
			// pair forms of the same slot: index k of both inflection lists
			// are the same grammatical form when both bases inflect alike;
			// otherwise pair every form (still only opposite meanings).
			for _, fx := range ix {
				for _, fy := range iy {
					addAntonym(fx, fy)
				}
			}
		}
	}
}

// synonymGroups are words that paraphrases swap freely; the substitution
// check treats members of one group as the same word.
var synonymGroups = [][]string{
	{"fix", "repair", "solve", "resolve"}, {"car", "automobile", "vehicle"}, {"kid", "child"},
	{"buy", "purchase"}, {"begin", "start", "commence"}, {"big", "large", "huge"},
	{"small", "little", "tiny"}, {"quick", "fast", "rapid", "quickly", "fast"},
	{"color", "colour"}, {"center", "centre"}, {"holiday", "vacation", "trip"}, {"tyre", "tire"},
	{"remove", "delete", "erase", "rid", "eliminate"}, {"create", "make", "build", "generate"},
	{"show", "display", "print"}, {"error", "exception"}, {"method", "way", "approach", "technique"},
	{"pick", "choose", "select"}, {"cost", "price"}, {"job", "work"}, {"begin", "commence"},
	{"stop", "halt", "prevent", "avoid"}, {"happen", "occur"}, {"cause", "reason", "why", "make"},
	{"meaning", "mean", "definition", "define"}, {"explain", "describe"}, {"compute", "calculate", "find", "determine", "get"},
	{"speak", "talk", "language", "spoken"}, {"live", "population", "reside", "people", "inhabitant"},
	{"use", "utilize", "employ"}, {"need", "require", "must", "necessary"}, {"allow", "permit", "let"},
	{"write", "author", "wrote", "written"}, {"invent", "create", "invented"}, {"substitute", "replace", "instead", "alternative"},
	{"bake", "roast", "cook"}, {"frying", "fry"}, {"quickly", "fast", "rapidly"}, {"slowly", "slow"},
	{"sum", "add", "total"}, {"odd", "chance", "probability", "likelihood"}, {"composed", "made", "consist"},
	{"locate", "located", "where"}, {"lot", "high", "rich", "plenty", "many", "much"}, {"contain", "have", "has"},
	{"keep", "store", "last"}, {"colour", "color"}, {"fall", "autumn"}, {"depth", "deep"},
	{"distance", "far"}, {"tall", "height", "high"}, {"long", "length"}, {"old", "age"}, {"fast", "speed"},
	{"wide", "width"}, {"big", "size"}, {"heavy", "weight"}, {"early", "earlier"}, {"teach", "train"},
	{"frequently", "often"}, {"arrive", "get"}, {"safely", "safe"}, {"home", "homemade", "own"},
	{"easy", "simple"}, {"great", "good"}, {"necktie", "tie"}, {"stovetop", "stove"},
	{"medicine", "medication", "drug"}, {"issue", "problem"}, {"clear", "empty"}, {"author", "writer"},
	{"builder", "built", "build"}, {"form", "plural"},
	{"disk", "storage", "drive", "space"}, {"laptop", "computer", "pc"}, {"phone", "smartphone", "mobile"},
}

// synonyms maps a word or stem to the groups it belongs to.
var synonyms = map[string][]int{}

func init() {
	if len(synonymGroups) > maxSynonymGroups {
		panic("cache: more synonym groups than a groupSet holds")
	}
	for i, g := range synonymGroups {
		for _, w := range g {
			for _, f := range []string{w, stem(w)} {
				if n := len(synonyms[f]); n == 0 || synonyms[f][n-1] != i {
					synonyms[f] = append(synonyms[f], i)
				}
			}
		}
	}
}

// antonymMismatch reports whether one side uses a word whose antonym the
// other side uses, while the other side does not also use the word itself.
func antonymMismatch(a, b []token) bool {
	var ba, bb [16]string
	wa, wb := antonymWords(ba[:0], a), antonymWords(bb[:0], b)
	// Sorted, each word once, so that membership is a binary search and
	// each distinct word is checked once (the texts are untrusted: a
	// linear search per word was quadratic).
	wa, wb = sortedSet(wa), sortedSet(wb)
	has := func(s []string, w string) bool {
		step(1 + bits.Len(uint(len(s))))
		_, ok := slices.BinarySearch(s, w)
		return ok
	}
	check := func(x, y []string) bool {
		for _, w := range x {
			if has(y, w) {
				continue
			}
			for _, o := range antonyms[w] {
				if has(y, o) && !has(x, o) {
					return true
				}
			}
		}
		return false
	}
	return check(wa, wb) || check(wb, wa)
}

// sortedSet sorts s and removes repeats, in place.
func sortedSet(s []string) []string {
	slices.SortFunc(s, func(x, y string) int {
		step(1)
		return strings.Compare(x, y)
	})
	return slices.Compact(s)
}

// antonymWords appends to dst the words of ts (lower case, stems, and
// "word word" bigrams) that have an antonym. The others cannot change
// antonymMismatch's answer (every antonym of a word has an antonym too), so
// they are left out.
func antonymWords(dst []string, ts []token) []string {
	var buf [64]byte
	for i, t := range ts {
		if antonyms[t.low] != nil {
			dst = append(dst, t.low)
		}
		if antonyms[t.stem] != nil {
			dst = append(dst, t.stem)
		}
		if i+1 < len(ts) {
			bg := append(append(append(buf[:0], t.low...), ' '), ts[i+1].low...)
			if antonyms[string(bg)] != nil {
				dst = append(dst, string(bg))
			}
		}
	}
	return dst
}

// substitution reports whether each side has content words that the other
// lacks, at most two each, none matched by a synonym or a shared prefix:
// the shape of "same question about a different thing" ("rice"/"quinoa",
// "area"/"circumference"). Additions on one side only ("please", "in
// Python") are not substitutions.
func substitution(a, b []token, va, vb *vocabSet) bool {
	da, db := onlyIn(a, vb), onlyIn(b, va)
	if len(da) == 0 || len(db) == 0 || len(da) > 2 || len(db) > 2 {
		return false
	}
	for _, x := range da {
		for _, y := range db {
			for _, gx := range synonyms[x] {
				for _, gy := range synonyms[y] {
					if gx == gy {
						return false
					}
				}
			}
		}
	}
	return true
}

// modifierAdded reports whether b puts a content word m, absent from a (also
// as a synonym), right before a content word n that a has without any
// content word before it. va is vocab(a).
func modifierAdded(a, b []token, va *vocabSet) bool {
	bare := map[string]bool{}
	for i, t := range a {
		if isContent(t) && (i == 0 || !isContent(a[i-1])) {
			bare[t.stem] = true
		}
	}
	var ga groupSet // the synonym groups of a's stems, made on first use
	gaMade := false
	for i := 0; i+1 < len(b); i++ {
		step(1)
		m, n := b[i], b[i+1]
		if !isContent(m) || !isContent(n) || isNumeric(m.stem) || !bare[n.stem] || mentions(va, m.low) || mentions(va, m.stem) {
			continue
		}
		if !gaMade {
			ga, gaMade = synonymGroupsOf(a), true
		}
		if ga.hasSynonym(m.stem) || ga.hasSynonym(m.low) {
			continue
		}
		return true
	}
	return false
}

// groupSet is a set of synonym groups (indexes into synonymGroups).
type groupSet [(maxSynonymGroups + 63) / 64]uint64

const maxSynonymGroups = 256

// synonymGroupsOf returns the groups of the stems of ts.
func synonymGroupsOf(ts []token) groupSet {
	var s groupSet
	for _, t := range ts {
		step(1)
		for _, g := range synonyms[t.stem] {
			s[g/64] |= 1 << (g % 64)
		}
	}
	return s
}

// hasSynonym reports whether w is in one of the groups of s (a synonym of,
// or the same word as, a word of the text s was made from).
func (s *groupSet) hasSynonym(w string) bool {
	for _, g := range synonyms[w] {
		if s[g/64]&(1<<(g%64)) != 0 {
			return true
		}
	}
	return false
}

// onlyIn returns the content stems of a that b does not mention (vb is
// vocab(b)).
func onlyIn(a []token, vb *vocabSet) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range a {
		step(1)
		if !isContent(t) || isNumeric(t.stem) || len(t.stem) < 2 || seen[t.stem] {
			continue
		}
		seen[t.stem] = true
		if !mentions(vb, t.low) && !mentions(vb, t.stem) {
			out = append(out, t.stem)
		}
	}
	return out
}

var measureWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields("many much long often frequently early late soon fast far deep tall big old high heavy large hot cold wide small short cheap expensive") {
		measureWords[w] = true
	}
}

var auxiliaries = map[string]bool{}

func init() {
	for _, w := range strings.Fields("is are was were am can could do does did should would will shall has have had may might must") {
		auxiliaries[w] = true
	}
}

// questionType classifies what kind of answer a text asks for, from its
// first question word: "what" (what/which, compatible with every type),
// "who", "when", "where", "why", "measure" (how many/much/long/far...),
// "how" (manner), "yesno" (starts with an auxiliary), or "" (unknown).
func questionType(ts []token) string {
	for i, t := range ts {
		switch t.low {
		case "what", "which":
			return "what"
		case "who", "whom", "whose":
			return "who"
		case "when":
			return "when"
		case "where":
			return "where"
		case "why":
			return "why"
		case "how":
			if i+1 < len(ts) && measureWords[ts[i+1].low] {
				return "measure"
			}
			return "how"
		}
	}
	if len(ts) > 0 && auxiliaries[ts[0].low] {
		return "yesno"
	}
	return ""
}

// symmetricPredicates make the order of their arguments irrelevant
// ("connect A to B" = "connect B to A").
var symmetricPredicates = map[string]bool{}

func init() {
	for _, w := range strings.Fields("connect connection compare comparison combine mix pair link join match sync similar same equal differ difference marry married meet swap exchange distance") {
		symmetricPredicates[stem(w)] = true
	}
}

var symmetric = map[string]bool{"and": true, "or": true, "vs": true, "versus": true, "with": true, "between": true, "&": true, "plus": true, "times": true}

// roleSwap reports whether two content words x, y that occur once in both
// texts change order around a shared word v that sits between them in both
// ("Alice owes Bob" / "Bob owes Alice"; "Celsius to Fahrenheit" /
// "Fahrenheit to Celsius"). Symmetric connectives (and, or, vs, with) do not
// count as v, so "TCP and UDP" / "UDP and TCP" is not a swap.
func roleSwap(a, b []token) bool { return roleSwapSteps(a, b, guardSteps) }

// roleSwapSteps is roleSwap; when steps is not nil it counts the inner steps
// (comparisons of the stem sorts and binary searches, and the passes over
// the shared words) so that tests can bound the work on untrusted text. The
// work is O(n log n) in the number of tokens (the key text is untrusted: the
// pairwise search over x, y and v it replaces was cubic).
func roleSwapSteps(a, b []token, steps *int) bool {
	for _, ts := range [][]token{a, b} {
		for _, t := range ts {
			if symmetricPredicates[t.stem] {
				return false
			}
		}
	}
	// Each side's token indices sorted by (stem, index): the occurrences of
	// one stem are a run, in text order.
	var bufA, bufB, bufOcc [64]int32
	oa, ob := stemOrder(bufA[:0], a, steps), stemOrder(bufB[:0], b, steps)
	// occA[i] = occurrence(a, i): how many tokens before a[i] have its stem.
	occA := bufOcc[:0]
	if len(a) > len(bufOcc) {
		occA = make([]int32, len(a))
	} else {
		occA = occA[:len(a)]
	}
	for k, i := range oa {
		if k > 0 && a[oa[k-1]].stem == a[i].stem {
			occA[i] = occA[oa[k-1]] + 1
		} else {
			occA[i] = 0
		}
	}
	// Each word occurrence of a that b has too (the same stem and
	// occurrence number), with its index in both, in a's order.
	type occ struct {
		ia, ib  int
		pivot   bool // may be the v between x and y
		content bool // isContent in a
	}
	var buf [32]occ
	shared := buf[:0]
	for i, t := range a {
		if steps != nil {
			*steps++
		}
		k := stemLowerBound(ob, b, t.stem, steps) + int(occA[i])
		if k >= len(ob) || b[ob[k]].stem != t.stem {
			continue
		}
		// v must be a word occurring once in each text and not a symmetric
		// connective. (The stem before any '#': an ordinal's stem is "#12",
		// whose base is "" and which this check then lets through.)
		base, _, _ := strings.Cut(t.stem, "#")
		pivot := occA[i] == 0 && !symmetric[base] && stemCount(oa, a, base, steps) < 2 && stemCount(ob, b, base, steps) < 2
		shared = append(shared, occ{ia: i, ib: int(ob[k]), pivot: pivot, content: isContent(t)})
	}
	// v = shared[k] sits between some x before it in a and some y after it
	// in a, with y before v before x in b, iff a content word before k in
	// a comes after v in b (the largest ib of the content words before k
	// exceeds v.ib) and a content word after k comes before v in b (the
	// smallest ib of the content words after k is below v.ib). x and y then
	// are content words and in opposite orders in a and b, as required.
	var bufMin [32]int
	minAfter := bufMin[:0]
	if len(shared) > len(bufMin) {
		minAfter = make([]int, len(shared))
	} else {
		minAfter = minAfter[:len(shared)]
	}
	m := math.MaxInt
	for k := len(shared) - 1; k >= 0; k-- {
		if steps != nil {
			*steps++
		}
		minAfter[k] = m
		if shared[k].content {
			m = min(m, shared[k].ib)
		}
	}
	maxBefore := -1
	for k, v := range shared {
		if steps != nil {
			*steps++
		}
		if v.pivot && maxBefore > v.ib && minAfter[k] < v.ib {
			return true
		}
		if v.content {
			maxBefore = max(maxBefore, v.ib)
		}
	}
	return false
}

// stemOrder appends to dst the indices of ts sorted by (stem, index).
func stemOrder(dst []int32, ts []token, steps *int) []int32 {
	for i := range ts {
		dst = append(dst, int32(i))
	}
	slices.SortFunc(dst, func(i, j int32) int {
		if steps != nil {
			*steps++
		}
		if c := strings.Compare(ts[i].stem, ts[j].stem); c != 0 {
			return c
		}
		return cmp.Compare(i, j)
	})
	return dst
}

// stemLowerBound is the first position in ord (stemOrder of ts) whose token
// has a stem not below stem.
func stemLowerBound(ord []int32, ts []token, stem string, steps *int) int {
	lo, hi := 0, len(ord)
	for lo < hi {
		if steps != nil {
			*steps++
		}
		mid := int(uint(lo+hi) >> 1)
		if ts[ord[mid]].stem < stem {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// stemCount is how many tokens of ts have stem stem, counted up to 2.
func stemCount(ord []int32, ts []token, stem string, steps *int) int {
	k := stemLowerBound(ord, ts, stem, steps)
	n := 0
	for ; n < 2 && k+n < len(ord) && ts[ord[k+n]].stem == stem; n++ {
	}
	return n
}
