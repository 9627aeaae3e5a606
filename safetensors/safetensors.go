// Package safetensors reads and writes the Hugging Face safetensors format
// (https://huggingface.co/docs/safetensors), single files and sharded
// checkpoints described by a model.safetensors.index.json.
//
// File layout: 8 bytes little-endian u64 N, then N bytes of a UTF-8 JSON
// object (the header, optionally padded with trailing spaces), then the data
// section. Every header entry other than "__metadata__" describes one tensor:
//
//	{"dtype":"F16","shape":[2,3],"data_offsets":[BEGIN,END]}
//
// with BEGIN/END byte offsets relative to the start of the data section,
// half-open [BEGIN, END). Data is little-endian, row-major (C order).
//
// Open validates the whole header before returning: header length bounded by
// MaxHeaderSize and by the file size, strict JSON with no duplicate keys,
// known dtypes, non-negative dimensions, element count × dtype size equal to
// END−BEGIN (with overflow checks), and tensors covering the data section
// contiguously without overlap or holes, as the format requires. Tensor data
// is read lazily with ReadAt; no allocation is sized by an unchecked value.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxHeaderSize bounds the JSON header length in bytes (the same limit,
// 100 MB, as the reference Rust implementation).
const MaxHeaderSize = 100_000_000

// maxJSONDepth bounds nesting in headers and index files. A valid header
// nests 3 deep (object → tensor object → shape array).
const maxJSONDepth = 64

// Sentinel errors. Every error returned by this package that is caused by
// the content of a file wraps ErrMalformed (through *FormatError).
var (
	// ErrMalformed: the file or index violates the format.
	ErrMalformed = errors.New("malformed safetensors")
	// ErrUnsupportedDType: the tensor's dtype cannot be converted as asked
	// (e.g. ReadFloat32 of an I64 tensor).
	ErrUnsupportedDType = errors.New("unsupported dtype")
	// ErrNotFound: no tensor of that name, or no checkpoint in a directory.
	ErrNotFound = errors.New("not found")
	// ErrShape: a destination buffer has the wrong length.
	ErrShape = errors.New("wrong destination length")
)

// FormatError describes one validation failure. It wraps a sentinel
// (ErrMalformed unless stated otherwise) so callers can use errors.Is.
type FormatError struct {
	Path   string // file the problem is in
	Tensor string // tensor (or index key) concerned; "" if none
	Field  string // header field, e.g. "dtype", "shape[1]", "data_offsets", "header length"
	Msg    string // what is wrong
	Err    error  // sentinel
}

func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	b.WriteString(e.Path)
	if e.Tensor != "" {
		b.WriteString(": tensor ")
		b.WriteString(quoteShort(e.Tensor))
	}
	if e.Field != "" {
		b.WriteString(": field ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *FormatError) Unwrap() error { return e.Err }

// quoteShort quotes s for an error message, truncating very long names
// (untrusted input must not make error strings unbounded).
func quoteShort(s string) string {
	const max = 128
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// DType is a safetensors element type as spelled in the header.
type DType string

// Element types. F32, F16 and BF16 convert to float32; the others are
// parsed and validated, and readable with ReadRaw.
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	F8E5M2  DType = "F8_E5M2"
	F8E4M3  DType = "F8_E4M3"
	I16     DType = "I16"
	U16     DType = "U16"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I32     DType = "I32"
	U32     DType = "U32"
	F32     DType = "F32"
	F64     DType = "F64"
	I64     DType = "I64"
	U64     DType = "U64"
	invalid DType = ""
)

// Size is the element size in bytes, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case BOOL, U8, I8, F8E5M2, F8E4M3:
		return 1
	case I16, U16, F16, BF16:
		return 2
	case I32, U32, F32:
		return 4
	case F64, I64, U64:
		return 8
	}
	return 0
}

// Float reports whether ReadFloat32 supports the dtype (F32, F16, BF16).
func (d DType) Float() bool { return d == F32 || d == F16 || d == BF16 }

// TensorInfo describes one tensor of a file. Begin and End are byte offsets
// into the data section, half-open [Begin, End).
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64 // row-major; [] is a scalar; a 0 dimension is an empty tensor
	Begin int64
	End   int64
}

