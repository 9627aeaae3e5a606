package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goldenHeader is a header written by hand in the layout the reference
// writer uses (metadata first, compact JSON), padded with 4 spaces so the
// data section starts at byte 8+312 = 320, a multiple of 8.
const goldenHeader = `{"__metadata__":{"format":"pt"},` +
	`"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},` +
	`"b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},` +
	`"c":{"dtype":"F32","shape":[],"data_offsets":[14,18]},` +
	`"d":{"dtype":"I64","shape":[1],"data_offsets":[18,26]},` +
	`"e":{"dtype":"F32","shape":[0,4],"data_offsets":[26,26]}}` + "    "

var goldenData = []byte{
	// a: F16 1.0, -2.0, +Inf, 2^-24 (smallest subnormal)
	0x00, 0x3C, 0x00, 0xC0, 0x00, 0x7C, 0x01, 0x00,
	// b: BF16 1.0, -5.0, 2^-133 (smallest bf16 subnormal)
	0x80, 0x3F, 0xA0, 0xC0, 0x01, 0x00,
	// c: F32 scalar 0.5
	0x00, 0x00, 0x00, 0x3F,
	// d: I64 7
	0x07, 0, 0, 0, 0, 0, 0, 0,
	// e: empty
}

func goldenImage() []byte {
	img := []byte{0x38, 0x01, 0, 0, 0, 0, 0, 0} // 312
	img = append(img, goldenHeader...)
	return append(img, goldenData...)
}

func goldenTensors() []Tensor {
	return []Tensor{
		{Name: "d", DType: I64, Shape: []int64{1}, Data: goldenData[18:26]},
		{Name: "a", DType: F16, Shape: []int64{2, 2}, Data: goldenData[0:8]},
		{Name: "e", DType: F32, Shape: []int64{0, 4}, Data: nil},
		{Name: "c", DType: F32, Shape: []int64{}, Data: goldenData[14:18]},
		{Name: "b", DType: BF16, Shape: []int64{3}, Data: goldenData[8:14]},
	}
}

func TestGoldenRead(t *testing.T) {
	if len(goldenHeader) != 312 {
		t.Fatalf("golden header is %d bytes, want 312", len(goldenHeader))
	}
	path := filepath.Join(t.TempDir(), "g.safetensors")
	if err := os.WriteFile(path, goldenImage(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, want := f.Names(), []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	if f.Metadata["format"] != "pt" || len(f.Metadata) != 1 {
		t.Fatalf("Metadata = %v", f.Metadata)
	}
	if f.DataOffset != 320 {
		t.Fatalf("DataOffset = %d, want 320", f.DataOffset)
	}
	info, ok := f.Info("b")
	if !ok || info.DType != BF16 || !slices.Equal(info.Shape, []int64{3}) || info.Begin != 8 || info.End != 14 {
		t.Fatalf("Info(b) = %+v %v", info, ok)
	}
	checks := []struct {
		name  string
		want  []float32
		shape []int64
	}{
		{"a", []float32{1, -2, float32(math.Inf(1)), float32(math.Ldexp(1, -24))}, []int64{2, 2}},
		{"b", []float32{1, -5, float32(math.Ldexp(1, -133))}, []int64{3}},
		{"c", []float32{0.5}, []int64{}},
		{"e", []float32{}, []int64{0, 4}},
	}
	for _, c := range checks {
		got, shape, err := f.ReadFloat32(c.name)
		if err != nil {
			t.Fatalf("ReadFloat32(%s): %v", c.name, err)
		}
		if !slices.Equal(got, c.want) || !slices.Equal(shape, c.shape) {
			t.Errorf("ReadFloat32(%s) = %v %v, want %v %v", c.name, got, shape, c.want, c.shape)
		}
		dst := make([]float32, len(c.want))
		if err := f.ReadFloat32Into(c.name, dst); err != nil || !slices.Equal(dst, c.want) {
			t.Errorf("ReadFloat32Into(%s) = %v, %v", c.name, dst, err)
		}
	}
	raw, err := f.ReadRaw("d")
	if err != nil || binary.LittleEndian.Uint64(raw) != 7 || len(raw) != 8 {
		t.Fatalf("ReadRaw(d) = %v, %v", raw, err)
	}
	if _, _, err := f.ReadFloat32("d"); !errors.Is(err, ErrUnsupportedDType) || !strings.Contains(err.Error(), `"d"`) {
		t.Errorf("ReadFloat32 of I64: err = %v, want ErrUnsupportedDType naming the tensor", err)
	}
	if _, _, err := f.ReadFloat32("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing tensor: err = %v", err)
	}
	if err := f.ReadFloat32Into("a", make([]float32, 3)); !errors.Is(err, ErrShape) {
		t.Errorf("short dst: err = %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadRaw("a"); err == nil {
		t.Error("ReadRaw after Close succeeded")
	}
}

func TestEncodeMatchesGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, goldenTensors(), map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if want := goldenImage(); !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("Encode =\n%q\nwant\n%q", buf.Bytes(), want)
	}
}

