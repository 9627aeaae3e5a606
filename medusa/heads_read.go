package medusa

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/specgate/specgate/safetensors"
)

// weightReader reads a heads weights file's tensors by canonical name (the
// stored name without its optional prefix), with the checks and error
// messages both directory kinds (Medusa, Hydra) share: dtype (F32, F16,
// BF16, or I8 with a per-row "<name>_scale"), shape against the target,
// finite values.
type weightReader struct {
	set   *safetensors.File
	file  string            // the weights file, for errors
	names map[string]string // canonical -> stored name
	H, V  int               // target hidden and vocabulary sizes, for errors
	// missing describes the layout a missing tensor belongs to ("3 heads x
	// 2 layers in DIR/config.json").
	missing string
	// i8 collects the I8 weights read (read returns nil values for them:
	// the CPU runs the int8 kernels on q and scale).
	i8 map[string]int8Mat
}

// read returns the float32 values of tensor c of the given shape, or nil
// for an I8 weight (then in r.i8[c]).
func (r *weightReader) read(c string, shape []int64) ([]float32, error) {
	wPath, set, names, H, V := r.file, r.set, r.names, r.H, r.V
	n, ok := names[c]
	if !ok {
		return nil, fmt.Errorf("%s: tensor %q: missing (%s): %w", wPath, c, r.missing, ErrFormat)
	}
	info, _ := set.Info(n)
	scaleName := names[c+"_scale"]
	if err := r.checkDType(c, len(shape)); err != nil {
		return nil, err
	}
	if len(info.Shape) != len(shape) || !sameShape(info.Shape, shape) {
		err := ErrFormat
		if len(info.Shape) == len(shape) {
			err = ErrMismatch // right rank, other sizes: another model's heads
		}
		return nil, fmt.Errorf("%s: tensor %q: shape %v, want %v for target hidden_size %d, vocab_size %d: %w", wPath, n, info.Shape, shape, H, V, err)
	}
	if info.DType == safetensors.I8 {
		// no float32 copy: the CPU runs the int8 kernels on q and
		// scale (deviceWeights dequantizes for a device upload); the
		// values are checked as the float32 weights are
		q, sc, err := readInt8Rows(set, wPath, n, scaleName, shape)
		if err != nil {
			return nil, err
		}
		cols := int(shape[1])
		for i, v := range q {
			if f := dequant(v, sc[i/cols]); math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return nil, fmt.Errorf("%s: tensor %q: element %d is %v: %w", wPath, n, i, f, ErrFormat)
			}
		}
		r.i8[c] = int8Mat{q, sc}
		return nil, nil
	}
	buf := make([]float32, info.NumElements())
	if err := set.ReadFloat32Into(n, buf); err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %w: %w", wPath, n, ErrFormat, err)
	}
	for i, v := range buf {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%s: tensor %q: element %d is %v: %w", wPath, n, i, v, ErrFormat)
		}
	}
	return buf, nil
}

// int8Only2D says where I8 goes (the error for an I8 vector or its scale).
const int8Only2D = "I8 is for 2-D weights (with a per-row \"<name>_scale\"); biases must be F32, F16 or BF16"

// checkDType checks the dtype of the present tensor c, a parameter of
// rank dims: F32, F16 or BF16, or I8 for a 2-D weight with its per-row
// scale tensor "<c>_scale" (a scale goes with an I8 weight only). read
// checks it before reading; Check runs it on every tensor without reading,
// so that config check and Load refuse the same files.
func (r *weightReader) checkDType(c string, dims int) error {
	n := r.names[c]
	info, _ := r.set.Info(n)
	scaleName, hasScale := r.names[c+"_scale"]
	switch {
	case info.DType == safetensors.I8 && dims != 2:
		return fmt.Errorf("%s: tensor %q: dtype I8: %s: %w", r.file, n, int8Only2D, ErrFormat)
	case info.DType == safetensors.I8 && !hasScale:
		rows := int64(0)
		if len(info.Shape) > 0 {
			rows = info.Shape[0]
		}
		return fmt.Errorf("%s: tensor %q: dtype I8 needs a per-row scale tensor %q [%d] (int8 weights: row r = int8 values x scale[r]): %w", r.file, n, c+"_scale", rows, ErrFormat)
	case info.DType != safetensors.I8 && !info.DType.Float():
		return fmt.Errorf("%s: tensor %q: dtype %s unsupported (want F32, F16, BF16, or I8 with a %q tensor): %w", r.file, n, info.DType, c+"_scale", ErrFormat)
	case info.DType != safetensors.I8 && hasScale:
		return fmt.Errorf("%s: tensor %q: a scale tensor %q for a %s weight (scales go with I8 weights only): %w", r.file, scaleName, scaleName, info.DType, ErrFormat)
	}
	return nil
}

// canonicalNames maps a weights file's canonical names (the stored names
// without an optional prefix) to the stored ones. Two stored names of one
// parameter are an error, so is a name known refuses (it gets the canonical
// and the stored name; names are tried in sorted order) and a "<name>_scale"
// without its weight.
func canonicalNames(set *safetensors.File, wPath, prefix string, known func(c, stored string) error) (map[string]string, error) {
	names := map[string]string{} // canonical -> stored
	for _, n := range set.Names() {
		c := strings.TrimPrefix(n, prefix)
		if prev, dup := names[c]; dup {
			return nil, fmt.Errorf("%s: tensors %q and %q are the same parameter: %w", wPath, prev, n, ErrFormat)
		}
		names[c] = n
	}
	canon := sortedKeys(names)
	for _, c := range canon {
		if err := known(c, names[c]); err != nil {
			return nil, err
		}
	}
	for _, c := range canon {
		if base, ok := strings.CutSuffix(c, "_scale"); ok {
			if _, has := names[base]; !has {
				return nil, fmt.Errorf("%s: tensor %q: a scale without its weight %q: %w", wPath, names[c], base, ErrFormat)
			}
		}
	}
	return names, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkDTypes runs checkDType on every tensor but the scales (checked with
// their weights), in sorted order; dims gives a parameter's rank.
func (r *weightReader) checkDTypes(dims func(c string) int) error {
	for _, c := range sortedKeys(r.names) {
		if strings.HasSuffix(c, "_scale") {
			continue
		}
		if err := r.checkDType(c, dims(c)); err != nil {
			return err
		}
	}
	return nil
}

// allOrNone reports whether all K heads have tensor name(i), an error
// naming a missing one when some but not all have it (what: what the
// tensor is, for the message).
func (r *weightReader) allOrNone(K int, name func(int) string, what string) (bool, error) {
	n := 0
	for i := range K {
		if r.names[name(i)] != "" {
			n++
		}
	}
	if n != 0 && n != K {
		for i := range K {
			if c := name(i); r.names[c] == "" {
				return false, fmt.Errorf("%s: tensor %q: missing (%d of %d heads have %s: all or none): %w", r.file, c, n, K, what, ErrFormat)
			}
		}
	}
	return n == K, nil
}

// floats returns tensor c as float32 values whatever its dtype (an I8
// weight dequantized): for weights used only at load time.
func (r *weightReader) floats(c string, shape []int64) ([]float32, error) {
	v, err := r.read(c, shape)
	if err != nil || v != nil {
		return v, err
	}
	q := r.i8[c]
	return dequantRows(q.q, q.scale, int(shape[1])), nil
}
