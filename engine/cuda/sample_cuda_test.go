//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// sampleRowsDevice runs kernels.SampleRowsP once over rows (each [V]) with
// one parameter set and penalty list per row; it returns tokens and logprobs.
func sampleRowsDevice(t *testing.T, b *Backend, rows [][]float32, ps []engine.RowSample) ([]int32, []float32) {
	t.Helper()
	R, V := len(rows), len(rows[0])
	flat := make([]float32, 0, R*V)
	for _, r := range rows {
		flat = append(flat, r...)
	}
	prm := make([]int32, R*kernels.SampleParamWords)
	var ptok []int32
	var pdel []float32
	for i, p := range ps {
		w := prm[i*kernels.SampleParamWords:]
		w[0], w[1] = int32(math.Float32bits(p.Temperature)), int32(p.TopK)
		w[2], w[3] = int32(math.Float32bits(p.TopP)), int32(math.Float32bits(p.MinP))
		w[4] = int32(math.Float32bits(float32(p.U)))
		w[5], w[6], w[7] = int32(len(ptok)), int32(len(p.PenaltyTokens)), 1
		ptok = append(ptok, p.PenaltyTokens...)
		pdel = append(pdel, p.Penalty...)
	}
	ptok, pdel = append(ptok, 0), append(pdel, 0) // never empty
	tok := make([]int32, R)
	lp := make([]float32, R)
	err := b.dev.Do(func(c *kernels.Ctx) error {
		var bufs []kernels.DevicePtr
		alloc := func(n int) kernels.DevicePtr {
			p, err := c.Alloc(n)
			if err != nil {
				panic(err)
			}
			bufs = append(bufs, p)
			return p
		}
		defer func() {
			for _, p := range bufs {
				c.Free(p)
			}
		}()
		dl, dp, dt, dd := alloc(4*len(flat)), alloc(4*len(prm)), alloc(4*len(ptok)), alloc(4*len(pdel))
		dtok, dlp := alloc(4*R), alloc(4*R)
		for _, u := range []struct {
			d kernels.DevicePtr
			h unsafe.Pointer
			n int
		}{{dl, unsafe.Pointer(&flat[0]), len(flat)}, {dp, unsafe.Pointer(&prm[0]), len(prm)},
			{dt, unsafe.Pointer(&ptok[0]), len(ptok)}, {dd, unsafe.Pointer(&pdel[0]), len(pdel)}} {
			if err := kernels.Upload(c, u.d, unsafe.Slice((*int32)(u.h), u.n)); err != nil {
				return err
			}
		}
		if err := c.SampleRowsP(dl, dp, dt, dd, dtok, dlp, R, V); err != nil {
			return err
		}
		if err := kernels.Download(c, tok, dtok); err != nil {
			return err
		}
		return kernels.Download(c, lp, dlp)
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok, lp
}

func gpuForSampling(t *testing.T) *Backend {
	cfg := configs()["gqa"]
	w := engine.RandomWeights(cfg, 5)
	b, err := New(cfg, w, Options{NumSlots: 256})
	if err != nil {
		if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
			t.Skipf("no GPU: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// penalties as the engine passes them for history (engine.rowSample).
func penaltiesFor(history []int32, p engine.SamplingParams) ([]int32, []float32) {
	counts := map[int32]int{}
	for _, t := range history {
		counts[t]++
	}
	var toks []int32
	var del []float32
	for t, c := range counts {
		toks = append(toks, t)
		del = append(del, float32(float64(c)*float64(p.FrequencyPenalty)+float64(p.PresencePenalty)))
	}
	return toks, del
}

// The device sampler against the engine's CPU sampler on the same rows:
// greedy (with and without penalties) picks the same token, including
// exact ties; the reported logprob is the CPU's log-softmax; with the same
// uniform, sampled tokens agree except where rounding moves a boundary.
func TestDeviceSamplerMatchesCPU(t *testing.T) {
	b := gpuForSampling(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 9))
	const V, R = 5000, 512
	rows := make([][]float32, R)
	ps := make([]engine.RowSample, R)
	params := make([]engine.SamplingParams, R)
	hist := make([][]int32, R)
	for i := range rows {
		row := make([]float32, V)
		for k := range row {
			row[k] = float32(r.NormFloat64() * 3)
		}
		if i%7 == 0 { // an exact tie at the maximum: lowest id wins
			a, c := r.IntN(V), r.IntN(V)
			row[a], row[c] = 50, 50
		}
		rows[i] = row
		p := engine.SamplingParams{}
		switch i % 8 {
		case 0:
		case 1:
			p.PresencePenalty, p.FrequencyPenalty = 0.7, 0.4
		case 2:
			p.Temperature = 0.8
		case 3:
			p.Temperature, p.TopK = 1.1, 40
		case 4:
			p.Temperature, p.TopP = 0.9, 0.8
		case 5:
			p.Temperature, p.MinP = 1, 0.05
		case 6:
			p.Temperature, p.TopK, p.TopP, p.MinP, p.PresencePenalty = 0.7, 100, 0.95, 0.01, 0.5
		case 7:
			p.Temperature, p.FrequencyPenalty = 1.3, -0.3
		}
		for k := 0; k < 40; k++ {
			hist[i] = append(hist[i], int32(r.IntN(V)))
		}
		params[i] = p
		ps[i] = engine.RowSample{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP, U: r.Float64()}
		if p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
			ps[i].PenaltyTokens, ps[i].Penalty = penaltiesFor(hist[i], p)
		}
	}
	tok, lp := sampleRowsDevice(t, b, rows, ps)
	mism := 0
	for i := range rows {
		p := params[i]
		var want int32
		if p.Temperature <= 0 {
			want = engine.Sample(rows[i], p, hist[i], nil)
		} else {
			want = engine.SampleProbs(engine.Probs(rows[i], p, hist[i]), ps[i].U)
		}
		if p.Temperature <= 0 && tok[i] != want {
			t.Fatalf("row %d greedy %+v: device %d, CPU %d", i, p, tok[i], want)
		}
		if tok[i] != want {
			mism++
		}
		if tok[i] < 0 || int(tok[i]) >= V {
			t.Fatalf("row %d: token %d", i, tok[i])
		}
		ls := engine.LogSoftmax(rows[i])
		if d := math.Abs(float64(lp[i] - ls[tok[i]])); d > 1e-4*math.Max(1, math.Abs(float64(ls[tok[i]]))) {
			t.Fatalf("row %d: logprob %v, CPU %v", i, lp[i], ls[tok[i]])
		}
	}
	// same uniform, same token, except where fp32 vs float64 rounding moves
	// a cumulative boundary past u (rare).
	if mism > R/100 {
		t.Fatalf("%d of %d sampled rows differ from the CPU sampler with the same uniform", mism, R)
	}
	t.Logf("%d rows: greedy identical, logprobs match, %d sampled rows differ with the same uniform", R, mism)
}

// χ² goodness of fit of the device sampler's draws (fresh uniforms) to the
// CPU sampler's distribution (engine.Probs), per parameter set.
func TestDeviceSamplerChiSquare(t *testing.T) {
	b := gpuForSampling(t)
	r := rand.New(rand.NewPCG(rand.Uint64(), 10))
	const V, N = 64, 40000
	base := make([]float32, V)
	for k := range base {
		base[k] = float32(r.NormFloat64() * 1.5)
	}
	hist := []int32{3, 3, 7, 11, 11, 11}
	for _, p := range []engine.SamplingParams{
		{Temperature: 1}, {Temperature: 0.7, TopK: 10}, {Temperature: 1.2, TopP: 0.7},
		{Temperature: 1, MinP: 0.1}, {Temperature: 0.9, TopK: 20, TopP: 0.9, PresencePenalty: 0.5, FrequencyPenalty: 0.3},
	} {
		want := engine.Probs(base, p, hist)
		rows := make([][]float32, N)
		ps := make([]engine.RowSample, N)
		pt, pd := penaltiesFor(hist, p)
		for i := range rows {
			rows[i] = base
			ps[i] = engine.RowSample{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP, U: r.Float64()}
			if p.PresencePenalty != 0 || p.FrequencyPenalty != 0 {
				ps[i].PenaltyTokens, ps[i].Penalty = pt, pd
			}
		}
		tok, _ := sampleRowsDevice(t, b, rows, ps)
		got := make([]float64, V)
		for _, k := range tok {
			got[k]++
		}
		var chi float64
		df := -1
		for k := range V {
			e := float64(want[k]) * N
			if e == 0 {
				if got[k] > 0 {
					t.Fatalf("%+v: token %d has probability 0 on the CPU, drawn %v times on the device", p, k, got[k])
				}
				continue
			}
			chi += (got[k] - e) * (got[k] - e) / e
			df++
		}
		// p < 0.001 critical value (Wilson-Hilferty): df * (1 - 2/(9df) + 3.09 sqrt(2/(9df)))^3
		d := float64(df)
		crit := d * math.Pow(1-2/(9*d)+3.09*math.Sqrt(2/(9*d)), 3)
		if chi > crit {
			t.Errorf("%+v: chi2 %.1f > %.1f (df %d)", p, chi, crit, df)
		}
		t.Logf("%+v: chi2 %.1f, df %d, p=0.001 critical %.1f", p, chi, df, crit)
	}
}

// Forward with Sample and Hidden: the sampled greedy token equals the
// argmax of the logits the same forward returns without Sample, and the
// hidden rows equal the CPU backend's (final norm applied).
func TestForwardSampleAndHidden(t *testing.T) {
	for _, cfgName := range []string{"gqa", "mha-hd64"} {
		cfg := configs()[cfgName]
		cpu, gpu := newPair(t, cfg, 11, Options{})
		V, H := cfg.VocabSize, cfg.HiddenSize
		prompt := seq(3, 20)
		mk := func(sample *engine.RowSample, hidden bool) *engine.ForwardRequest {
			q := &engine.ForwardRequest{Tokens: prompt, Positions: seq(0, 20), Slots: seq(100, 20), LogitsRows: []int32{19}, Sample: sample}
			if hidden {
				q.Hidden = make([]float32, H)
			}
			return q
		}
		plain, cpuReq := mk(nil, true), mk(nil, true)
		fwd(t, gpu, V, plain)
		fwd(t, cpu, V, cpuReq)
		if e := rel(plain.Hidden, cpuReq.Hidden); e > 5e-3 {
			t.Fatalf("%s: hidden rows rel err %.3g", cfgName, e)
		}
		rs := &engine.RowSample{}
		samp := mk(rs, false)
		if err := gpu.Forward([]*engine.ForwardRequest{samp, {Tokens: []int32{5}, Positions: []int32{0}, Slots: []int32{200}, Logits: make([]float32, V)}}); err != nil {
			t.Fatal(err)
		}
		if want := engine.Argmax(plain.Logits); rs.Token != want && gap(plain.Logits) > 1e-2 {
			t.Fatalf("%s: device greedy %d, argmax of the logits %d", cfgName, rs.Token, want)
		}
		if want := engine.LogSoftmax(plain.Logits)[rs.Token]; math.Abs(float64(rs.Logprob-want)) > 1e-2 {
			t.Fatalf("%s: logprob %v, want %v", cfgName, rs.Logprob, want)
		}
		// decode step (graph path) with both
		dec := &engine.ForwardRequest{CachedSlots: seq(100, 20), Tokens: []int32{rs.Token}, Positions: []int32{20}, Slots: []int32{120},
			Hidden: make([]float32, H), Sample: &engine.RowSample{}}
		decC := &engine.ForwardRequest{CachedSlots: seq(100, 20), Tokens: []int32{rs.Token}, Positions: []int32{20}, Slots: []int32{120},
			Hidden: make([]float32, H)}
		fwd(t, cpu, V, decC)
		if err := gpu.Forward([]*engine.ForwardRequest{dec}); err != nil {
			t.Fatal(err)
		}
		if e := rel(dec.Hidden, decC.Hidden); e > 5e-3 { // the prefill's cuBLAS rounding is in the KV
			t.Fatalf("%s: decode hidden rel err %.3g", cfgName, e)
		}
		if want := engine.Argmax(decC.Logits); dec.Sample.Token != want && gap(decC.Logits) > 1e-3 {
			t.Fatalf("%s: decode greedy on device %d, CPU %d", cfgName, dec.Sample.Token, want)
		}
	}
}
