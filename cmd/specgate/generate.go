package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/tokenizer"
)

// generateExtension lets another file of this command (speculative
// decoding, Medusa) add flags to `specgate generate` and supply a
// Speculator, without editing this file. Register from an init().
type generateExtension struct {
	// addFlags defines the extension's flags on fs.
	addFlags func(fs *flag.FlagSet)
	// build returns the engine options for the loaded target with the
	// extension's proposers added (o unchanged when its flags ask for none).
	build func(target *engine.Model, o engine.Options) (engine.Options, error)
	// report returns a line summarising res (e.g. acceptance), or "".
	report func(res engine.Result) string
}

var generateExtensions []generateExtension

func registerGenerateExtension(e generateExtension) {
	generateExtensions = append(generateExtensions, e)
}

func init() {
	register("generate", "generate text with a local model on the CPU (--model DIR --prompt TEXT)", runGenerate)
}

var errUsage = errors.New("usage error")

func runGenerate(args []string) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	model := fs.String("model", "", "model directory (config.json, *.safetensors, tokenizer.json)")
	prompt := fs.String("prompt", "", "prompt text")
	maxTokens := fs.Int("max-tokens", 128, "maximum new tokens")
	temp := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topP := fs.Float64("top-p", 1, "nucleus sampling mass (1 = off)")
	topK := fs.Int("top-k", 0, "top-k (0 = off)")
	minP := fs.Float64("min-p", 0, "min-p (0 = off)")
	seed := fs.Int64("seed", -1, "sampling seed (-1 = random)")
	chat := fs.Bool("chat", false, "wrap the prompt as one user message with the model's chat template")
	threads := fs.Int("threads", 0, "CPU threads (0 = GOMAXPROCS)")
	quantize := fs.String("quantize", "", "none or int8: int8 weight-only projections (per-row scales); an int8 checkpoint (specgate quantize) runs int8 either way")
	var stops stringList
	fs.Var(&stops, "stop", "stop sequence (repeatable)")
	for _, e := range generateExtensions {
		e.addFlags(fs)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *prompt == "" {
		fs.Usage()
		return fmt.Errorf("generate: --model and --prompt are required: %w", errUsage)
	}
	if err := engine.CheckQuantize(*quantize); err != nil {
		return fmt.Errorf("generate: --quantize: %w", err)
	}
	m, err := engine.Load(*model, engine.LoadOptions{Threads: *threads, Quantize: *quantize})
	if err != nil {
		return err
	}
	defer m.Close()
	text := *prompt
	var ids []int32
	if *chat {
		text, err = m.Tokenizer.RenderChat([]tokenizer.Message{{Role: "user", Content: *prompt}}, true)
		if err != nil {
			return err
		}
		ids = m.Tokenizer.Encode(text, false)
	} else {
		ids = m.Tokenizer.Encode(text, true)
	}
	var eo engine.Options
	for _, e := range generateExtensions {
		if eo, err = e.build(m, eo); err != nil {
			return err
		}
	}
	sp := engine.SamplingParams{Temperature: float32(*temp), TopP: float32(*topP), TopK: *topK, MinP: float32(*minP)}
	if *seed >= 0 {
		s := uint64(*seed)
		sp.Seed = &s
	}
	e := engine.New(m, eo)
	defer e.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	var first time.Time
	res, err := e.Generate(ctx, engine.GenerateRequest{Prompt: ids, MaxTokens: *maxTokens, Stop: stops, Sampling: sp},
		func(c engine.Chunk) error {
			if first.IsZero() && len(c.Tokens) > 0 {
				first = time.Now()
			}
			_, err := io.WriteString(os.Stdout, c.Text)
			return err
		})
	end := time.Now()
	fmt.Println()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if first.IsZero() {
		first = end
	}
	prefill := first.Sub(start).Seconds()
	decode := end.Sub(first).Seconds()
	decodeRate := 0.0
	if res.CompletionTokens > 1 && decode > 0 {
		decodeRate = float64(res.CompletionTokens-1) / decode
	}
	fmt.Printf("[prompt %d tokens (%d cached), completion %d tokens, finish %s; prefill %.1f tok/s (%.0f ms), decode %.1f tok/s]\n",
		res.PromptTokens, res.CachedTokens, res.CompletionTokens, res.Finish,
		float64(res.PromptTokens)/max(prefill, 1e-9), prefill*1000, decodeRate)
	for _, ext := range generateExtensions {
		if ext.report != nil {
			if line := ext.report(res); line != "" {
				fmt.Println(line)
			}
		}
	}
	return nil
}

type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
