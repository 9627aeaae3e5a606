package cache

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// roleSwapRef is roleSwap as it was before it became O(n log n) (the
// pairwise search over x, y and v, cubic in the text length), kept as the
// reference of the differential tests.
func roleSwapRef(a, b []token) bool {
	for _, ts := range [][]token{a, b} {
		for _, t := range ts {
			if symmetricPredicates[t.stem] {
				return false
			}
		}
	}
	type occ struct {
		stem    string
		ia, ib  int
		pivot   bool
		content bool
	}
	var shared []occ
	for i, t := range a {
		n := occurrenceRef(a, i)
		if j := nthOccurrenceRef(b, t.stem, n); j >= 0 {
			shared = append(shared, occ{stem: t.stem, ia: i, ib: j})
		}
	}
	for k := range shared {
		v := &shared[k]
		base, _, _ := strings.Cut(v.stem, "#")
		v.pivot = occurrenceRef(a, v.ia) == 0 && !symmetric[base] && nthOccurrenceRef(a, base, 1) < 0 && nthOccurrenceRef(b, base, 1) < 0
		v.content = isContent(a[v.ia])
	}
	for xi, x := range shared {
		if !x.content {
			continue
		}
		for yi, y := range shared {
			if xi == yi || !y.content || !(x.ia < y.ia) || !(y.ib < x.ib) {
				continue
			}
			for vi, v := range shared {
				if vi == xi || vi == yi || !v.pivot {
					continue
				}
				if x.ia < v.ia && v.ia < y.ia && y.ib < v.ib && v.ib < x.ib {
					return true
				}
			}
		}
	}
	return false
}

func occurrenceRef(ts []token, i int) int {
	n := 0
	for _, t := range ts[:i] {
		if t.stem == ts[i].stem {
			n++
		}
	}
	return n
}

func nthOccurrenceRef(ts []token, stem string, n int) int {
	for i, t := range ts {
		if t.stem == stem {
			if n == 0 {
				return i
			}
			n--
		}
	}
	return -1
}

// guardWords is the vocabulary of the random texts: content words, function
// words, negations, symmetric connectives and predicates, ordinals and
// numbers (an ordinal's stem "#3" has the base "" in roleSwap), words that
// stem alike ("owes"/"owe").
var guardWords = strings.Fields(`Alice Bob Carol owes owe pays pay loves convert Celsius Fahrenheit to from
the a of in is and or with vs between compare not never first third 3rd 12th 7 two dog cat older than
if live kill killed rice quinoa cook`)

func randomText(r *rand.Rand, maxWords int) string {
	n := r.IntN(maxWords + 1)
	ws := make([]string, n)
	for i := range ws {
		ws[i] = guardWords[r.IntN(len(guardWords))]
	}
	return strings.Join(ws, " ")
}

// permuted returns the words of s in a random order, with some words
// dropped or added, so that many pairs share most words (role swaps are
// likely).
func permuted(r *rand.Rand, s string) string {
	ws := strings.Fields(s)
	r.Shuffle(len(ws), func(i, j int) {
		if r.IntN(3) == 0 {
			ws[i], ws[j] = ws[j], ws[i]
		}
	})
	if len(ws) > 0 && r.IntN(4) == 0 {
		ws = append(ws[:r.IntN(len(ws))], ws[r.IntN(len(ws)):]...)
	}
	if r.IntN(4) == 0 {
		ws = append(ws, guardWords[r.IntN(len(guardWords))])
	}
	return strings.Join(ws, " ")
}

func TestRoleSwapMatchesReference(t *testing.T) {
	n := 200000
	if testing.Short() {
		n = 30000
	}
	r := rand.New(rand.NewPCG(1, 2))
	swaps := 0
	for i := 0; i < n; i++ {
		qa := randomText(r, 3+i%100)
		qb := permuted(r, qa)
		if i%5 == 0 {
			qb = randomText(r, 3+i%100)
		}
		a, b := tokenize(qa), tokenize(qb)
		want := roleSwapRef(a, b)
		if got := roleSwap(a, b); got != want {
			t.Fatalf("roleSwap(%q, %q) = %v, reference %v", qa, qb, got, want)
		}
		if want {
			swaps++
		}
	}
	// The test must exercise both answers.
	if swaps < n/20 || swaps > n-n/20 {
		t.Fatalf("%d role swaps in %d pairs: the generator does not exercise roleSwap", swaps, n)
	}
	t.Logf("%d pairs, %d role swaps, 0 disagreements", n, swaps)
}

