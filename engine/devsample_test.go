package engine

import (
	"context"
	"fmt"
	"math"
	"testing"
)

// hostSampler is a DeviceSampler over the CPU backend that "samples on the
// device" with the CPU sampler's own functions from what ForwardRequest.Sample
// carries (penalty list, uniform), so the engine's wiring is tested without
// a GPU: parameters, penalties and the uniform's draw order must reproduce
// the plain CPU path token for token.
type hostSampler struct {
	*CPUBackend
	vocab int
	rows  int // rows sampled through Sample
}

func (h *hostSampler) SamplesOnDevice() bool { return true }

func (h *hostSampler) Forward(reqs []*ForwardRequest) error {
	for _, r := range reqs {
		if r.Sample != nil {
			if r.Logits != nil {
				return fmt.Errorf("a Sample request came with a logits buffer of %d values", len(r.Logits))
			}
			r.Logits = make([]float32, h.vocab) // the host's own "device" row
		}
	}
	if err := h.CPUBackend.Forward(reqs); err != nil {
		return err
	}
	for _, r := range reqs {
		rs := r.Sample
		if rs == nil {
			continue
		}
		h.rows++
		l := append([]float32(nil), r.Logits...)
		for i, t := range rs.PenaltyTokens {
			l[t] -= rs.Penalty[i]
		}
		p := SamplingParams{Temperature: rs.Temperature, TopK: rs.TopK, TopP: rs.TopP, MinP: rs.MinP}
		if rs.Temperature <= 0 {
			rs.Token = Argmax(l)
		} else {
			rs.Token = SampleProbs(Probs(l, p, nil), rs.U)
		}
		rs.Logprob = LogSoftmax(r.Logits)[rs.Token]
		clear(r.Logits) // the engine must not read them
	}
	return nil
}

func TestDeviceSamplerWiring(t *testing.T) {
	cfg := genConfig()
	plain := NewRandomModel(cfg, 31, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2})
	hs := &hostSampler{vocab: cfg.VocabSize}
	dev := NewRandomModel(cfg, 31, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, NewBackend: func(c Config, w *Weights, n int) (Backend, error) {
		b, err := NewCPUBackend(c, w, n, 2)
		hs.CPUBackend = b
		return hs, err
	}})
	ep, ed := New(plain, Options{PrefillChunk: 5}), New(dev, Options{PrefillChunk: 5})
	defer ep.Close()
	defer ed.Close()
	prompt := []int32{1, 5, 7, 9, 11, 13, 17, 19, 23, 29, 31}
	seed := uint64(7)
	for _, sp := range []SamplingParams{
		{}, {PresencePenalty: 0.6, FrequencyPenalty: 0.9},
		{Temperature: 0.9, Seed: &seed}, {Temperature: 1.2, TopK: 9, TopP: 0.9, MinP: 0.02, FrequencyPenalty: 0.4, Seed: &seed},
	} {
		want, wr, err := collect(ep, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 24, Sampling: sp})
		if err != nil {
			t.Fatal(err)
		}
		before := hs.rows
		got, gr, err := collect(ed, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 24, Sampling: sp})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%+v: device-sampled %v\nCPU-sampled    %v", sp, got, want)
		}
		if hs.rows-before != len(got) {
			t.Fatalf("%+v: %d rows sampled through Sample for %d tokens", sp, hs.rows-before, len(got))
		}
		if gr.CompletionTokens != wr.CompletionTokens {
			t.Fatalf("%+v: results %+v vs %+v", sp, gr, wr)
		}
	}
	// logprobs requested: top alternatives need the rows, so the CPU path.
	before := hs.rows
	var lp []float32
	_, err := ed.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 4, Sampling: SamplingParams{Logprobs: 2}},
		func(c Chunk) error {
			for _, l := range c.Logprobs {
				lp = append(lp, l.Logprob)
			}
			return nil
		})
	if err != nil || hs.rows != before || len(lp) != 4 || math.IsNaN(float64(lp[0])) {
		t.Fatalf("logprobs request: err %v, rows sampled %d, logprobs %v", err, hs.rows-before, lp)
	}
}
