package medusa

import (
	"math"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// hostHeadsBackend is a CPU backend that implements the device-heads
// contract (engine.HeadsBackend, engine.RowArgmaxer) on the host, straight
// from its definition: each loaded DraftHeads runs on every logits row's
// final hidden state (residual blocks, projection, top-k), and Argmax rows
// get the argmax of the logits. It checks the engine's and the proposer's
// side of the device path without a GPU.
type hostHeadsBackend struct {
	*engine.CPUBackend
	cfg              engine.Config
	lm               []float32
	sets             []*engine.DraftHeads
	headRows, argReq int // rows that got heads, requests that got argmax rows
}

// loadHostHeadsTarget loads the shipped target on a hostHeadsBackend
// (one CPU thread, no prefix cache) with kvTokens KV slots.
func loadHostHeadsTarget(t *testing.T, kvTokens int) (*engine.Model, *hostHeadsBackend) {
	t.Helper()
	var hb *hostHeadsBackend
	target, err := engine.Load(shippedTarget, engine.LoadOptions{KVTokens: kvTokens, DisablePrefixCache: true,
		NewBackend: func(cfg engine.Config, w *engine.Weights, numSlots int) (engine.Backend, error) {
			cb, err := engine.NewCPUBackend(cfg, w, numSlots, 1)
			if err != nil {
				return nil, err
			}
			hb = &hostHeadsBackend{CPUBackend: cb, cfg: cfg, lm: w.LMHead.Float32()}
			return hb, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return target, hb
}

func (b *hostHeadsBackend) LoadHeads(h *engine.DraftHeads) (int, error) {
	if err := h.Validate(b.cfg.HiddenSize, b.cfg.VocabSize); err != nil {
		return 0, err
	}
	c := *h
	b.sets = append(b.sets, &c)
	return len(b.sets), nil
}

func (b *hostHeadsBackend) HeadsWidth(id int) int {
	if id < 1 || id > len(b.sets) {
		return 0
	}
	return b.sets[id-1].NumHeads * b.sets[id-1].TopK
}

func (b *hostHeadsBackend) ArgmaxOnDevice() bool { return true }

func (b *hostHeadsBackend) Forward(reqs []*engine.ForwardRequest) error {
	V, H := b.cfg.VocabSize, b.cfg.HiddenSize
	nrows := func(r *engine.ForwardRequest) int {
		if r.LogitsRows != nil {
			return len(r.LogitsRows)
		}
		return len(r.Tokens)
	}
	for _, r := range reqs {
		if r.Argmax != nil && len(r.Logits) < nrows(r)*V {
			r.Logits = make([]float32, nrows(r)*V)
		}
		if r.Heads > 0 && r.Hidden == nil {
			r.Hidden = make([]float32, nrows(r)*H)
		}
	}
	if err := b.CPUBackend.Forward(reqs); err != nil {
		return err
	}
	for _, r := range reqs {
		n := nrows(r)
		if r.Argmax != nil {
			b.argReq++
			for i := range n {
				r.Argmax[i] = engine.Argmax(r.Logits[i*V : (i+1)*V])
			}
		}
		if r.Heads == 0 {
			continue
		}
		d := b.sets[r.Heads-1]
		w := d.NumHeads * d.TopK
		for i := range n {
			b.headRows++
			for h := range d.NumHeads {
				x := append([]float32(nil), r.Hidden[i*H:(i+1)*H]...)
				for l := range d.Layers {
					W, B := d.W[h][l], d.B[h][l]
					y := make([]float32, H)
					for o := range H {
						s := B[o]
						for k := range H {
							s += W[o*H+k] * x[k]
						}
						y[o] = s
					}
					for o := range H {
						x[o] += y[o] / (1 + float32(math.Exp(float64(-y[o]))))
					}
				}
				proj := b.lm
				if d.Proj != nil {
					proj = d.Proj[min(h, len(d.Proj)-1)]
				}
				rows := d.Rows(V)
				logits := make([]float32, rows)
				for v := range rows {
					s := float32(0)
					for k := range H {
						s += proj[v*H+k] * x[k]
					}
					logits[v] = s
				}
				top := TopK(logits, d.TopK, nil)
				for j, t := range top {
					if d.IDs != nil {
						t = d.IDs[t]
					}
					r.HeadTop[i*w+h*d.TopK+j] = t
				}
			}
		}
	}
	return nil
}

// TestDeviceHeadsPath: with a backend that runs the heads itself (here on
// the host, by definition), medusa.New registers them there, the engine
// asks for head candidates instead of hidden rows and for the tree rows'
// argmax instead of logits, and greedy Medusa output equals plain greedy
// output (6 prompts x 32 tokens, 16-node tree, vocabulary limit 1024 and
// the full vocabulary; -short: 2 prompts, limit 1024).
func TestDeviceHeadsPath(t *testing.T) {
	target, hb := loadHostHeadsTarget(t, 4096)
	defer target.Close()
	var err error
	plain := engine.New(target, engine.Options{})
	defer plain.Close()
	prompts, vocabs := speculative.BenchPrompts()[:6], []int{1024, 0}
	if testing.Short() {
		prompts, vocabs = prompts[:2], vocabs[:1]
	}
	want := make([][]int32, len(prompts))
	sp := engine.SamplingParams{SkipLogprobs: true}
	for i, text := range prompts {
		if want[i], _, err = generate(plain, engine.GenerateRequest{Prompt: target.Tokenizer.Encode(text, true), MaxTokens: 32, Sampling: sp}); err != nil {
			t.Fatal(err)
		}
	}
	for _, vocab := range vocabs {
		p, err := New(target, Spec{Heads: shippedHeads, Tree: "16", VocabLimit: vocab})
		if err != nil {
			t.Fatal(err)
		}
		if p.DeviceHeads(target.Backend()) == 0 {
			t.Fatalf("vocab %d: heads not registered on the backend: %v", vocab, p.DeviceError())
		}
		spec := engine.New(target, engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true, MaxDraft: 16})
		hb.headRows, hb.argReq = 0, 0
		acc := 0
		for i, text := range prompts {
			got, res, err := generate(spec, engine.GenerateRequest{Prompt: target.Tokenizer.Encode(text, true), MaxTokens: 32, Sampling: sp})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want[i]) {
				t.Fatalf("vocab %d prompt %d: %d tokens, plain %d", vocab, i, len(got), len(want[i]))
			}
			for j := range got {
				if got[j] != want[i][j] {
					t.Fatalf("vocab %d prompt %d: token %d: medusa %d, plain %d", vocab, i, j, got[j], want[i][j])
				}
			}
			if res.Spec != nil {
				acc += res.Spec.Accepted
			}
		}
		spec.Close()
		t.Logf("vocab %d: equal; %d head tokens accepted, %d rows with heads, %d argmax requests", vocab, acc, hb.headRows, hb.argReq)
		if acc == 0 || hb.headRows == 0 || hb.argReq == 0 {
			t.Fatalf("vocab %d: device path unused: %d accepted, %d head rows, %d argmax requests", vocab, acc, hb.headRows, hb.argReq)
		}
	}
}
