package medusa

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// int8Reference dequantizes the shipped heads' I8 tensor name straight from
// the file: w[r][c] = float32(q[r][c]) * scale[r] (the format's definition,
// docs/medusa.md), computed here without the loader.
func int8Reference(t *testing.T, set *safetensors.File, name string) ([]float32, int) {
	t.Helper()
	info, ok := set.Info(name)
	if !ok || info.DType != safetensors.I8 || len(info.Shape) != 2 {
		t.Fatalf("%s: %+v, want an I8 matrix", name, info)
	}
	raw, err := set.ReadRaw(name)
	if err != nil {
		t.Fatal(err)
	}
	scale, _, err := set.ReadFloat32(name + "_scale")
	if err != nil {
		t.Fatal(err)
	}
	cols := int(info.Shape[1])
	out := make([]float32, len(raw))
	for i, b := range raw {
		out[i] = float32(int8(b)) * scale[i/cols]
	}
	return out, cols
}

func sameBits(a, b []float32) (int, bool) {
	if len(a) != len(b) {
		return -1, false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, true
}

// TestDeviceUploadInt8: the matrices the shipped int8 heads hand a
// device backend (engine.DraftHeads W and Proj, what the CUDA backend
// uploads) are the file's int8 values times their row scales, bit for bit,
// for the full head vocabulary and a vocabulary limit (its rows are the
// file's rows of its tokens).
func TestDeviceUploadInt8(t *testing.T) {
	target, hb := loadHostHeadsTarget(t, 256)
	defer target.Close()
	set, err := safetensors.Open(filepath.Join(shippedHeads, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var fileIDs []int32 // file projection row r is token fileIDs[r] (the full load's IDs)
	for _, vocab := range []int{0, 256} {
		p, err := New(target, Spec{Heads: shippedHeads, Tree: "16", VocabLimit: vocab})
		if err != nil {
			t.Fatal(err)
		}
		id := p.DeviceHeads(target.Backend())
		if id == 0 {
			t.Fatalf("vocab %d: heads not registered: %v", vocab, p.DeviceError())
		}
		d := hb.sets[id-1]
		if vocab == 0 {
			fileIDs = d.IDs
			if len(fileIDs) != p.Heads().Config.Specgate.HeadVocab {
				t.Fatalf("full load: %d ids, want head_vocab %d", len(fileIDs), p.Heads().Config.Specgate.HeadVocab)
			}
		}
		for i := range d.NumHeads {
			for j := range d.Layers {
				ref, _ := int8Reference(t, set, fmt.Sprintf("%d.%d.linear.weight", i, j))
				if k, ok := sameBits(d.W[i][j], ref); !ok {
					t.Fatalf("vocab %d head %d layer %d: uploaded weight differs from q x scale at %d", vocab, i, j, k)
				}
			}
			full, cols := int8Reference(t, set, fmt.Sprintf("%d.%d.weight", i, d.Layers))
			want := make([]float32, 0, len(d.IDs)*cols)
			for _, tok := range d.IDs {
				r, ok := slices.BinarySearch(fileIDs, tok)
				if !ok {
					t.Fatalf("vocab %d: token %d not among the file's rows", vocab, tok)
				}
				want = append(want, full[r*cols:(r+1)*cols]...)
			}
			if k, ok := sameBits(d.Proj[i], want); !ok {
				t.Fatalf("vocab %d head %d: uploaded projection differs from q x scale at %d", vocab, i, k)
			}
		}
	}
}

// TestCPULoadKeepsNoFloatCopy: loaded for the CPU (the int8 kernels), the
// shipped int8 heads keep no float32 copy of their int8 weights: the
// device upload dequantizes them when a backend takes the heads.
func TestCPULoadKeepsNoFloatCopy(t *testing.T) {
	target, _ := shipped(t)
	for _, vocab := range []int{0, 256} {
		h, err := Load(shippedHeads, target, LoadOptions{VocabLimit: vocab})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i := range h.wRaw {
			for _, w := range h.wRaw[i] {
				n += len(w)
			}
		}
		for _, p := range h.projRaw {
			n += len(p)
		}
		if n != 0 {
			t.Errorf("vocab %d: the int8 heads keep %d float32 values (%.1f MB) beside their int8 matrices, want none", vocab, n, float64(4*n)/1e6)
		}
	}
}
