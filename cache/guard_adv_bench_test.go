package cache

import (
	"fmt"
	"strings"
	"testing"
)

// Adversarial key pairs of about n bytes each for the guard's rules that
// compared every token of one text with every token (or vocabulary word) of
// the other. Each pair is built so that the rule does not stop early: every
// comparison answers "keep looking" or succeeds only at the far end.
// The word list of each kind is made by fill from distinct words w(i).

// fill joins words f(0), f(1), ... until the text reaches n bytes.
func fill(n int, f func(i int) string) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f(i))
	}
	return b.String()
}

// advMentions: capitalized names in a, each mentioned in b only as a longer
// word ("Kaqzz" / "kaqzzx"), so each name's mention is found by the prefix
// rule, which scanned b's whole vocabulary (entity check, and again in
// onlyIn for the substitution check).
func advMentions(n int) (string, string) {
	ws := strings.Fields(fill(n, func(i int) string { return "K" + letters(i) + "zz" }))
	lw := make([]string, len(ws))
	for i, w := range ws {
		lw[i] = strings.ToLower(w) + "x"
	}
	return "Intro " + strings.Join(ws, " "), "intro " + strings.Join(lw, " ")
}

// advAcronym: one all-caps name repeated, whose expansion is at the end of
// b: each repetition searched b's word windows from the start.
func advAcronym(n int) (string, string) {
	a := "Intro " + fill(n, func(int) string { return "ABC" })
	b := "intro " + fill(n-30, func(int) string { return "zzzz" }) + " alpha beta charlie"
	return a, b
}

// advAntonym: words with antonyms on both sides, none shared and none
// opposite: each word of one side was looked up in the other side's list,
// and so was each of its antonyms.
func advAntonym(n int) (string, string) {
	return fill(n, func(int) string { return "hot" }), fill(n, func(int) string { return "up" })
}

// advSynonym: b puts a word before a's bare noun again and again, and its
// synonym is at the end of a: each pair searched a for the synonym.
func advSynonym(n int) (string, string) {
	a := "tie " + fill(n-10, func(int) string { return "the zzzq" }) + " the fix"
	b := fill(n, func(int) string { return "repair tie" })
	return a, b
}

// adversarialHalves returns a key of about n bytes of distinct content
// words and the same key with its halves swapped: no role swap (no word
// lies between two swapped ones in both), so the old search visited every
// x, y and v.
func adversarialHalves(n int) (string, string) {
	var ws []string
	size := 0
	for i := 0; size < n; i++ {
		w := "w" + letters(i)
		ws = append(ws, w)
		size += len(w) + 1
	}
	h := len(ws) / 2
	a := strings.Join(ws, " ")
	b := strings.Join(append(append([]string{}, ws[h:]...), ws[:h]...), " ")
	return a, b
}

// letters writes i in base 26 with the letters a…z, then "q": no word is a
// number, a stopword or stems like another.
func letters(i int) string {
	var b []byte
	for {
		b = append(b, byte('a'+i%26))
		i /= 26
		if i == 0 {
			break
		}
	}
	return string(b) + "q"
}

var advPairs = []struct {
	name string
	gen  func(int) (string, string)
}{
	{"halves", adversarialHalves},
	{"mentions", advMentions},
	{"acronym", advAcronym},
	{"antonym", advAntonym},
	{"synonym", advSynonym},
}

// BenchmarkGuardAdversarial times Guard on the adversarial pairs (it uses
// only Guard, so it also runs on older code for a before/after).
func BenchmarkGuardAdversarial(b *testing.B) {
	for _, p := range advPairs {
		for _, size := range []int{2200, 4600, 9400, 32 << 10} {
			qa, qb := p.gen(size)
			b.Run(fmt.Sprintf("%s/%dB", p.name, size), func(b *testing.B) {
				for b.Loop() {
					Guard(qa, qb)
				}
			})
		}
	}
}
