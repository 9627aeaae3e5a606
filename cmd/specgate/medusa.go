package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/medusa"
	"github.com/specgate/specgate/speculative"
)

// Medusa wiring of the command (issue #17): `generate --spec medusa --medusa
// DIR [--medusa-tree SPEC] [--medusa-vocab N]`, `config check` of a model
// with speculative.method medusa, and the medusa rows of `bench spec`.

func init() {
	var dir, tree string
	var vocab int
	var fs *flag.FlagSet
	registerGenerateExtension(generateExtension{
		addFlags: func(f *flag.FlagSet) {
			fs = f
			f.StringVar(&dir, "medusa", "", "Medusa heads directory (with --spec medusa): speculative decoding with Medusa heads")
			f.StringVar(&tree, "medusa-tree", "", "Medusa candidate tree: node count, chain[:N] or JSON paths (default: the heads' tuned tree)")
			f.IntVar(&vocab, "medusa-vocab", 0, "restrict the heads to the N most frequent tokens (0 = all)")
		},
		build: func(target *engine.Model, o engine.Options) (engine.Options, error) {
			spec := ""
			if f := fs.Lookup("spec"); f != nil {
				spec = f.Value.String()
			}
			switch {
			case dir == "" && spec == "medusa":
				return o, fmt.Errorf("%w: --spec medusa needs --medusa DIR (the heads directory)", errUsage)
			case dir == "":
				return o, nil
			case spec != "medusa" && fs.Lookup("spec") != nil && isSet(fs, "spec"):
				return o, fmt.Errorf("%w: --medusa goes with --spec medusa, not --spec %s", errUsage, spec)
			case isSet(fs, "draft"):
				return o, fmt.Errorf("%w: --medusa and --draft exclude each other", errUsage)
			}
			p, err := medusa.New(target, medusa.Spec{Heads: dir, Tree: tree, VocabLimit: vocab})
			if err != nil {
				return o, fmt.Errorf("--medusa: %w", err)
			}
			o.Proposers = append(o.Proposers, p)
			return o, nil
		},
		report: func(res engine.Result) string {
			st := res.Spec
			if dir == "" || st == nil || len(st.AcceptedAt) == 0 {
				return ""
			}
			var b strings.Builder
			b.WriteString("[medusa: accepted per head (depth)")
			for d, n := range st.AcceptedAt {
				fmt.Fprintf(&b, " %d:%d", d, n)
			}
			b.WriteString("]")
			return b.String()
		},
	})
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// medusaBenchModes are `bench spec`'s Medusa rows for the heads in dir:
// fixed trees of 1 (a chain of one), 4, 8, 16, 32 and 63 tuned nodes and
// the engine's adaptive budget over the 16-node tree and over the 63-node
// tree (up to 63 nodes per request: on the GPU a verification step of up to
// 64 tokens is one CUDA graph, and for the shipped target it costs 2-3
// one-token steps, docs/medusa.md).
//
// name prefixes the rows ("medusa"; "hydra" for --hydra DIR, Hydra heads
// beside the Medusa ones in the same invocation: bench spec runs every mode
// once per run, so the two kinds alternate).
func medusaBenchModes(name, dir string, vocab int) []speculative.BenchMode {
	mk := func(tree string) func(*engine.Model) ([]engine.Proposer, error) {
		return func(t *engine.Model) ([]engine.Proposer, error) {
			p, err := medusa.New(t, medusa.Spec{Heads: dir, Tree: tree, VocabLimit: vocab})
			if err != nil {
				return nil, err
			}
			return []engine.Proposer{p}, nil
		}
	}
	return []speculative.BenchMode{
		{Name: name + " n=1", New: mk("1")},
		{Name: name + " n=2", New: mk("2")},
		{Name: name + " n=3", New: mk("3")},
		{Name: name + " n=4", New: mk("4")},
		{Name: name + " n=8", New: mk("8")},
		{Name: name + " n=16", New: mk("16")},
		{Name: name + " n=32", New: mk("32"), MaxDraft: 32},
		{Name: name + " n=63", New: mk("63"), MaxDraft: 63},
		{Name: name + " adaptive", New: mk("16"), Adaptive: true},
		{Name: name + " adaptive n<=63", New: mk("63"), Adaptive: true, MaxDraft: 63},
	}
}
