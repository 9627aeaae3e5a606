package gateway

import (
	"encoding/base64"
	"encoding/binary"
	"math"
)

// float32Base64 encodes v as little-endian float32 bytes in base64, the
// OpenAI encoding_format "base64".
func float32Base64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// shortenEmbeddings implements the embeddings request's dimensions as
// OpenAI's text-embedding-3 models do: keep the first d components of each
// vector and scale the result back to unit length (a zero vector stays
// zero). The input vectors are not modified.
func shortenEmbeddings(vecs [][]float32, d int) [][]float32 {
	out := make([][]float32, len(vecs))
	for i, v := range vecs {
		w := make([]float32, d)
		copy(w, v[:min(d, len(v))])
		var ss float64
		for _, x := range w {
			ss += float64(x) * float64(x)
		}
		if ss > 0 {
			inv := float32(1 / math.Sqrt(ss))
			for j := range w {
				w[j] *= inv
			}
		}
		out[i] = w
	}
	return out
}
