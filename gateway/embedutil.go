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