// TestRoleSwapCases are hand-checked: the pivot must occur once in each
// text, x and y must be content words in opposite orders around it.
func TestRoleSwapCases(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"Alice owes Bob", "Bob owes Alice", true},
		{"convert Celsius to Fahrenheit", "convert Fahrenheit to Celsius", true},
		{"Alice owes Bob", "Alice owes Bob", false},
		{"Alice and Bob", "Bob and Alice", false},               // symmetric connective
		{"compare Alice to Bob", "compare Bob to Alice", false}, // symmetric predicate
		{"Alice owes owes Bob", "Bob owes owes Alice", false},   // v twice in each
		{"Alice owes Bob owes", "Bob owes Alice", false},        // v twice in a
		{"Alice Bob owes", "Bob Alice owes", false},             // nothing between
		{"the owes a", "a owes the", false},                     // x, y not content
		{"Alice the Bob", "Bob the Alice", true},                // v may be a function word
		{"Alice first Bob", "Bob first Alice", true},            // ordinal pivot: base "" absent
		{"Alice Carol owes Bob", "Bob owes Carol Alice", true},  // x=Alice, y=Bob, v=owes
		{"Alice owes Bob Carol", "Carol Alice owes Bob", false}, // Carol moved, no word between it and a swapped one
		{"Alice owes Bob Carol pays", "Bob Carol pays owes Alice", true},
	}
	for _, c := range cases {
		a, b := tokenize(c.a), tokenize(c.b)
		if got := roleSwap(a, b); got != c.want {
			t.Errorf("roleSwap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if ref := roleSwapRef(a, b); ref != c.want {
			t.Errorf("reference roleSwap(%q, %q) = %v, want %v", c.a, c.b, ref, c.want)
		}
	}
}

func TestRoleSwapWorkBound(t *testing.T) {
	for _, size := range []int{2 << 10, 9 << 10, 32 << 10} {
		qa, qb := adversarialHalves(size)
		a, b := tokenize(qa), tokenize(qb)
		steps := 0
		if roleSwapSteps(a, b, &steps) {
			t.Fatalf("%d bytes: role swap in halves of distinct words", size)
		}
		n := len(a) + len(b)
		// Two sorts (n log n comparisons), three binary searches per token
		// of a, two passes over the shared words: within 4 n log2 n.
		bound := 4 * n * bits.Len(uint(n))
		if steps > bound {
			t.Errorf("%d bytes, %d tokens: %d steps, bound %d", size, n, steps, bound)
		}
		t.Logf("%d bytes, %d tokens: %d steps (bound %d; the cubic search had ~%d)", len(qa), n, steps, bound, len(a)*len(a)*len(a)/4)
		if size == 2<<10 && roleSwapRef(a, b) {
			t.Fatalf("reference: role swap in halves of distinct words")
		}
	}
}

// BenchmarkRoleSwapHalves times roleSwap (new) and roleSwapRef (old,
// cubic; only up to 9.4 KB) and the whole guard on the halves-swapped
// adversarial pair.
func BenchmarkRoleSwapHalves(b *testing.B) {
	for _, size := range []int{2200, 4600, 9400, 32 << 10} {
		qa, qb := adversarialHalves(size)
		ta, tb := tokenize(qa), tokenize(qb)
		b.Run(fmt.Sprintf("new/%dB", size), func(b *testing.B) {
			for b.Loop() {
				roleSwap(ta, tb)
			}
		})
		if size <= 9400 {
			b.Run(fmt.Sprintf("old/%dB", size), func(b *testing.B) {
				for b.Loop() {
					roleSwapRef(ta, tb)
				}
			})
		}
		b.Run(fmt.Sprintf("guard/%dB", size), func(b *testing.B) {
			for b.Loop() {
				guardTokens(ta, tb)
			}
		})
	}
}

// FuzzGuard feeds the guard untrusted pairs: it must not panic, a text
// must pass against itself, and roleSwap must agree with the reference
// (on pairs short enough for the cubic reference).
func FuzzGuard(f *testing.F) {
	f.Add("Does Alice owe Bob money?", "Does Bob owe Alice money?")
	f.Add("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?")
	f.Add("What is the difference between TCP and UDP?", "What is the difference between UDP and TCP?")
	f.Add("Who was the first US president?", "Who was the first president of the United States?")
	f.Add("How do I tie a tie?", "How do I tie a bow tie?")
	f.Add("Which is the hottest city in Europe?", "Which is the coldest city in Europe?")
	f.Add("the 3rd and the first", "first the 3rd the")
	f.Add("\xff\xfe Ünïcödé 東京 isn't won't O'Brien 3.14 1,000", "東京 \xff Ünïcödé O’Brien 1,000 3.14")
	f.Fuzz(func(t *testing.T, q, c string) {
		if len(q) > 4096 || len(c) > 4096 {
			return
		}
		a, b := tokenize(q), tokenize(c)
		for _, tk := range a {
			if !utf8.ValidString(tk.low) || !utf8.ValidString(tk.stem) {
				t.Fatalf("tokenize(%q): token %q/%q is not valid UTF-8", q, tk.low, tk.stem)
			}
		}
		_ = guardTokens(a, b)
		if why := guardTokens(a, a); why != "" {
			t.Fatalf("Guard(%q, itself) = %q", q, why)
		}
		if len(a) <= 200 && len(b) <= 200 {
			if got, want := roleSwap(a, b), roleSwapRef(a, b); got != want {
				t.Fatalf("roleSwap(%q, %q) = %v, reference %v", q, c, got, want)
			}
			if got, want := guardTokens(a, b), guardTokensRef(a, b); got != want {
				t.Fatalf("Guard(%q, %q) = %q, reference %q", q, c, got, want)
			}
		}
	})
}

