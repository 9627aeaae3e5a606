package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/specgate/specgate/gateway"
)

// serveFlags are serve's command line.
type serveFlags struct {
	config, addr, model, draft, medusa, backend string
}

const serveUsage = `usage: specgate serve [MODEL_DIR] [--model DIR] [--draft DIR | --medusa DIR]
                      [--addr HOST:PORT] [--config FILE] [--backend cpu|cuda|auto]

Runs the OpenAI-compatible gateway (API under /v1, dashboard at /, metrics at
/metrics). Flags may come before or after MODEL_DIR.

  specgate serve                          the shipped model (models/specgate-target,
                                          found next to the binary or in the source tree)
  specgate serve models/specgate-draft    serve that Hugging Face directory instead
  specgate serve --config specgate.yaml   everything from a config file; relative
                                          model paths are relative to the file
  specgate serve --model M --draft D      speculative decoding with a draft model

flags:
`

func parseServeFlags(args []string) (serveFlags, error) {
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.config, "config", "", "YAML config file (default: the shipped model on CPU, SQLite cache in ./data)")
	fs.StringVar(&f.addr, "addr", "", "listen address HOST:PORT (overrides the config and SPECGATE_ADDR)")
	fs.StringVar(&f.model, "model", "", "serve this model directory (config.json, *.safetensors, tokenizer.json) instead of the config's models")
	fs.StringVar(&f.draft, "draft", "", "draft model directory: speculative decoding for the served model")
	fs.StringVar(&f.medusa, "medusa", "", "Medusa heads directory: speculative decoding for the served model")
	fs.StringVar(&f.backend, "backend", "", "cpu, cuda or auto for --model (default auto: the GPU when there is one)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return f, err
	}
	switch {
	case len(pos) > 1:
		return f, usageError(fmt.Sprintf("serve: one MODEL_DIR at most, got %q", pos))
	case len(pos) == 1 && f.model != "" && pos[0] != f.model:
		return f, usageError(fmt.Sprintf("serve: MODEL_DIR %q and --model %q disagree", pos[0], f.model))
	case len(pos) == 1:
		f.model = pos[0]
	}
	if f.draft != "" && f.medusa != "" {
		return f, usageError("serve: --draft and --medusa exclude each other")
	}
	if f.backend != "" && f.model == "" {
		return f, usageError("serve: --backend applies to --model (set backend per model in the config)")
	}
	return f, nil
}

// buildServeConfig turns serve's flags into a validated config: the file
// (or the default), relative model paths resolved against the file's
// directory, the environment, then the flags.
func buildServeConfig(f serveFlags, getenv func(string) string) (*gateway.Config, error) {
	var cfg *gateway.Config
	if f.config != "" {
		c, err := gateway.LoadConfigFile(f.config)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		cfg = gateway.DefaultConfig()
		if f.model == "" {
			dir, looked := findShippedModel()
			if dir == "" {
				return nil, fmt.Errorf("no model to serve: the shipped %s is not in %s; pass a model directory (specgate serve DIR) or a config (--config FILE)",
					gateway.DefaultModelPath, strings.Join(looked, ", "))
			}
			cfg.Models[0].Path = dir
		}
	}
	if err := cfg.ApplyEnv(getenv); err != nil {
		return nil, err
	}
	if f.model != "" {
		abs, err := filepath.Abs(f.model)
		if err != nil {
			return nil, err
		}
		backend := f.backend
		if backend == "" {
			backend = "auto"
		}
		cfg.Models = []gateway.ModelConfig{{Name: filepath.Base(abs), Path: abs, Backend: backend}}
	}
	if f.draft != "" || f.medusa != "" {
		if len(cfg.Models) != 1 {
			return nil, usageError(fmt.Sprintf("serve: --draft/--medusa need exactly one served model, the config has %d (set draft per model in the config)", len(cfg.Models)))
		}
		m := &cfg.Models[0]
		m.Draft, m.Speculative.Method = f.draft, "draft"
		if f.medusa != "" {
			m.Draft, m.Speculative.Method = f.medusa, "medusa"
		}
		if abs, err := filepath.Abs(m.Draft); err == nil {
			m.Draft = abs
		}
	}
	if f.addr != "" {
		cfg.Server.Addr = f.addr
	}
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// findShippedModel looks for the shipped target model (DefaultModelPath)
// in the working directory, next to the binary, and in the source tree the
// binary was built from (what `go run ./cmd/specgate` from anywhere needs).
// It returns the directory found ("" if none) and the places it looked.
func findShippedModel() (string, []string) {
	var roots []string
	if wd, err := os.Getwd(); err == nil {
		roots = append(roots, wd)
		if r := moduleRoot(wd); r != "" {
			roots = append(roots, r)
		}
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		roots = append(roots, filepath.Dir(exe), filepath.Join(filepath.Dir(exe), "..", "share", "specgate"))
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		// this file is <module root>/cmd/specgate/setup.go (absent with -trimpath)
		roots = append(roots, filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..")))
	}
	var looked []string
	seen := map[string]bool{}
	for _, r := range roots {
		dir := filepath.Join(r, gateway.DefaultModelPath)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		looked = append(looked, dir)
		if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
			return dir, looked
		}
	}
	return "", looked
}

// moduleRoot returns the nearest ancestor of dir whose go.mod declares the
// specgate module, or "".
func moduleRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/specgate/specgate")) {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// announce prints where the server listens, for a person at a terminal.
func announce(w io.Writer, ln net.Listener, cfg *gateway.Config) {
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // listening on every interface; loopback is one of them
	}
	base := "http://" + net.JoinHostPort(host, port)
	names := make([]string, 0, len(cfg.Models)+len(cfg.Upstreams))
	for _, m := range cfg.Models {
		names = append(names, m.Name)
	}
	for _, u := range cfg.Upstreams {
		names = append(names, u.Models...)
	}
	fmt.Fprintf(w, "%s\n  OpenAI API  %s/v1   (models: %s)\n  dashboard   %s/\n  metrics     %s/metrics\n",
		gateway.BuildVersion().String(), base, strings.Join(names, ", "), base, base)
}

// loadingProgress prints what is being loaded and, every 5 seconds until
// the returned func is called, that loading goes on; the func prints the
// outcome.
func loadingProgress(w io.Writer, cfg *gateway.Config) func(error) {
	if len(cfg.Models) == 0 {
		return func(error) {}
	}
	start := time.Now()
	for _, m := range cfg.Models {
		extra := ""
		if m.Speculative.Method != "none" {
			extra = fmt.Sprintf(", %s %s", m.Speculative.Method, m.Draft)
		}
		fmt.Fprintf(w, "loading %s from %s (backend %s%s) ...\n", m.Name, m.Path, m.Backend, extra)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "  still loading (%s)\n", time.Since(start).Round(time.Second))
			}
		}
	}()
	return func(err error) {
		close(done)
		<-finished
		if err == nil {
			fmt.Fprintf(w, "loaded %d model(s) in %s\n", len(cfg.Models), time.Since(start).Round(time.Millisecond))
		}
	}
}

// milvusSupport reports why cache.index milvus cannot be used (nil: this
// binary was built with -tags milvus).
func milvusSupport() error { return gateway.MilvusSupport() }
