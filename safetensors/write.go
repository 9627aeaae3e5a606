package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalidTensor: a Tensor given to Write/Encode is inconsistent.
var ErrInvalidTensor = errors.New("invalid tensor")

// Tensor is one tensor to write. Data holds NumElements×DType.Size() bytes,
// little-endian, row-major; Write only reads it.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Write writes tensors and metadata to path as a safetensors file (via a
// temporary file in the same directory, renamed into place).
func Write(path string, tensors []Tensor, metadata map[string]string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	if err = Encode(w, tensors, metadata); err != nil {
		return err
	}
	if err = w.Flush(); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// Encode writes a safetensors image to w. Tensors are laid out in name
// order; the header is padded with spaces so the data section starts at a
// multiple of 8 bytes. The input is validated like a file being read.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	sorted := slices.Clone(tensors)
	slices.SortFunc(sorted, func(a, b Tensor) int { return strings.Compare(a.Name, b.Name) })
	var hb strings.Builder
	hb.WriteByte('{')
	first := true
	comma := func() {
		if !first {
			hb.WriteByte(',')
		}
		first = false
	}
	if metadata != nil {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		comma()
		hb.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				hb.WriteByte(',')
			}
			writeJSONString(&hb, k)
			hb.WriteByte(':')
			writeJSONString(&hb, metadata[k])
		}
		hb.WriteByte('}')
	}
	var off int64
	for i, t := range sorted {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("safetensors: tensor %s: %w: %s", quoteShort(t.Name), ErrInvalidTensor, fmt.Sprintf(format, args...))
		}
		if t.Name == "" || t.Name == "__metadata__" {
			return bad("reserved or empty name")
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return bad("duplicate name")
		}
		size := int64(t.DType.Size())
		if size == 0 {
			return bad("unknown dtype %q", t.DType)
		}
		numel := int64(1)
		for _, d := range t.Shape {
			if d < 0 {
				return bad("negative dimension in shape %v", t.Shape)
			}
			if d != 0 && numel > math.MaxInt64/d {
				return bad("shape %v overflows", t.Shape)
			}
			numel *= d
		}
		if numel > math.MaxInt64/size || numel*size != int64(len(t.Data)) {
			return bad("data is %d bytes, shape %v of %s needs %d", len(t.Data), t.Shape, t.DType, numel*size)
		}
		comma()
		writeJSONString(&hb, t.Name)
		hb.WriteString(`:{"dtype":`)
		writeJSONString(&hb, string(t.DType))
		hb.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				hb.WriteByte(',')
			}
			hb.WriteString(strconv.FormatInt(d, 10))
		}
		hb.WriteString(`],"data_offsets":[`)
		hb.WriteString(strconv.FormatInt(off, 10))
		hb.WriteByte(',')
		off += int64(len(t.Data))
		hb.WriteString(strconv.FormatInt(off, 10))
		hb.WriteString("]}")
	}
	hb.WriteByte('}')
	for (8+hb.Len())%8 != 0 {
		hb.WriteByte(' ')
	}
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(hb.Len()))
	if _, err := w.Write(lb[:]); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if _, err := io.WriteString(w, hb.String()); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	for _, t := range sorted {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: %w", err)
		}
	}
	return nil
}

func writeJSONString(b *strings.Builder, s string) {
	q, _ := json.Marshal(s) // marshalling a string cannot fail
	b.Write(q)
}

// EncodeF16 packs float32 values as little-endian binary16 bytes
// (round-to-nearest-even). The result is new and the caller's.
func EncodeF16(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], Float32ToF16(x))
	}
	return out
}

// EncodeBF16 packs float32 values as little-endian bfloat16 bytes
// (round-to-nearest-even).
func EncodeBF16(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], Float32ToBF16(x))
	}
	return out
}

// EncodeF32 packs float32 values as little-endian bytes.
func EncodeF32(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}
