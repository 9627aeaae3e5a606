package medusa

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

func TestParseTree(t *testing.T) {
	c := Config{NumHeads: 3}
	c.Specgate.Tree = [][]int{{0}, {1}, {0, 0}, {0, 0, 0}}
	c.Specgate.Nodes = 3
	for _, tc := range []struct {
		spec, want string
	}{
		{"", "[[0] [1] [0 0]]"},
		{"2", "[[0] [1]]"},
		{"4", "[[0] [1] [0 0] [0 0 0]]"},
		{"chain", "[[0] [0 0] [0 0 0]]"},
		{"chain:2", "[[0] [0 0]]"},
		{"[[0],[2],[0,1]]", "[[0] [2] [0 1]]"},
	} {
		tr, err := ParseTree(tc.spec, c)
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		if got := fmt.Sprint(tr.Paths); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.spec, got, tc.want)
		}
	}
	for _, bad := range []string{"0", "5", "chain:4", "chain:x", "[[0,0]]", "[]", "[[0]", "wide"} {
		if _, err := ParseTree(bad, c); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}

func TestCheck(t *testing.T) {
	if err := Check(Spec{Heads: "../models/specgate-target-medusa", Tree: "8", VocabLimit: 2048}, 384, 8192); err != nil {
		t.Fatal(err)
	}
	if err := Check(Spec{Heads: "testdata/golden/own"}, 64, 320); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s             Spec
		hidden, vocab int
		is            error
		want          string
	}{
		{Spec{Heads: "testdata/golden/own"}, 64, 32000, ErrMismatch, `"0.2.weight"`},
		{Spec{Heads: "testdata/golden/own"}, 128, 0, ErrMismatch, "hidden_size 128"},
		{Spec{Heads: "testdata/golden/own", Tree: "chain:9"}, 0, 0, ErrFormat, "chain:9"},
		{Spec{Heads: "testdata/golden/own", VocabLimit: 10}, 0, 0, ErrFormat, "token_frequency"},
		{Spec{Heads: "testdata/golden/pt"}, 0, 0, ErrFormat, "medusa_lm_head.pt"},
		{Spec{Heads: "testdata/nowhere"}, 0, 0, ErrFormat, "nowhere"},
	} {
		err := Check(tc.s, tc.hidden, tc.vocab)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v, %d, %d) = %v, want %v naming %q", tc.s, tc.hidden, tc.vocab, err, tc.is, tc.want)
		}
	}
	d := copyDir(t, "testdata/golden/own")
	os.WriteFile(filepath.Join(d, "config.json"), []byte(`{"medusa_num_heads": 3}`), 0o644)
	if err := Check(Spec{Heads: d}, 0, 0); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "medusa_num_layers: missing") {
		t.Errorf("err = %v", err)
	}
}

// TestMedusaCheckAgreesWithLoad: Check refuses the incomplete Medusa
// directories Load refuses, naming the same tensor: a missing block weight
// or bias, one head without its projection, an I8 weight without its
// scale, a tensor of a head beyond medusa_num_heads (review H2: Check
// checked shapes by name suffix only), an I8 bias with or without a scale
// (review H5).
func TestMedusaCheckAgreesWithLoad(t *testing.T) {
	base := goldenBase(t)
	for _, c := range []struct {
		name, src string
		edit      func([]safetensors.Tensor) []safetensors.Tensor
		want      string // the tensor both errors name
		also      string // and a phrase of both
	}{
		{"block", "own", dropTensor("1.1.linear.weight"), `"1.1.linear.weight"`, "missing"},
		{"bias", "own", dropTensor("2.0.linear.bias"), `"2.0.linear.bias"`, "missing"},
		{"projection", "own", dropTensor("1.2.weight"), `"1.2.weight"`, "2 of 3 heads have a vocabulary projection"},
		{"scale", "int8", dropTensor("0.1.linear.weight_scale"), `"0.1.linear.weight"`, "per-row scale"},
		{"int8 bias", "int8", int8Bias("1.0.linear.bias", false), `"1.0.linear.bias"`, "I8 is for 2-D weights"},
		{"int8 bias with scale", "int8", int8Bias("1.0.linear.bias", true), `"1.0.linear.bias_scale"`, "I8 is for 2-D weights"},
		{"head beyond", "own", func(ts []safetensors.Tensor) []safetensors.Tensor {
			for _, x := range ts {
				if x.Name == "0.0.linear.weight" {
					return append(ts, safetensors.Tensor{Name: "7.0.linear.weight", DType: x.DType, Shape: x.Shape, Data: x.Data})
				}
			}
			return ts
		}, `"7.0.linear.weight"`, "not a parameter of 3 heads"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, filepath.Join("testdata/golden", c.src))
			rewrite(t, dir, c.edit)
			cerr := Check(Spec{Heads: dir}, 64, 320)
			_, lerr := Load(dir, base, LoadOptions{})
			bothRefuse(t, c.name, cerr, lerr, c.want, c.also)
		})
	}
}
