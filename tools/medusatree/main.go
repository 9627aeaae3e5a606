// Command medusatree tunes a Medusa candidate tree on held-out prompts
// (the Medusa authors' method: choose tree nodes by their expected
// contribution to the accepted length): it decodes each prompt greedily with
// the target on the CPU, ranks the target's own continuation under every
// head, prints per-head accuracy@1/@5, then builds the tree greedily by the
// empirical probability that each path is accepted and prints the expected
// tokens per step (tau) for every tree size, and the tree as JSON (Medusa
// "choices" paths, priority order) for the heads' config.json.
//
//	go run ./tools/medusatree -target models/specgate-target -heads models/specgate-target-medusa \
//	    -prompts medusa/testdata/heldout_prompts.txt -n 200 -max-new 128 -nodes 64
//
// -search sim (default) grows the tree by the τ of greedy decoding replayed
// on the tuning positions (sim.go); -search expected by each path's
// acceptance frequency over all positions (medusa.Stats.GreedyTree).
//
// With -tune-offset N the tree is tuned on prompts [N, N+n) and scored
// (expected τ, and measured τ with -measure) on prompts [0, n): a tree shape
// judged on prompts it was not tuned on.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/medusa"
)

func main() {
	targetDir := flag.String("target", "models/specgate-target", "target model directory")
	headsDir := flag.String("heads", "models/specgate-target-medusa", "Medusa heads directory")
	promptsFile := flag.String("prompts", "medusa/testdata/heldout_prompts.txt", "prompts file (kind<TAB>text lines; \\t \\n \\\\ escapes)")
	n := flag.Int("n", 200, "prompts to use")
	maxNew := flag.Int("max-new", 128, "greedy tokens per prompt")
	nodes := flag.Int("nodes", 64, "tree nodes to build")
	maxRank := flag.Int("max-rank", 10, "top-k ranks considered per head")
	vocab := flag.Int("vocab-limit", 0, "FR-Spec vocabulary limit for the heads (0 = full)")
	measure := flag.String("measure", "", "comma-separated tree sizes to run through the engine (fixed draft): measured tau = tokens per target forward")
	search := flag.String("search", "sim", "tree search: sim (grow the tree by the simulated τ: greedy decoding replayed on the tuning positions, steps starting where the previous one ended) or expected (by each path's acceptance frequency over all positions)")
	ceiling := flag.Bool("ceiling", false, "also print the ceiling of these heads on the scored prompts: simulated and expected τ of the tree of every top-r path (r = 1, 2, 3, 5, max-rank) and of the tuned tree with head 0 always right")
	tuneOff := flag.Int("tune-offset", -1, "tune the tree on prompts [tune-offset, tune-offset+n) and report accuracy, expected and measured tau on prompts [0, n) (-1: tune and measure on the same prompts)")
	flag.Parse()
	target, err := engine.Load(*targetDir, engine.LoadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	heads, err := medusa.Load(*headsDir, target, medusa.LoadOptions{VocabLimit: *vocab})
	if err != nil {
		log.Fatal(err)
	}
	texts, err := medusa.ReadPrompts(*promptsFile)
	if err != nil {
		log.Fatal(err)
	}
	var tuneTexts []string
	if *tuneOff >= 0 {
		if *tuneOff < *n || *tuneOff+*n > len(texts) {
			log.Fatalf("-tune-offset %d: want n <= offset and offset+n <= %d prompts (n = %d)", *tuneOff, len(texts), *n)
		}
		tuneTexts = texts[*tuneOff : *tuneOff+*n]
	}
	if len(texts) > *n {
		texts = texts[:*n]
	}
	encode := func(ts []string) [][]int32 {
		var out [][]int32
		for _, t := range ts {
			out = append(out, target.Tokenizer.Encode(t, true))
		}
		return out
	}
	prompts := encode(texts)
	st, err := medusa.Collect(context.Background(), target, heads, prompts, *maxNew, *maxRank)
	if err != nil {
		log.Fatal(err)
	}
	tuneSt := st
	if tuneTexts != nil {
		if tuneSt, err = medusa.Collect(context.Background(), target, heads, encode(tuneTexts), *maxNew, *maxRank); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("tree tuned on prompts [%d, %d) (%d positions); accuracy and tau below on prompts [0, %d)\n", *tuneOff, *tuneOff+*n, len(tuneSt.Ranks), len(prompts))
	}
	a1, cnt := st.Accuracy(1)
	a5, _ := st.Accuracy(5)
	fmt.Printf("%d prompts, %d positions (vocab limit %d)\n| head | predicts | positions | acc@1 | acc@5 |\n|---|---|---|---|---|\n", len(prompts), len(st.Ranks), *vocab)
	for k := range a1 {
		fmt.Printf("| %d | t+%d | %d | %.3f | %.3f |\n", k, k+2, cnt[k], a1[k], a5[k])
	}
	tree := tuneSt.GreedyTree(*nodes, heads.NumHeads)
	fmt.Println("\nnodes  tau(expected tokens per step)  last path  value")
	tau := 1.0
	var paths [][]int
	for i, nd := range tree {
		v := st.PathValue(nd.Path) // = nd.Value when tuned on these prompts
		tau += v
		paths = append(paths, nd.Path)
		fmt.Printf("%5d  %.3f  %v  %.4f\n", i+1, tau, nd.Path, v)
	}
	sizes := func(n int) []int {
		var out []int
		for _, s := range []int{1, 4, 8, 16, 32, 64, 128, 256} {
			if s <= n {
				out = append(out, s)
			}
		}
		return out
	}
	simAt := func(paths [][]int) string {
		var b strings.Builder
		for _, n := range sizes(len(paths)) {
			fmt.Fprintf(&b, " %d:%.3f", n, simulate(st, newTrie(paths[:n], st.MaxRank)))
		}
		return b.String()
	}
	fmt.Println("\nsimulated τ of that tree (greedy decoding replayed on the scored prompts' positions), nodes:tau:" + simAt(paths))
	switch *search {
	case "expected":
	case "sim":
		sp, taus := simGreedyTree(tuneSt, *nodes, heads.NumHeads)
		fmt.Println("\ntree grown by simulated τ on the tuning positions: nodes  tau(tuning positions)  last path")
		for i, p := range sp {
			fmt.Printf("%5d  %.3f  %v\n", i+1, taus[i], p)
		}
		fmt.Println("its simulated τ on the scored prompts, nodes:tau:" + simAt(sp))
		paths = sp
	default:
		log.Fatalf("-search %q: want sim or expected", *search)
	}
	if *ceiling {
		fmt.Println("\nceiling on the scored prompts (simulated τ: greedy decoding replayed, verification free; expected τ: per-position mean):")
		for _, r := range []int{1, 2, 3, 5, st.MaxRank} {
			all := allPaths(heads.NumHeads, r)
			t := newTrie(all, st.MaxRank)
			fmt.Printf("every path of top-%d ranks (%d nodes): simulated τ %.3f, expected τ %.3f\n", r, len(all), simulate(st, t), expectedTau(st, t))
		}
		o := withHead0Oracle(st)
		all := newTrie(allPaths(heads.NumHeads, st.MaxRank), st.MaxRank)
		fmt.Printf("head 0 always right: the tuned tree, nodes:simulated τ%s; every top-%d path %.3f\n", func() string {
			var b strings.Builder
			for _, n := range sizes(len(paths)) {
				fmt.Fprintf(&b, " %d:%.3f", n, simulate(o, newTrie(paths[:n], st.MaxRank)))
			}
			return b.String()
		}(), st.MaxRank, simulate(o, all))
	}
	b, _ := json.Marshal(paths)
	fmt.Println("\ntree:", strings.ReplaceAll(string(b), "],[", "], ["))
	if *measure != "" {
		fmt.Println("\nmeasured through the engine (greedy, fixed draft, the tuned tree above; all outputs checked equal to plain):")
		plain := engine.New(target, engine.Options{})
		var want [][]int32
		for _, p := range prompts {
			toks, _, err := generate(plain, p, *maxNew)
			if err != nil {
				log.Fatal(err)
			}
			want = append(want, toks)
		}
		plain.Close()
		for _, f := range strings.Split(*measure, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > len(paths) {
				log.Fatalf("-measure %q: want tree sizes in [1, %d]", f, len(paths))
			}
			tr, err := medusa.NewTree(paths[:n], heads.NumHeads)
			if err != nil {
				log.Fatal(err)
			}
			prop, err := medusa.NewProposer(heads, tr)
			if err != nil {
				log.Fatal(err)
			}
			e := engine.New(target, engine.Options{Proposers: []engine.Proposer{prop}, FixedDraft: true, MaxDraft: n})
			before := e.Stats()
			gen, steps := 0, 0
			acc := make([]int, heads.NumHeads)
			for i, p := range prompts {
				toks, res, err := generate(e, p, *maxNew)
				if err != nil {
					log.Fatal(err)
				}
				if fmt.Sprint(toks) != fmt.Sprint(want[i]) {
					log.Fatalf("tree %d, prompt %d: medusa output differs from plain", n, i)
				}
				gen += len(toks) - 1 // the first token comes from the prefill
				if res.Spec != nil {
					steps += res.Spec.Steps
					for d, a := range res.Spec.AcceptedAt {
						acc[d] += a
					}
				}
			}
			after := e.Stats()
			e.Close()
			fw := int(after.Forwards-before.Forwards) - len(prompts) // decode forwards (one prefill forward per prompt)
			fmt.Printf("nodes %2d: tau %.3f tokens per decode forward (%d tokens, %d forwards; engine spec steps %d); accepted per head %v\n",
				n, float64(gen)/float64(max(fw, 1)), gen, fw, steps, acc)
		}
	}
	_ = os.Stdout.Sync()
}

func generate(e *engine.Engine, prompt []int32, maxNew int) ([]int32, engine.Result, error) {
	var toks []int32
	res, err := e.Generate(context.Background(), engine.GenerateRequest{Prompt: prompt, MaxTokens: maxNew}, func(c engine.Chunk) error {
		toks = append(toks, c.Tokens...)
		return nil
	})
	return toks, res, err
}
