// Command gen writes the lexical-embedding and guard-decision golden files
// of package cache (cache/testdata/golden/lexical.txt and guard.txt). It was
// run at commit d9e2c15, before ee1e51b rewrote the embedding without maps
// and the guard without map and string allocations, so that the expected
// values come from the old code, not from the code under test:
//
//	git worktree add --detach /tmp/old d9e2c15
//	mkdir -p /tmp/old/cache/testdata/golden/gen
//	cp cache/testdata/golden/gen/main.go /tmp/old/cache/testdata/golden/gen/
//	cp cache/testdata/paraphrases.jsonl /tmp/old/cache/testdata/   # the same file there
//	(cd /tmp/old && go run ./cache/testdata/golden/gen -out $PWD/cache/testdata/golden)
//
// It lives under testdata so that go build ./... and go vet ./... skip it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/specgate/specgate/cache"
)

// Texts whose vectors are pinned: ASCII questions, case and punctuation
// variants, contractions, numbers and ordinals, invalid UTF-8 (inside a
// word, whole words, longer than 64 bytes), long words (past the 64-byte
// stack buffer), CJK and other scripts, many words (past the 32-feature
// and 192-n-gram stack buffers), empty and space-only texts.
var texts = []string{
	"How do I reverse a list in Python?",
	"how do i reverse a list in python",
	"How can I reverse a Python list without copying it?",
	"What is the capital of France?",
	"Isn't it true that what's done can't be undone? I'd say we'll see; they've won't.",
	"What is 15% of 80? And 3.14 * 1,000 = 3140; the 12th and 3rd and first of May.",
	"Does Alice owe Bob money? O'Brien's and O’Neill’s cars.",
	"",
	"   \t\n ",
	"\xff",
	"ab\xffcd ef\xfe\xfdgh \xc3 \xe6\x9d",
	"caf\xe9 na\xefve r\xe9sum\xe9",
	strings.Repeat("\xff\xfeab", 40),
	strings.Repeat("x", 70),
	strings.Repeat("antidisestablishmentarianism", 12),
	"pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
	strings.Repeat("é", 80),
	"東京の天気は明日どうなりますか",
	"北京 上海 广州 深圳 東京 서울 부산",
	"Привет, как дела? Ελληνικά κείμενα; עברית ועוד; العربية",
	"🙂 emoji 🚀 rocket 👩‍💻 coder",
	"ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ and ﬁ ligatures",
	"The the THE tHe the, the. the? the! the; the: the",
	"not never no without none nobody nothing neither nor nowhere non",
	"running runs ran handled handles handling quickly slowly naturally boxes churches classes",
	"one two three twenty thousand million dozen half twice once",
	"January February March May monday Tuesday today tomorrow weekend fall Fall",
	"United States US USA NASA iPhone GPT-4 eBay McDonald's",
	"a an the and or but if then else of to in on at by for with from into onto",
}

func longText(r *rand.Rand, n int) string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = vocab[r.IntN(len(vocab))]
	}
	return strings.Join(ws, " ")
}

// vocab of the random guard pairs: entities, numbers, dates, negations,
// antonyms, synonyms, question words, modifiers, symmetric words, stopwords,
// contractions, ordinals, other scripts, invalid UTF-8.
var vocab = strings.Fields(`How What Where Who When Why Which how what where who is are was does do can
could should I you the a an of in on to from and or with between vs not never without isn't won't
what's Alice Bob Paris London France Australia Austria United States US NASA Python Go JavaScript
list tuple string integer convert Celsius Fahrenheit hot cold hottest coldest increase decrease
ascending descending buy sell import export car automobile fix repair big large small tiny cook
bake rice quinoa stove tie bow raw chicken eggs safe eat deep lake far tall old May march Monday
January July today tomorrow 7 8 15 80 3.14 1,000 seven eight twelve first third 12th 3rd owe owes
money pay dog cat older younger than live compare connect difference area circumference circle
please quickly 東京 天気 café naïve \xff ab\xfecd`)