// NumElements is the product of the dimensions (1 for a scalar). Open has
// checked that it does not overflow.
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is one open safetensors file. Tensors and Metadata are filled by
// Open and must not be modified by the caller. Methods are safe for
// concurrent use (reads go through ReadAt) until Close.
type File struct {
	Path     string
	Tensors  map[string]TensorInfo
	Metadata map[string]string // the "__metadata__" entry; nil if absent

	// DataOffset is the absolute file offset of the data section (8 + N).
	DataOffset int64

	r      io.ReaderAt
	closer io.Closer
}

// Open opens and validates a safetensors file. Tensor data is not read until
// ReadRaw / ReadFloat32. The caller must Close the file.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &FormatError{Path: path, Msg: "not a regular file", Err: ErrMalformed}
	}
	sf, err := NewFile(path, f, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	sf.closer = f
	return sf, nil
}

// NewFile parses a safetensors image of size bytes readable through r (for
// example an embedded byte slice through bytes.NewReader). name is used in
// error messages. Close on the result does not close r.
func NewFile(name string, r io.ReaderAt, size int64) (*File, error) {
	if size < 8 {
		return nil, &FormatError{Path: name, Field: "header length",
			Msg: fmt.Sprintf("file is %d bytes, shorter than the 8-byte header length", size), Err: ErrMalformed}
	}
	var lb [8]byte
	if err := readFull(r, lb[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: %s: reading header length: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > MaxHeaderSize {
		return nil, &FormatError{Path: name, Field: "header length",
			Msg: fmt.Sprintf("%d exceeds the limit of %d bytes", n, MaxHeaderSize), Err: ErrMalformed}
	}
	if n > uint64(size-8) {
		return nil, &FormatError{Path: name, Field: "header length",
			Msg: fmt.Sprintf("%d exceeds the %d bytes that follow it in the file", n, size-8), Err: ErrMalformed}
	}
	header := make([]byte, n) // bounded above
	if err := readFull(r, header, 8); err != nil {
		return nil, fmt.Errorf("safetensors: %s: reading header: %w", name, err)
	}
	dataLen := size - 8 - int64(n)
	tensors, meta, err := parseHeader(name, header, dataLen)
	if err != nil {
		return nil, err
	}
	return &File{Path: name, Tensors: tensors, Metadata: meta, DataOffset: 8 + int64(n), r: r}, nil
}

func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// Close releases the underlying file (if Open opened it).
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	c := f.closer
	f.closer = nil
	return c.Close()
}

// Names returns the tensor names, sorted. The slice is the caller's.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Tensors))
	for n := range f.Tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Info returns the description of a tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	t, ok := f.Tensors[name]
	return t, ok
}

func (f *File) lookup(name string) (TensorInfo, error) {
	t, ok := f.Tensors[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("safetensors: %s: tensor %s: %w", f.Path, quoteShort(name), ErrNotFound)
	}
	return t, nil
}

// ReadRaw returns a newly allocated copy of the tensor's bytes
// (little-endian, row-major), len = End-Begin. The caller owns it.
func (f *File) ReadRaw(name string) ([]byte, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, t.End-t.Begin) // validated against the file size by Open
	if err := readFull(f.r, buf, f.DataOffset+t.Begin); err != nil {
		return nil, fmt.Errorf("safetensors: %s: tensor %s: reading data: %w", f.Path, quoteShort(name), err)
	}
	return buf, nil
}

// ReadFloat32 reads an F32, F16 or BF16 tensor converted to float32 (exact
// conversion). It returns a new slice of NumElements values in row-major
// order and a copy of the shape; the caller owns both.
func (f *File) ReadFloat32(name string) ([]float32, []int64, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	if !t.DType.Float() {
		return nil, nil, fmt.Errorf("safetensors: %s: tensor %s: dtype %s to float32: %w", f.Path, quoteShort(name), t.DType, ErrUnsupportedDType)
	}
	out := make([]float32, (t.End-t.Begin)/int64(t.DType.Size()))
	if err := f.readFloat32(t, out); err != nil {
		return nil, nil, err
	}
	return out, slices.Clone(t.Shape), nil
}

