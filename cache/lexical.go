package cache

import (
	"cmp"
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

// fnv64 is FNV-1a of a group seed byte and the parts (joined by 0x1f), with
// a splitmix64 finish. It hashes strings (words, bigrams) and byte slices
// (character n-grams cut from a padded word) alike.
func fnv64[T string | []byte](seed byte, parts ...T) uint64 {
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

// feat is one hashed feature and its weight; seq is its position in its
// group (mix sorts by hash, then seq: the stable order without a stable
// sort). It fits the struct's padding.
type feat struct {
	h   uint64
	w   float32
	seq uint32
}

func (l *Lexical) embed(text string) []float32 { return l.embedTokens(tokenize(text)) }

// embedTokens is embed on tokenize(text) (the semantic tier tokenizes the
// query once for the embedding and the guard).
func (l *Lexical) embedTokens(ts []token) []float32 {
	// Each feature group's features in the order they are added
	// (duplicates are summed in mix); on the stack for short texts.
	var wb, bb [32]feat
	var cb [192]feat
	words, bigrams, chars := wb[:0], bb[:0], cb[:0]
	var pad [64]byte
	prev, prevStop := "", false
	for _, t := range ts {
		stop := t.stop
		w := float32(1)
		if stop {
			w = 0.15
		}
		if t.neg {
			w = 0.5
		}
		words = append(words, feat{fnv64(1, t.stem), w, uint32(len(words))})
		if prev != "" {
			bw := float32(1)
			if prevStop || t.stemStop {
				bw = 0.3
			}
			bigrams = append(bigrams, feat{fnv64(2, prev, t.stem), bw, uint32(len(bigrams))})
		}
		prev, prevStop = t.stem, t.stemStop
		if stop {
			continue
		}
		// t.low is valid UTF-8: tokenize cuts words from runes (invalid
		// bytes became U+FFFD there; FuzzGuard checks it), so the n-grams
		// below are whole runes.
		low := strings.ToLower(t.low)
		// Character n-grams of "<word>", n = 3…5 runes, hashed in place:
		// off[k] is the byte offset of the padded word's k-th rune.
		b := append(append(append(pad[:0], '<'), low...), '>')
		var offs [64]int32
		off := offs[:0]
		for i := range string(b) {
			off = append(off, int32(i))
		}
		off = append(off, int32(len(b)))
		nr := len(off) - 1
		for n := 3; n <= 5; n++ {
			for i := 0; i+n <= nr; i++ {
				chars = append(chars, feat{fnv64(byte(n), b[off[i]:off[i+n]]), 1, uint32(len(chars))})
			}
		}
	}
	v := make([]float32, l.dim)
	l.mix(v, words, l.wWord)
	l.mix(v, bigrams, l.wBigram)
	l.mix(v, chars, l.wChar)
	normalize(v)
	return v
}

// mix adds a feature group fs, with sublinear tf and unit norm, times
// weight to v (it reorders fs).
// A feature's weights are summed in the order they were added, and the
// features are visited in hash order, so the result is bit-identical run
// to run.
func (l *Lexical) mix(v []float32, fs []feat, weight float32) {
	if len(fs) == 0 || weight == 0 {
		return
	}
	// By hash, equal hashes in the order they were added (seq is unique in
	// the group): the order SortStableFunc by hash gave, about twice as
	// fast on the ~150 features of a question.
	slices.SortFunc(fs, func(a, b feat) int {
		if a.h != b.h {
			return cmp.Compare(a.h, b.h)
		}
		return cmp.Compare(a.seq, b.seq)
	})
	// Sum duplicates in place: fs[:n] holds each hash once.
	n := 0
	for _, f := range fs {
		if n > 0 && fs[n-1].h == f.h {
			fs[n-1].w += f.w
			continue
		}
		fs[n] = f
		n++
	}
	fs = fs[:n]
	var ss float64
	for _, f := range fs {
		s := sublinear(f.w)
		ss += float64(s * s)
	}
	scale := weight / float32(math.Sqrt(ss))
	for _, f := range fs {
		idx := int(f.h % uint64(l.dim))
		s := sublinear(f.w) * scale
		if f.h>>63 == 1 {
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
