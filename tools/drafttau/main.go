// Command drafttau measures a draft model's acceptance through the engine
// on a prompts file (default: the held-out prompts of the Medusa tuning,
// cut from documents that tools/train/medusa.py and distill_gen.py held
// out): greedy, every output checked equal to plain decoding, τ = tokens
// per target step per mode. Several drafts are compared on the same
// prompts.
//
//	go run ./tools/drafttau -drafts models/specgate-draft,OLD_DRAFT_DIR -n 200 -max-new 128
package main

import (
	"flag"
	"fmt"
	"log"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/medusa"
	"github.com/specgate/specgate/speculative"
)

func main() {
	targetDir := flag.String("target", "models/specgate-target", "target model directory")
	drafts := flag.String("drafts", "models/specgate-draft", "comma-separated draft model directories")
	promptsFile := flag.String("prompts", "medusa/testdata/heldout_prompts.txt", "prompts file (kind<TAB>text lines)")
	n := flag.Int("n", 200, "prompts to use")
	maxNew := flag.Int("max-new", 128, "greedy tokens per prompt")
	modesFlag := flag.String("modes", "chain k=2;chain k=4;chain k=6;dynamic w=4 n<=12", "semicolon-separated bench modes")
	flag.Parse()
	target, err := engine.Load(*targetDir, engine.LoadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	texts, err := medusa.ReadPrompts(*promptsFile)
	if err != nil {
		log.Fatal(err)
	}
	if len(texts) > *n {
		texts = texts[:*n]
	}
	var ps [][]int32
	for _, t := range texts {
		ps = append(ps, target.Tokenizer.Encode(t, true))
	}
	want := map[string]bool{}
	for _, m := range strings.Split(*modesFlag, ";") {
		want[strings.TrimSpace(m)] = true
	}
	all := speculative.DefaultBenchModes()
	modes := all[:1]
	for _, m := range all[1:] {
		if want[m.Name] {
			modes = append(modes, m)
		}
	}
	for _, d := range strings.Split(*drafts, ",") {
		dm, err := engine.Load(d, engine.LoadOptions{})
		if err != nil {
			log.Fatal(err)
		}
		rows, err := speculative.Bench(target, dm, speculative.BenchOptions{Prompts: ps, MaxNew: *maxNew, Runs: 1, Modes: modes})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("draft %s, %d prompts of %s x %d new tokens, greedy (outputs checked equal to plain)\n", d, len(ps), *promptsFile, *maxNew)
		fmt.Print(speculative.FormatBench(rows))
	}
}