// ReadFloat32Into is ReadFloat32 into a caller-owned dst, which must have
// exactly NumElements values. It allocates only a bounded scratch buffer.
func (f *File) ReadFloat32Into(name string, dst []float32) error {
	t, err := f.lookup(name)
	if err != nil {
		return err
	}
	if !t.DType.Float() {
		return fmt.Errorf("safetensors: %s: tensor %s: dtype %s to float32: %w", f.Path, quoteShort(name), t.DType, ErrUnsupportedDType)
	}
	if n := (t.End - t.Begin) / int64(t.DType.Size()); int64(len(dst)) != n {
		return fmt.Errorf("safetensors: %s: tensor %s: destination has %d values, tensor %d: %w", f.Path, quoteShort(name), len(dst), n, ErrShape)
	}
	return f.readFloat32(t, dst)
}

// chunkBytes is the scratch size used while converting (multiple of 8).
const chunkBytes = 1 << 18

func (f *File) readFloat32(t TensorInfo, out []float32) error {
	size := int64(t.DType.Size())
	total := t.End - t.Begin
	if t.DType == F32 && nativeLittleEndian {
		if err := readFull(f.r, float32Bytes(out), f.DataOffset+t.Begin); err != nil {
			return fmt.Errorf("safetensors: %s: tensor %s: reading data: %w", f.Path, quoteShort(t.Name), err)
		}
		return nil
	}
	scratch := make([]byte, min(total, chunkBytes))
	for off := int64(0); off < total; {
		n := min(total-off, chunkBytes)
		b := scratch[:n]
		if err := readFull(f.r, b, f.DataOffset+t.Begin+off); err != nil {
			return fmt.Errorf("safetensors: %s: tensor %s: reading data: %w", f.Path, quoteShort(t.Name), err)
		}
		dst := out[off/size : (off+n)/size]
		switch t.DType {
		case F32:
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		case F16:
			F16BytesToFloat32(dst, b)
		case BF16:
			BF16BytesToFloat32(dst, b)
		}
		off += n
	}
	return nil
}

// ---- header parsing ----

