package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/specgate/specgate/engine/gguf"
)

func init() {
	register("export", "convert a model directory: export gguf MODEL_DIR OUT.gguf [--type f16|f32]", runExport)
}

const exportUsage = `usage: specgate export gguf MODEL_DIR OUT.gguf [--type f16|f32]

Writes a Llama-family Hugging Face model directory (config.json, safetensors,
tokenizer.json) as one GGUF file for llama.cpp, ollama and LM Studio: weights
as f16 (default) or f32 (norms always f32), q/k rows permuted to GGUF's rotary
layout, the BPE tokenizer and chat template included.
`

func runExport(args []string) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), exportUsage)
		fs.PrintDefaults()
	}
	typ := fs.String("type", "f16", "element type of the matrices: f16 or f32")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || pos[0] != "gguf" {
		fs.Usage()
		return usageError("export: want the format gguf as first argument")
	}
	if len(pos) != 3 {
		fs.Usage()
		return usageError("export gguf: want MODEL_DIR and OUT.gguf")
	}
	t, err := gguf.ParseType(*typ)
	if err != nil {
		return err
	}
	dir, out := pos[1], pos[2]
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("export gguf: %s: not a model directory", dir)
	}
	start := time.Now()
	st, err := gguf.Export(dir, out, t)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d tensors, %.2fM parameters as %s, vocab %d, %d merges, %.1f MB in %s\n",
		out, st.Tensors, float64(st.Params)/1e6, t, st.Vocab, st.Merges, float64(st.Bytes)/1e6, time.Since(start).Round(time.Millisecond))
	return nil
}

// usageError is a command-line mistake: main prints it and exits 2.
type usageError string

func (e usageError) Error() string { return string(e) }

// parseInterspersed parses flags that may come before, between or after the
// positional arguments ("serve models/x --addr :9000"); "--" ends flags.
// It returns the positional arguments in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stopped at a non-flag or after "--".
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