func perturb(r *rand.Rand, s string) string {
	ws := strings.Fields(s)
	if len(ws) == 0 {
		return longText(r, 1+r.IntN(8))
	}
	switch r.IntN(6) {
	case 0: // swap two words
		i, j := r.IntN(len(ws)), r.IntN(len(ws))
		ws[i], ws[j] = ws[j], ws[i]
	case 1: // substitute one
		ws[r.IntN(len(ws))] = vocab[r.IntN(len(vocab))]
	case 2: // insert one
		i := r.IntN(len(ws) + 1)
		ws = append(ws[:i], append([]string{vocab[r.IntN(len(vocab))]}, ws[i:]...)...)
	case 3: // drop one
		i := r.IntN(len(ws))
		ws = append(ws[:i], ws[i+1:]...)
	case 4: // change case
		i := r.IntN(len(ws))
		if r.IntN(2) == 0 {
			ws[i] = strings.ToLower(ws[i])
		} else {
			ws[i] = strings.ToUpper(ws[i][:1]) + ws[i][1:]
		}
	case 5: // unchanged
	}
	return strings.Join(ws, " ")
}

func main() {
	out := flag.String("out", "cache/testdata/golden", "output directory")
	flag.Parse()
	ctx := context.Background()

	// Lexical vectors, as the bits of each float32 in hex.
	r := rand.New(rand.NewPCG(7, 11))
	all := append([]string{}, texts...)
	all = append(all, longText(r, 90), longText(r, 300))
	pairs := readPairs()
	for _, p := range pairs[:24] {
		all = append(all, p[0])
	}
	var lb strings.Builder
	lb.WriteString("# lexical embedding golden: dim, weights (word bigram char), Go-quoted text, float32 bits in hex\n")
	lb.WriteString("# generated at d9e2c15 by cache/testdata/golden/gen (the map-based embedding before ee1e51b)\n")
	type conf struct {
		dim     int
		w, b, c float32
	}
	for _, cf := range []conf{{512, 1, 0.5, 0.6}, {100, 1, 0.5, 0.6}, {64, 0.7, 0, 1.3}} {
		e, err := cache.NewLexical(cf.dim, cache.WithLexicalWeights(cf.w, cf.b, cf.c))
		if err != nil {
			log.Fatal(err)
		}
		sel := all
		if cf.dim != 512 {
			sel = all[:len(texts)]
		}
		vs, err := e.Embed(ctx, sel)
		if err != nil {
			log.Fatal(err)
		}
		for i, v := range vs {
			fmt.Fprintf(&lb, "%d\t%g %g %g\t%s\t", cf.dim, cf.w, cf.b, cf.c, strconv.Quote(sel[i]))
			for k, x := range v {
				if k > 0 {
					lb.WriteByte(' ')
				}
				fmt.Fprintf(&lb, "%08x", math.Float32bits(x))
			}
			lb.WriteByte('\n')
		}
	}
	write(filepath.Join(*out, "lexical.txt"), lb.String())

	// Guard decisions: the eval pairs both ways, TestGuard's cases, random
	// pairs of short texts and their perturbations, long pairs.
	var gp [][2]string
	for _, p := range pairs {
		gp = append(gp, p, [2]string{p[1], p[0]})
	}
	for _, t := range texts {
		gp = append(gp, [2]string{t, t}, [2]string{t, perturb(r, t)})
	}
	for i := 0; i < 2500; i++ {
		q := longText(r, 2+r.IntN(14))
		c := perturb(r, q)
		if i%3 == 0 {
			c = perturb(r, c)
		}
		if i%10 == 0 {
			c = longText(r, 2+r.IntN(14))
		}
		gp = append(gp, [2]string{q, c})
	}
	for i := 0; i < 12; i++ {
		q := longText(r, 40+r.IntN(160))
		gp = append(gp, [2]string{q, perturb(r, q)})
	}
	var gb strings.Builder
	gb.WriteString("# guard golden: Go-quoted query, Go-quoted cached, Guard(query, cached) (\"-\" = served)\n")
	gb.WriteString("# generated at d9e2c15 by cache/testdata/golden/gen (the guard before ee1e51b)\n")
	for _, p := range gp {
		why := cache.Guard(p[0], p[1])
		if why == "" {
			why = "-"
		}
		fmt.Fprintf(&gb, "%s\t%s\t%s\n", strconv.Quote(p[0]), strconv.Quote(p[1]), why)
	}
	write(filepath.Join(*out, "guard.txt"), gb.String())
}

func readPairs() [][2]string {
	f, err := os.Open("cache/testdata/paraphrases.jsonl")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	var out [][2]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p struct{ A, B string }
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			log.Fatal(err)
		}
		out = append(out, [2]string{p.A, p.B})
	}
	if err := sc.Err(); err != nil {
		log.Fatal(err)
	}
	return out
}

func write(path, s string) {
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		log.Fatal(err)
	}
}
