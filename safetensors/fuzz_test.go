package safetensors

import (
	"bytes"
	"errors"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzParseHeader feeds whole file images to NewFile. Any input must give
// either an ErrMalformed error or a File whose tensors tile the data
// section exactly, can all be read, and survive an Encode/parse round trip.
func FuzzParseHeader(f *testing.F) {
	f.Add(goldenImage())
	f.Add(image("{}", nil))
	f.Add(image(`{"__metadata__":{"a":"b"},"x":{"dtype":"BF16","shape":[2,1],"data_offsets":[0,4]}}  `, []byte{0x80, 0x3f, 0, 0xc0}))
	f.Add(image(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{5}))
	f.Add(image(`{"t":{"dtype":"F16","shape":[9223372036854775807,2],"data_offsets":[0,2]}}`, []byte{0, 0}))
	f.Add(image(`{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}))
	f.Add(image(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)))
	f.Add(image(`{"\u00e9":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'})
	f.Fuzz(func(t *testing.T, img []byte) {
		sf, err := NewFile("fuzz", bytes.NewReader(img), int64(len(img)))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("in-memory parse failed without ErrMalformed: %v", err)
			}
			return
		}
		dataLen := int64(len(img)) - sf.DataOffset
		infos := make([]TensorInfo, 0, len(sf.Tensors))
		for name, ti := range sf.Tensors {
			if ti.Name != name || ti.Begin < 0 || ti.End < ti.Begin || ti.End > dataLen {
				t.Fatalf("bad info %+v (data %d bytes)", ti, dataLen)
			}
			if ti.NumElements()*int64(ti.DType.Size()) != ti.End-ti.Begin {
				t.Fatalf("size mismatch %+v", ti)
			}
			infos = append(infos, ti)
		}
		slices.SortFunc(infos, func(a, b TensorInfo) int { return cmpInt(a.Begin, b.Begin)*2 + cmpInt(a.End, b.End) })
		var pos int64
		for _, ti := range infos {
			if ti.Begin != pos {
				t.Fatalf("not contiguous at %d: %+v", pos, ti)
			}
			pos = ti.End
		}
		if pos != dataLen {
			t.Fatalf("tensors end at %d of %d", pos, dataLen)
		}
		var ts []Tensor
		for _, name := range sf.Names() {
			ti := sf.Tensors[name]
			raw, err := sf.ReadRaw(name)
			if err != nil || !bytes.Equal(raw, img[sf.DataOffset+ti.Begin:sf.DataOffset+ti.End]) {
				t.Fatalf("ReadRaw(%q): %v", name, err)
			}
			if ti.DType.Float() {
				v, _, err := sf.ReadFloat32(name)
				if err != nil || int64(len(v)) != ti.NumElements() {
					t.Fatalf("ReadFloat32(%q): %d values, %v", name, len(v), err)
				}
				if ti.DType == F16 && len(v) > 0 && math.Float32bits(v[0]) != math.Float32bits(F16ToFloat32(uint16(raw[0])|uint16(raw[1])<<8)) {
					t.Fatalf("F16 value mismatch in %q", name)
				}
			}
			ts = append(ts, Tensor{Name: name, DType: ti.DType, Shape: ti.Shape, Data: raw})
		}
		var buf bytes.Buffer
		if err := Encode(&buf, ts, sf.Metadata); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := NewFile("again", bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if !maps.Equal(again.Metadata, sf.Metadata) || !slices.Equal(again.Names(), sf.Names()) {
			t.Fatalf("round trip changed names or metadata")
		}
		for _, tt := range ts {
			ti := again.Tensors[tt.Name]
			raw, _ := again.ReadRaw(tt.Name)
			if ti.DType != tt.DType || !slices.Equal(ti.Shape, tt.Shape) || !bytes.Equal(raw, tt.Data) {
				t.Fatalf("round trip changed %q", tt.Name)
			}
		}
	})
}

func benchFile(b *testing.B, dt DType, n int) string {
	b.Helper()
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%2000)/1000 - 1
	}
	var data []byte
	switch dt {
	case F16:
		data = EncodeF16(vals)
	case BF16:
		data = EncodeBF16(vals)
	default:
		data = EncodeF32(vals)
	}
	path := filepath.Join(b.TempDir(), "bench.safetensors")
	if err := Write(path, []Tensor{{Name: "w", DType: dt, Shape: []int64{int64(n / 2048), 2048}, Data: data}}, nil); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkReadFloat32 reads a 2048×2048 tensor (4M values) from a file in
// the page cache and converts it to float32. Bytes/s counts source bytes.
func BenchmarkReadFloat32(b *testing.B) {
	for _, dt := range []DType{F16, BF16, F32} {
		b.Run(string(dt), func(b *testing.B) {
			const n = 2048 * 2048
			f, err := Open(benchFile(b, dt, n))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			dst := make([]float32, n)
			b.SetBytes(int64(n * dt.Size()))
			b.ResetTimer()
			for b.Loop() {
				if err := f.ReadFloat32Into("w", dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkF16Convert measures the in-memory conversion alone.
func BenchmarkF16Convert(b *testing.B) {
	const n = 1 << 20
	src := EncodeF16(make([]float32, n))
	dst := make([]float32, n)
	b.SetBytes(2 * n)
	for b.Loop() {
		F16BytesToFloat32(dst, src)
	}
}