// guardVocab: entities and their lower-case, longer and shorter forms
// (mentions' prefix rule), acronyms and expansions, antonyms, synonyms,
// modifiers and bare nouns, question words, negations, numbers, dates.
var guardVocab = strings.Fields(`Alice Bob Paris London France French Africa African Canada Canadian
africa canada paris Austria Australia Kenya Kenyans Nairobi United States US USA united states
NASA national aeronautics space administration UN united nations EU european union IBM AB CD
alpha beta charlie delta ABC ABCD abcd Abcdef abcdefg abcdefgh hot cold hotter colder up down
increase decrease buy sell fix repair solve car automobile vehicle tie bow raw chicken cook rice
quinoa the a of in on to and or with is are how what where who deep far not never 7 8 May Monday
today big large small café caféx 東京 東京都 \xff`)

var antonymBearing = strings.Fields("hot cold hotter colder up down increase decrease buy sell big small")

func guardText(r *rand.Rand, maxWords int) string {
	n := 1 + r.IntN(maxWords)
	ws := make([]string, n)
	for i := range ws {
		ws[i] = guardVocab[r.IntN(len(guardVocab))]
	}
	return strings.Join(ws, " ")
}

func TestGuardMatchesReference(t *testing.T) {
	n := 100000
	if testing.Short() {
		n = 20000
	}
	r := rand.New(rand.NewPCG(3, 4))
	reasons := map[string]int{}
	for i := 0; i < n; i++ {
		qa := guardText(r, 2+i%30)
		qb := permuted(r, qa)
		switch i % 4 {
		case 0:
			qb = guardText(r, 2+i%30)
		case 1:
			qb = permuted(r, qa) + " " + guardText(r, 3)
		case 2: // one word replaced by a word that has antonyms
			ws := strings.Fields(qb)
			ws[r.IntN(len(ws))] = antonymBearing[r.IntN(len(antonymBearing))]
			qb = strings.Join(ws, " ")
		}
		a, b := tokenize(qa), tokenize(qb)
		want := guardTokensRef(a, b)
		if got := guardTokens(a, b); got != want {
			t.Fatalf("Guard(%q, %q) = %q, reference %q", qa, qb, got, want)
		}
		reasons[want]++
	}
	// Every rule must decide some pairs, and some pairs must be served.
	for _, why := range []string{"", GuardNegation, GuardNumber, GuardDate, GuardEntity, GuardQuestion, GuardAntonym, GuardRole, GuardSubstitution, GuardModifier} {
		if reasons[why] < n/1000 {
			t.Errorf("reason %q: %d of %d pairs: the generator does not exercise it", why, reasons[why], n)
		}
	}
	t.Logf("%d pairs, 0 disagreements: %v", n, reasons)
}

// TestMentionsMatchesReference compares mentions with the reference on
// words around the 4-byte and 3-byte limits of the prefix rule.
func TestMentionsMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	word := func() string {
		b := make([]byte, 1+r.IntN(9))
		for i := range b {
			b[i] = "abé"[r.IntN(3)] // é's bytes too: prefixes may cut a rune
		}
		return string(b)
	}
	for i := 0; i < 20000; i++ {
		words := map[string]bool{}
		for range r.IntN(12) {
			words[word()] = true
		}
		v := &vocabSet{words: words}
		for range 8 {
			w := word()
			if got, want := mentions(v, w), mentionsRef(words, w); got != want {
				t.Fatalf("mentions(%v, %q) = %v, reference %v", words, w, got, want)
			}
		}
	}
}

// TestGuardWorkBound bounds the guard's steps (guardSteps) on adversarial
// 32 KiB key pairs, one per rule that compared every word of one text with
// every word of the other, both ways round.
func TestGuardWorkBound(t *testing.T) {
	for _, p := range advPairs {
		for _, size := range []int{2 << 10, 32 << 10} {
			qa, qb := p.gen(size)
			a, b := tokenize(qa), tokenize(qb)
			for _, swap := range []bool{false, true} {
				if swap {
					a, b = b, a
				}
				steps := 0
				guardSteps = &steps
				why := guardTokens(a, b)
				guardSteps = nil
				n := len(a) + len(b)
				bound := 4 * n * bits.Len(uint(n))
				if steps > bound {
					t.Errorf("%s %d bytes swapped=%v, %d tokens: %d steps, bound %d", p.name, size, swap, n, steps, bound)
				}
				t.Logf("%s %d bytes swapped=%v, %d tokens: Guard %q, %d steps (bound %d)", p.name, size, swap, n, why, steps, bound)
			}
		}
	}
}