func TestWriteRoundTrip(t *testing.T) {
	vals := []float32{0, 1, -1, 0.1, 3.14159, 65504, -1e-7, float32(math.Inf(-1))}
	ts := []Tensor{
		{Name: "f32", DType: F32, Shape: []int64{2, 4}, Data: EncodeF32(vals)},
		{Name: "f16", DType: F16, Shape: []int64{8}, Data: EncodeF16(vals)},
		{Name: "bf16", DType: BF16, Shape: []int64{4, 2}, Data: EncodeBF16(vals)},
		{Name: "u8", DType: U8, Shape: []int64{3}, Data: []byte{1, 2, 3}},
		{Name: "bool", DType: BOOL, Shape: []int64{1, 1}, Data: []byte{1}},
		{Name: "model.layers.0.self_attn.q_proj.weight \"é\"", DType: F32, Shape: []int64{1}, Data: EncodeF32([]float32{2})},
	}
	path := filepath.Join(t.TempDir(), "rt.safetensors")
	if err := Write(path, ts, map[string]string{"k\n": "v\"<&>"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.DataOffset%8 != 0 {
		t.Errorf("data offset %d not 8-aligned", f.DataOffset)
	}
	if f.Metadata["k\n"] != "v\"<&>" {
		t.Errorf("metadata = %q", f.Metadata)
	}
	for _, tt := range ts {
		raw, err := f.ReadRaw(tt.Name)
		if err != nil || !bytes.Equal(raw, tt.Data) {
			t.Errorf("%s: raw %v, %v", tt.Name, raw, err)
		}
		info, _ := f.Info(tt.Name)
		if info.DType != tt.DType || !slices.Equal(info.Shape, tt.Shape) {
			t.Errorf("%s: info %+v", tt.Name, info)
		}
	}
	got, _, err := f.ReadFloat32("f32")
	if err != nil || !slices.Equal(got, vals) {
		t.Errorf("f32 = %v, %v", got, err)
	}
	got, _, _ = f.ReadFloat32("f16")
	for i, v := range vals {
		if want := F16ToFloat32(Float32ToF16(v)); got[i] != want {
			t.Errorf("f16[%d] = %v, want %v", i, got[i], want)
		}
	}
	if got[1] != 1 || got[5] != 65504 || got[4] != float32(3.140625) {
		t.Errorf("f16 values = %v", got)
	}
	got, _, _ = f.ReadFloat32("bf16")
	if got[1] != 1 || got[4] != float32(3.140625) || got[5] != 65536 {
		t.Errorf("bf16 values = %v", got)
	}

	// invalid writes
	bad := [][]Tensor{
		{{Name: "x", DType: F32, Shape: []int64{2}, Data: make([]byte, 4)}},
		{{Name: "x", DType: "Q4", Shape: []int64{1}, Data: make([]byte, 1)}},
		{{Name: "__metadata__", DType: U8, Shape: []int64{1}, Data: make([]byte, 1)}},
		{{Name: "x", DType: U8, Shape: []int64{1}, Data: []byte{1}}, {Name: "x", DType: U8, Shape: []int64{1}, Data: []byte{1}}},
		{{Name: "x", DType: U8, Shape: []int64{-1}, Data: nil}},
		{{Name: "x", DType: F64, Shape: []int64{1 << 61}, Data: nil}},
	}
	for i, b := range bad {
		if err := Encode(&bytes.Buffer{}, b, nil); !errors.Is(err, ErrInvalidTensor) {
			t.Errorf("bad write %d: err = %v", i, err)
		}
	}
	if err := Write(filepath.Join(t.TempDir(), "bad.safetensors"), bad[0], nil); err == nil {
		t.Error("Write of an invalid tensor succeeded")
	}
}

// image builds a file from a header string and a data section.
func image(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestValidFiles(t *testing.T) {
	cases := []struct {
		name   string
		img    []byte
		tensor string
		shape  []int64
	}{
		{"empty header object", image("{}", nil), "", nil},
		{"space padded", image(`{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}      `, []byte{1, 2}), "x", []int64{2}},
		{"pretty printed", image("{\n  \"x\" : {\n\t\"shape\": [ 1 , 2 ],\r\n \"data_offsets\": [0, 4], \"dtype\": \"I16\"}\n}\n", make([]byte, 4)), "x", []int64{1, 2}},
		{"null metadata", image(`{"__metadata__":null,"x":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, []byte{9}), "x", []int64{}},
		{"escaped name", image(`{"\u00e9\n":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{9}), "é\n", []int64{1}},
		{"zero-size tensors at the end and middle", image(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"c":{"dtype":"F64","shape":[3,0,9223372036854775807],"data_offsets":[1,1]}}`, []byte{5}), "c", []int64{3, 0, math.MaxInt64}},
		{"huge dims times zero", image(`{"a":{"dtype":"F64","shape":[9223372036854775807,9223372036854775807,0],"data_offsets":[0,0]}}`, nil), "a", []int64{math.MaxInt64, math.MaxInt64, 0}},
		{"all dtypes", image(`{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[1,2]},"c":{"dtype":"U16","shape":[1],"data_offsets":[2,4]},"d":{"dtype":"U32","shape":[1],"data_offsets":[4,8]},"e":{"dtype":"U64","shape":[1],"data_offsets":[8,16]},"f":{"dtype":"I32","shape":[1],"data_offsets":[16,20]},"g":{"dtype":"I8","shape":[1],"data_offsets":[20,21]}}`, make([]byte, 21)), "e", []int64{1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := NewFile("mem", bytes.NewReader(c.img), int64(len(c.img)))
			if err != nil {
				t.Fatal(err)
			}
			if c.tensor == "" {
				if len(f.Tensors) != 0 {
					t.Fatalf("tensors = %v", f.Tensors)
				}
				return
			}
			info, ok := f.Info(c.tensor)
			if !ok || !slices.Equal(info.Shape, c.shape) {
				t.Fatalf("Info(%q) = %+v, %v; names %q", c.tensor, info, ok, f.Names())
			}
			if _, err := f.ReadRaw(c.tensor); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	big := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	big = append(big, "{}"...)
	tooLong := binary.LittleEndian.AppendUint64(nil, 3)
	tooLong = append(tooLong, "{}"...)
	hugeLen := binary.LittleEndian.AppendUint64(nil, math.MaxUint64)
	t4 := func(s string) string { return `{"t":{` + s + `}}` }
	deep := `{"__metadata__":{"k":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`
	cases := []struct {
		name   string
		img    []byte
		tensor string
		field  string
		msg    string // substring of the message
	}{
		{"short file", []byte{1, 2, 3}, "", "header length", "shorter than"},
		{"header length over limit", big, "", "header length", "exceeds the limit"},
		{"header length past end", tooLong, "", "header length", "exceeds the 2 bytes"},
		{"header length max u64", hugeLen, "", "header length", "exceeds the limit"},
		{"empty header", image("", nil), "", "header", "empty"},
		{"leading space", image(" {}", nil), "", "header", "must start with"},
		{"array header", image("[]", nil), "", "header", "must start with"},
		{"invalid utf8", image("{\"\xff\":1}", nil), "", "header", "UTF-8"},
		{"truncated json", image(`{"a":`, nil), "", "header", "JSON"},
		{"two objects", image(`{} {}`, nil), "", "header", "after the JSON object"},
		{"trailing garbage", image(`{}x`, nil), "", "header", "JSON"},
		{"nesting too deep", image(deep, nil), "__metadata__", "header", "nested deeper"},
		{"duplicate tensor", image(`{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "t", "", "duplicate key"},
		{"duplicate field", image(t4(`"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]`), []byte{1}), "t", `"dtype"`, "duplicate key"},
		{"duplicate metadata key", image(`{"__metadata__":{"k":"a","k":"b"}}`, nil), "__metadata__", `"k"`, "duplicate key"},
		{"empty tensor name", image(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "", "name", "empty"},
		{"tensor not object", image(`{"t":[1]}`, nil), "t", "", "must be an object"},
		{"tensor null", image(`{"t":null}`, nil), "t", "", "must be an object"},
		{"unknown field", image(t4(`"dtype":"U8","shape":[1],"offsets":[0,1]`), []byte{1}), "t", `"offsets"`, "unknown field"},
		{"missing dtype", image(t4(`"shape":[1],"data_offsets":[0,1]`), []byte{1}), "t", "dtype", "missing"},
		{"dtype number", image(t4(`"dtype":4,"shape":[1],"data_offsets":[0,1]`), []byte{1}), "t", "dtype", "must be a string"},
		{"unknown dtype", image(t4(`"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]`), []byte{1}), "t", "dtype", "unknown dtype"},
		{"lowercase dtype", image(t4(`"dtype":"f32","shape":[1],"data_offsets":[0,4]`), make([]byte, 4)), "t", "dtype", "unknown dtype"},
		{"missing shape", image(t4(`"dtype":"U8","data_offsets":[0,1]`), []byte{1}), "t", "shape", "missing"},
		{"shape object", image(t4(`"dtype":"U8","shape":{},"data_offsets":[0,1]`), []byte{1}), "t", "shape", "must be an array"},
		{"shape null", image(t4(`"dtype":"U8","shape":null,"data_offsets":[0,1]`), []byte{1}), "t", "shape", "must be an array"},
		{"negative dim", image(t4(`"dtype":"U8","shape":[1,-1],"data_offsets":[0,1]`), []byte{1}), "t", "shape[1]", "negative"},
		{"fractional dim", image(t4(`"dtype":"U8","shape":[1.5],"data_offsets":[0,1]`), []byte{1}), "t", "shape[0]", "not an integer"},
		{"exponent dim", image(t4(`"dtype":"U8","shape":[1e0],"data_offsets":[0,1]`), []byte{1}), "t", "shape[0]", "not an integer"},
		{"string dim", image(t4(`"dtype":"U8","shape":["1"],"data_offsets":[0,1]`), []byte{1}), "t", "shape[0]", "not an integer"},
		{"huge dim", image(t4(`"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]`), []byte{1}), "t", "shape[0]", "not an integer"},
		{"element count overflow", image(t4(`"dtype":"U8","shape":[2147483648,2147483647,4],"data_offsets":[0,1]`), []byte{1}), "t", "shape[2]", "overflows"},
		{"byte size overflow", image(t4(`"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,1]`), []byte{1}), "t", "shape", "overflows"},
		{"size mismatch", image(t4(`"dtype":"F32","shape":[2],"data_offsets":[0,4]`), make([]byte, 4)), "t", "data_offsets", "needs 8"},
		{"missing offsets", image(t4(`"dtype":"U8","shape":[1]`), []byte{1}), "t", "data_offsets", "missing"},
		{"three offsets", image(t4(`"dtype":"U8","shape":[1],"data_offsets":[0,1,2]`), []byte{1}), "t", "data_offsets", "2 elements"},
		{"negative begin", image(t4(`"dtype":"U8","shape":[1],"data_offsets":[-1,0]`), []byte{1}), "t", "data_offsets[0]", "negative"},
		{"end before begin", image(t4(`"dtype":"U8","shape":[1],"data_offsets":[1,0]`), []byte{1}), "t", "data_offsets", "before begin"},
		{"end past data", image(t4(`"dtype":"U8","shape":[2],"data_offsets":[0,2]`), []byte{1}), "t", "data_offsets[1]", "past the 1-byte"},
		{"float offset", image(t4(`"dtype":"U8","shape":[1],"data_offsets":[0,1.0]`), []byte{1}), "t", "data_offsets[1]", "not an integer"},
		{"overlap", image(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), "b", "data_offsets", `overlaps tensor "a"`},
		{"same range twice", image(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "b", "data_offsets", `overlaps tensor "a"`},
		{"hole at start", image(t4(`"dtype":"U8","shape":[1],"data_offsets":[1,2]`), []byte{1, 2}), "t", "data_offsets", "[0, 1) belong to no tensor"},
		{"hole between", image(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, []byte{1, 2, 3}), "b", "data_offsets", "[1, 2) between tensor \"a\""},
		{"trailing bytes", image(t4(`"dtype":"U8","shape":[1],"data_offsets":[0,1]`), []byte{1, 2}), "t", "data section", "trailing"},
		{"data without tensors", image(`{}`, []byte{1}), "", "data section", "no tensors"},
		{"metadata array", image(`{"__metadata__":["a"]}`, nil), "__metadata__", "", "must be an object"},
		{"metadata number value", image(`{"__metadata__":{"k":1}}`, nil), "__metadata__", `"k"`, "must be a string"},
		{"metadata null value", image(`{"__metadata__":{"k":null}}`, nil), "__metadata__", `"k"`, "must be a string"},
		{"metadata object value", image(`{"__metadata__":{"k":{}}}`, nil), "__metadata__", `"k"`, "must be a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const path = "/models/x/model.safetensors"
			f, err := NewFile(path, bytes.NewReader(c.img), int64(len(c.img)))
			if err == nil {
				t.Fatalf("accepted: %v", f.Tensors)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v does not wrap ErrMalformed", err)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err %T is not a *FormatError", err)
			}
			if fe.Path != path || fe.Tensor != c.tensor || fe.Field != c.field {
				t.Errorf("path/tensor/field = %q/%q/%q, want %q/%q/%q (%v)", fe.Path, fe.Tensor, fe.Field, path, c.tensor, c.field, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, path) || !strings.Contains(msg, c.msg) || !strings.Contains(msg, c.field) {
				t.Errorf("message %q lacks path, field %q or %q", msg, c.field, c.msg)
			}
			if c.tensor != "" && !strings.Contains(msg, `tensor "`+c.tensor+`"`) {
				t.Errorf("message %q does not name tensor %q", msg, c.tensor)
			}
		})
	}
}

func TestLongNameTruncatedInError(t *testing.T) {
	name := strings.Repeat("é", 10000)
	img := image(`{"`+name+`":{"dtype":"Q","shape":[],"data_offsets":[0,0]}}`, nil)
	_, err := NewFile("f", bytes.NewReader(img), int64(len(img)))
	if !errors.Is(err, ErrMalformed) {
		t.Fatal(err)
	}
	if len(err.Error()) > 400 {
		t.Fatalf("error message is %d bytes", len(err.Error()))
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrMalformed) {
		t.Errorf("directory: %v", err)
	}
	p := filepath.Join(dir, "bad.safetensors")
	os.WriteFile(p, image(`{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, nil), 0o644)
	_, err := Open(p)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `"t"`) {
		t.Errorf("err = %v", err)
	}
}

// A file truncated after Open: reads fail with an error, not a panic or
// short data.
func TestTruncatedAfterOpen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(p, goldenImage(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(p, 324); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.ReadFloat32("a"); err == nil {
		t.Error("read past truncation succeeded")
	}
	if _, err := f.ReadRaw("d"); err == nil {
		t.Error("raw read past truncation succeeded")
	}
}
