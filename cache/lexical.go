package cache

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/specgate/specgate/vecmath"
)

// Lexical is the built-in embedder that needs no model: it hashes word
// unigrams (light-stemmed), word bigrams and character 3–5-grams of each word
// into Dim() signed buckets, weights them (sublinear term frequency; function
// words down-weighted as a built-in IDF table), normalizes each feature group,
// mixes the groups and L2-normalizes the result. It is deterministic and safe
// for concurrent use.
type Lexical struct {
	dim                   int
	wWord, wBigram, wChar float32
}

// LexicalOption configures NewLexical.
type LexicalOption func(*Lexical)

// WithLexicalWeights sets the weights of the word, bigram and character
// n-gram groups (defaults 1, 0.5, 0.6).
func WithLexicalWeights(word, bigram, char float32) LexicalOption {
	return func(l *Lexical) { l.wWord, l.wBigram, l.wChar = word, bigram, char }
}

// DefaultLexicalDim is the default dimension of the lexical embedder.
const DefaultLexicalDim = 512

// NewLexical returns a lexical embedder of dim dimensions (0 = DefaultLexicalDim).
func NewLexical(dim int, opts ...LexicalOption) (*Lexical, error) {
	if dim == 0 {
		dim = DefaultLexicalDim
	}
	if dim < 16 || dim > 1<<16 {
		return nil, fmt.Errorf("%w: lexical dim %d not in [16, 65536]", ErrConfig, dim)
	}
	l := &Lexical{dim: dim, wWord: 1, wBigram: 0.5, wChar: 0.6}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Dim is the vector length.
func (l *Lexical) Dim() int { return l.dim }

// Name identifies the embedder and its dimension.
func (l *Lexical) Name() string { return fmt.Sprintf("lexical-%d", l.dim) }

// Embed returns one new L2-normalized vector per text (owned by the caller).
// An empty text yields the zero vector.
func (l *Lexical) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = l.embed(t)
	}
	return out, nil
}

// fnv64 is FNV-1a with a group seed byte.
func fnv64(seed byte, parts ...string) uint64 {
	h := uint64(14695981039346656037)
	h ^= uint64(seed)
	h *= 1099511628211
	for k, p := range parts {
		if k > 0 {
			h ^= 0x1f
			h *= 1099511628211
		}
		for i := 0; i < len(p); i++ {
			h ^= uint64(p[i])
			h *= 1099511628211
		}
	}
	// final avalanche (splitmix64) so that low bits are well mixed
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

type group struct {
	feats map[uint64]float32
}

func (g *group) add(h uint64, w float32) {
	if g.feats == nil {
		g.feats = map[uint64]float32{}
	}
	g.feats[h] += w
}

func (l *Lexical) embed(text string) []float32 {
	ts := tokenize(text)
	var words, bigrams, chars group
	prev := ""
	for _, t := range ts {
		w := float32(1)
		if stopwords[t.low] {
			w = 0.15
		}
		if t.neg {
			w = 0.5
		}
		words.add(fnv64(1, t.stem), w)
		if prev != "" {
			bw := float32(1)
			if stopwords[prev] || stopwords[t.stem] {
				bw = 0.3
			}
			bigrams.add(fnv64(2, prev, t.stem), bw)
		}
		prev = t.stem
		if stopwords[t.low] {
			continue
		}
		padded := "<" + strings.ToLower(t.low) + ">"
		rs := []rune(padded)
		for n := 3; n <= 5; n++ {
			for i := 0; i+n <= len(rs); i++ {
				chars.add(fnv64(byte(n), string(rs[i:i+n])), 1)
			}
		}
	}
	v := make([]float32, l.dim)
	l.mix(v, &words, l.wWord)
	l.mix(v, &bigrams, l.wBigram)
	l.mix(v, &chars, l.wChar)
	normalize(v)
	return v
}

// mix adds group g, with sublinear tf and unit norm, times weight to v.
func (l *Lexical) mix(v []float32, g *group, weight float32) {
	if len(g.feats) == 0 || weight == 0 {
		return
	}
	var ss float64
	for _, w := range g.feats {
		s := sublinear(w)
		ss += float64(s * s)
	}
	scale := weight / float32(math.Sqrt(ss))
	keys := make([]uint64, 0, len(g.feats))
	for h := range g.feats {
		keys = append(keys, h)
	}
	slices.Sort(keys) // fixed summation order: bit-identical vectors run to run
	for _, h := range keys {
		w := g.feats[h]
		idx := int(h % uint64(l.dim))
		s := sublinear(w) * scale
		if h>>63 == 1 {
			s = -s
		}
		v[idx] += s
	}
}

// sublinear is 1+ln(tf) scaled by the feature weight for tf ≥ 1.
func sublinear(w float32) float32 {
	if w <= 1 {
		return w
	}
	return 1 + float32(math.Log(float64(w)))
}

// Dot returns the dot product of two equal-length vectors (cosine similarity
// for L2-normalized ones). It panics if the lengths differ.
func Dot(a, b []float32) float32 {
	if len(a) != len(b) {
		panic("cache: Dot of vectors of different length")
	}
	return vecmath.Dot(a, b)
}

var _ Embedder = (*Lexical)(nil)