func parseHeader(path string, header []byte, dataLen int64) (map[string]TensorInfo, map[string]string, error) {
	bad := func(tensor, field, format string, args ...any) error {
		return &FormatError{Path: path, Tensor: tensor, Field: field, Msg: fmt.Sprintf(format, args...), Err: ErrMalformed}
	}
	if len(header) == 0 {
		return nil, nil, bad("", "header", "header is empty")
	}
	if header[0] != '{' {
		return nil, nil, bad("", "header", "header must start with '{', found %s", strconv.QuoteRune(rune(header[0])))
	}
	if !utf8.Valid(header) {
		return nil, nil, bad("", "header", "header is not valid UTF-8")
	}
	if err := checkJSON(path, header, "header"); err != nil {
		return nil, nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(header, &top); err != nil {
		return nil, nil, bad("", "header", "not a JSON object: %v", err)
	}
	tensors := make(map[string]TensorInfo, len(top))
	var meta map[string]string
	for name, raw := range top {
		if name == "__metadata__" {
			m, err := parseMetadata(path, raw)
			if err != nil {
				return nil, nil, err
			}
			meta = m
			continue
		}
		if name == "" {
			return nil, nil, bad("", "name", "tensor name is empty")
		}
		t, err := parseTensor(path, name, raw, dataLen)
		if err != nil {
			return nil, nil, err
		}
		tensors[name] = t
	}
	// The data section must be covered exactly: sorted by offsets, each
	// tensor starts where the previous ended, the first at 0, the last ends
	// at the end of the file (the spec forbids holes; overlaps are errors).
	order := make([]TensorInfo, 0, len(tensors))
	for _, t := range tensors {
		order = append(order, t)
	}
	slices.SortFunc(order, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return cmpInt(a.Begin, b.Begin)
		}
		if a.End != b.End {
			return cmpInt(a.End, b.End)
		}
		return strings.Compare(a.Name, b.Name)
	})
	var pos int64
	prev := ""
	for _, t := range order {
		switch {
		case t.Begin < pos:
			return nil, nil, bad(t.Name, "data_offsets", "[%d, %d) overlaps tensor %s which ends at %d", t.Begin, t.End, quoteShort(prev), pos)
		case t.Begin > pos:
			if prev == "" {
				return nil, nil, bad(t.Name, "data_offsets", "data section bytes [0, %d) belong to no tensor (holes are not allowed)", t.Begin)
			}
			return nil, nil, bad(t.Name, "data_offsets", "data section bytes [%d, %d) between tensor %s and this one belong to no tensor (holes are not allowed)", pos, t.Begin, quoteShort(prev))
		}
		pos = t.End
		prev = t.Name
	}
	if pos != dataLen {
		if prev == "" {
			return nil, nil, bad("", "data section", "%d bytes of data but no tensors", dataLen)
		}
		return nil, nil, bad(prev, "data section", "tensors end at byte %d of a %d-byte data section (trailing bytes are not allowed)", pos, dataLen)
	}
	return tensors, meta, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func parseMetadata(path string, raw json.RawMessage) (map[string]string, error) {
	bad := func(field, format string, args ...any) error {
		return &FormatError{Path: path, Tensor: "__metadata__", Field: field, Msg: fmt.Sprintf(format, args...), Err: ErrMalformed}
	}
	if string(raw) == "null" {
		return nil, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, bad("", "must be an object of strings, found %s", jsonKind(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, bad("", "%v", err)
	}
	meta := make(map[string]string, len(m))
	for k, v := range m {
		if len(v) == 0 || v[0] != '"' {
			return nil, bad(quoteShort(k), "value must be a string, found %s", jsonKind(v))
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, bad(quoteShort(k), "%v", err)
		}
		meta[k] = s
	}
	return meta, nil
}

func parseTensor(path, name string, raw json.RawMessage, dataLen int64) (TensorInfo, error) {
	bad := func(field, format string, args ...any) error {
		return &FormatError{Path: path, Tensor: name, Field: field, Msg: fmt.Sprintf(format, args...), Err: ErrMalformed}
	}
	t := TensorInfo{Name: name}
	if len(raw) == 0 || raw[0] != '{' {
		return t, bad("", "entry must be an object, found %s", jsonKind(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return t, bad("", "%v", err)
	}
	for k := range m {
		if k != "dtype" && k != "shape" && k != "data_offsets" {
			return t, bad(quoteShort(k), "unknown field (expected dtype, shape, data_offsets)")
		}
	}
	// dtype
	dt, ok := m["dtype"]
	if !ok {
		return t, bad("dtype", "missing")
	}
	if len(dt) == 0 || dt[0] != '"' {
		return t, bad("dtype", "must be a string, found %s", jsonKind(dt))
	}
	var ds string
	if err := json.Unmarshal(dt, &ds); err != nil {
		return t, bad("dtype", "%v", err)
	}
	t.DType = DType(ds)
	if t.DType.Size() == 0 {
		return t, bad("dtype", "unknown dtype %s", quoteShort(ds))
	}
	// shape
	sh, ok := m["shape"]
	if !ok {
		return t, bad("shape", "missing")
	}
	shape, err := parseIntArray(sh)
	if err != nil {
		return t, bad("shape"+err.field, "%s", err.msg)
	}
	for i, d := range shape {
		if d < 0 {
			return t, bad(fmt.Sprintf("shape[%d]", i), "dimension %d is negative", d)
		}
	}
	t.Shape = shape
	// data_offsets
	do, ok := m["data_offsets"]
	if !ok {
		return t, bad("data_offsets", "missing")
	}
	offs, err := parseIntArray(do)
	if err != nil {
		return t, bad("data_offsets"+err.field, "%s", err.msg)
	}
	if len(offs) != 2 {
		return t, bad("data_offsets", "must have 2 elements [begin, end], found %d", len(offs))
	}
	t.Begin, t.End = offs[0], offs[1]
	switch {
	case t.Begin < 0:
		return t, bad("data_offsets[0]", "begin %d is negative", t.Begin)
	case t.End < t.Begin:
		return t, bad("data_offsets", "end %d is before begin %d", t.End, t.Begin)
	case t.End > dataLen:
		return t, bad("data_offsets[1]", "end %d is past the %d-byte data section", t.End, dataLen)
	}
	// element count × size must equal the byte length, without overflow.
	numel := int64(1)
	zero := false
	for _, d := range shape {
		if d == 0 {
			zero = true
		}
	}
	if zero {
		numel = 0
	} else {
		for i, d := range shape {
			if numel > math.MaxInt64/d {
				return t, bad(fmt.Sprintf("shape[%d]", i), "element count overflows int64 (shape %v)", shape)
			}
			numel *= d
		}
	}
	size := int64(t.DType.Size())
	if numel > math.MaxInt64/size {
		return t, bad("shape", "byte size overflows int64 (shape %v, dtype %s)", shape, t.DType)
	}
	if nb := numel * size; nb != t.End-t.Begin {
		return t, bad("data_offsets", "[%d, %d) is %d bytes but shape %v of %s needs %d", t.Begin, t.End, t.End-t.Begin, shape, t.DType, nb)
	}
	return t, nil
}

type fieldErr struct{ field, msg string }

// parseIntArray parses a JSON array of integer literals (no fraction or
// exponent) that fit in int64.
func parseIntArray(raw json.RawMessage) ([]int64, *fieldErr) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, &fieldErr{"", "must be an array of integers, found " + jsonKind(raw)}
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, &fieldErr{"", err.Error()}
	}
	out := make([]int64, len(elems))
	for i, e := range elems {
		v, err := strconv.ParseInt(string(e), 10, 64)
		if err != nil {
			return nil, &fieldErr{fmt.Sprintf("[%d]", i), fmt.Sprintf("%s is not an integer in int64 range", quoteShort(string(e)))}
		}
		out[i] = v
	}
	return out, nil
}

func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// checkJSON checks that b (a "header" or an "index", as named in
// errors) is exactly one syntactically valid JSON value,
// nested at most maxJSONDepth deep, with no duplicate key in any object.
// encoding/json silently keeps the last of duplicate keys; the safetensors
// format forbids them.
func checkJSON(path string, b []byte, what string) error {
	type frame struct {
		obj     bool
		wantKey bool
		key     string
		keys    map[string]struct{}
	}
	bad := func(stack []frame, field, format string, args ...any) error {
		e := &FormatError{Path: path, Field: field, Msg: fmt.Sprintf(format, args...), Err: ErrMalformed}
		if len(stack) > 1 && stack[0].obj {
			e.Tensor = stack[0].key
		}
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []frame
	done := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if !done {
				return bad(stack, what, "unexpected end of JSON")
			}
			return nil
		}
		if err != nil {
			return bad(stack, what, "invalid JSON: %v", err)
		}
		if done {
			return bad(nil, what, "data after the JSON object")
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				if len(stack) == 0 {
					done = true
				} else if p := &stack[len(stack)-1]; p.obj {
					p.wantKey = true
				}
				continue
			}
			k, ok := tok.(string)
			if !ok {
				return bad(stack, what, "invalid JSON: object key is not a string")
			}
			f := &stack[n-1]
			if _, dup := f.keys[k]; dup {
				if n == 1 {
					return &FormatError{Path: path, Tensor: k, Msg: "duplicate key", Err: ErrMalformed}
				}
				return bad(stack, quoteShort(k), "duplicate key")
			}
			f.keys[k] = struct{}{}
			f.key = k
			f.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxJSONDepth {
				return bad(stack, what, "JSON nested deeper than %d", maxJSONDepth)
			}
			obj := tok == json.Delim('{')
			fr := frame{obj: obj, wantKey: obj}
			if obj {
				fr.keys = make(map[string]struct{})
			}
			stack = append(stack, fr)
			continue
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
		}
		// a value (scalar or just-closed container) completed
		if len(stack) == 0 {
			done = true
		} else if p := &stack[len(stack)-1]; p.obj {
			p.wantKey = true
		}
	}
}
