package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
)

func init() {
	register("quantize", "write an int8 weight-only checkpoint of a model (--model DIR --out DIR)", runQuantize)
}

// quantizeCopied are the files of a model directory copied unchanged into
// the quantized one (when present).
var quantizeCopied = []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"}

func runQuantize(args []string) error {
	fs := flag.NewFlagSet("quantize", flag.ContinueOnError)
	dir := fs.String("model", "", "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
	out := fs.String("out", "", "directory for the int8 checkpoint (created; must not hold a config.json)")
	q := fs.String("quantize", engine.QuantInt8, "quantization: int8 (weight-only, one scale per output row)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *out == "" {
		fs.Usage()
		return fmt.Errorf("quantize: --model and --out are required: %w", errUsage)
	}
	if *q != engine.QuantInt8 {
		return fmt.Errorf("quantize: --quantize %q: want int8: %w", *q, errUsage)
	}
	if a, b := filepath.Clean(*dir), filepath.Clean(*out); a == b {
		return fmt.Errorf("quantize: --out %s is the model directory: %w", *out, errUsage)
	}
	if _, err := os.Stat(filepath.Join(*out, "config.json")); err == nil {
		return fmt.Errorf("quantize: %s already holds a model (config.json): %w", *out, errUsage)
	}
	cfgBytes, err := os.ReadFile(filepath.Join(*dir, "config.json"))
	if err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	cfg, err := engine.LoadConfig(*dir)
	if err != nil {
		return fmt.Errorf("quantize: %s: %w", *dir, err)
	}
	w, err := model.LoadWeights(*dir, cfg)
	if err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	qw, err := engine.QuantizeWeights(cfg, w, *q)
	if err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	if err := model.Save(*out, cfg, qw); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	if err := os.Chmod(filepath.Join(*out, "model.safetensors"), 0o644); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	// config.json: the source's, with the quantization recorded (Save's
	// own config.json keeps only the keys the engine parses).
	var cj map[string]any
	if err := json.Unmarshal(cfgBytes, &cj); err != nil {
		return fmt.Errorf("quantize: %s: %w", filepath.Join(*dir, "config.json"), err)
	}
	cj["quantization_config"] = map[string]any{
		"quant_method": "specgate", "bits": 8, "format": "int8 weight-only, symmetric, one float32 scale per output row",
		"weight_scale_suffix": "_scale", "modules": "q/k/v/o_proj, gate/up/down_proj, untied lm_head",
	}
	b, err := json.MarshalIndent(cj, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "config.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("quantize: %w", err)
	}
	for _, name := range quantizeCopied {
		if err := copyFile(filepath.Join(*dir, name), filepath.Join(*out, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("quantize: %w", err)
		}
	}
	var before, after int64
	for _, s := range model.Tensors(cfg) {
		before += s.Field(w).Bytes()
		after += s.Field(qw).Bytes()
	}
	fmt.Printf("quantize: %s -> %s: int8 weight-only; weights %.2f MB -> %.2f MB\n", *dir, *out, float64(before)/1e6, float64(after)/1e6)
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}
