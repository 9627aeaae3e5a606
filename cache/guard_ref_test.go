package cache

import (
	"slices"
	"strings"
)

// The guard's rules as they were before they became linear in the key
// length (mentions ranged over the whole vocabulary, isAcronymOf searched
// every word window, antonymMismatch and hasSynonymIn searched lists): the
// reference of TestGuardMatchesReference and FuzzGuard. Copied from
// cache/guard.go at 2201485 with the suffix Ref.

func guardTokensRef(a, b []token) string {
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
	va, vb := vocabRef(a), vocabRef(b)
	if entityMismatchRef(a, b, vb) || entityMismatchRef(b, a, va) {
		return GuardEntity
	}
	if qa, qb := questionType(a), questionType(b); qa != "" && qb != "" && qa != qb && qa != "what" && qb != "what" {
		return GuardQuestion
	}
	if antonymMismatchRef(a, b) {
		return GuardAntonym
	}
	if roleSwapRef(a, b) {
		return GuardRole
	}
	if substitutionRef(a, b, va, vb) {
		return GuardSubstitution
	}
	if modifierAddedRef(a, b, va) || modifierAddedRef(b, a, vb) {
		return GuardModifier
	}
	return ""
}

func vocabRef(ts []token) map[string]bool {
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
	return m
}

func mentionsRef(v map[string]bool, w string) bool {
	if v[w] {
		return true
	}
	for x := range v {
		short, long := x, w
		if len(short) > len(long) {
			short, long = long, short
		}
		if len(short) >= 4 && len(long) <= len(short)+3 && strings.HasPrefix(long, short) {
			return true
		}
	}
	return false
}

func entityMismatchRef(a, b []token, vb map[string]bool) bool {
	for _, run := range entityRuns(a) {
		if len(run) > 1 && vb[initials(run)] {
			continue
		}
		for _, t := range run {
			if !mentionsRef(vb, t.low) && !mentionsRef(vb, t.stem) && !(len(t.low) <= 5 && isAcronymOfRef(t, b)) {
				return true
			}
		}
	}
	return false
}

// isAcronymOf reports whether an all-caps t spells the initials of a run of
// words in b ("US" and "united states").
func isAcronymOfRef(t token, b []token) bool {
	if strings.ToUpper(t.orig) != t.orig || len(t.low) < 2 {
		return false
	}
	n := len(t.low)
	for i := 0; i+n <= len(b); i++ {
		if initials(b[i:i+n]) == t.low {
			return true
		}
	}
	return false
}

func antonymMismatchRef(a, b []token) bool {
	var ba, bb [16]string
	wa, wb := antonymWords(ba[:0], a), antonymWords(bb[:0], b)
	check := func(x, y []string) bool {
		for _, w := range x {
			if slices.Contains(y, w) {
				continue
			}
			for _, o := range antonyms[w] {
				if slices.Contains(y, o) && !slices.Contains(x, o) {
					return true
				}
			}
		}
		return false
	}
	return check(wa, wb) || check(wb, wa)
}

func substitutionRef(a, b []token, va, vb map[string]bool) bool {
	da, db := onlyInRef(a, vb), onlyInRef(b, va)
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
// content word before it. va is vocabRef(a).
func modifierAddedRef(a, b []token, va map[string]bool) bool {
	bare := map[string]bool{}
	for i, t := range a {
		if isContent(t) && (i == 0 || !isContent(a[i-1])) {
			bare[t.stem] = true
		}
	}
	for i := 0; i+1 < len(b); i++ {
		m, n := b[i], b[i+1]
		if !isContent(m) || !isContent(n) || isNumeric(m.stem) || !bare[n.stem] || mentionsRef(va, m.low) || mentionsRef(va, m.stem) {
			continue
		}
		if hasSynonymInRef(m.stem, a) || hasSynonymInRef(m.low, a) {
			continue
		}
		return true
	}
	return false
}

func hasSynonymInRef(w string, ts []token) bool {
	for _, g := range synonyms[w] {
		for _, t := range ts {
			for _, h := range synonyms[t.stem] {
				if g == h {
					return true
				}
			}
		}
	}
	return false
}

// onlyIn returns the content stems of a that b does not mention (vb is
// vocabRef(b)).
func onlyInRef(a []token, vb map[string]bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range a {
		if !isContent(t) || isNumeric(t.stem) || len(t.stem) < 2 || seen[t.stem] {
			continue
		}
		seen[t.stem] = true
		if !mentionsRef(vb, t.low) && !mentionsRef(vb, t.stem) {
			out = append(out, t.stem)
		}
	}
	return out
}
