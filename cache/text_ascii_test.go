package cache

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// asciiSamples are texts that exercise tokenize's rules: sentence ends,
// numbers with dots and commas, apostrophes inside and at the edges of
// words, contractions, possessives, punctuation runs.
var asciiSamples = []string{
	"", "a", "How do I hash a byte array using Elixir?",
	"can't won't shan't cannot ain't isn't O'Brien's cat's it's we're I've you'll he'd I'm",
	"pi is 3.14, not 3,14 or 1,000,000.5 and .5 or 5. or ,5 ,", "don't' 'quoted' rock'n'roll ''",
	"Mr. Smith. Dr! what? yes; no: ok", "US vs. U.S.A. and NASA's 12th 1st", "tab\tnew\nline  spaces",
	"x'1 1'x 1'1 a.b a,b 1.a a.1", "#$%&()*+-/<=>@[\\]^_`{|}~",
}

func TestTokenizeASCIIMatchesRunes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	const alphabet = "aZ09 .,?!;:'-\t\nxyzQRS5"
	texts := append([]string(nil), asciiSamples...)
	for range 3000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		texts = append(texts, string(b))
	}
	for _, s := range texts {
		if got, want := tokenizeASCII(s), tokenizeRunes(s); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n%+v\nwant\n%+v", s, got, want)
		}
	}
}

func FuzzTokenizeASCII(f *testing.F) {
	for _, s := range asciiSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !isASCII(s) {
			return
		}
		if got, want := tokenizeASCII(s), tokenizeRunes(s); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n%+v\nwant\n%+v", s, got, want)
		}
	})
}
