package main

import (
	"strings"
	"testing"
)

// int4 is a CUDA-only weight format: asking the CPU backend for it fails
// at once with an error that says so (before any model is loaded or run).
func TestBenchInt4NeedsCUDA(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func([]string) error
		args []string
		want string
	}{
		{"bench decode", runBenchDecode, []string{"--backend", "cpu", "--shape", "tiny", "--random-weights", "--quantize", "int4", "--tokens", "1"},
			"--quantize int4 needs the cuda backend"},
		{"bench quant", runBenchQuant, []string{"--backend", "cpu", "--quantize", "int4", "--prompts", "1"},
			"want int8, or int4 on cuda"},
		{"bench quant int3", runBenchQuant, []string{"--backend", "cuda", "--quantize", "int3", "--prompts", "1"},
			`--quantize "int3"`},
	} {
		err := c.run(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want an error containing %q", c.name, c.args, err, c.want)
		}
	}
}
