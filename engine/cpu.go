package engine

import (
	"fmt"
	"math"
	"runtime"
)

// CPUBackend is the pure-Go float32 Llama forward. It owns the KV memory:
// per layer, K and V of numSlots slots, each [NumKVHeads][HeadDim].
// Not safe for concurrent Forward calls (Model serializes them).
type CPUBackend struct {
	cfg      Config
	w        *Weights
	numSlots int
	threads  int
	k, v     [][]float32 // [layer][slot*KVDim + head*HeadDim + d]
	invFreq  []float32   // [HeadDim/2]
	scratch  cpuScratch
}

type cpuScratch struct {
	x, h, q, kk, vv, att, o, gate, up []float32
	cos, sin                          []float32
}

var _ Backend = (*CPUBackend)(nil)

// NewCPUBackend allocates KV memory for numSlots slots. threads <= 0 means GOMAXPROCS.
func NewCPUBackend(cfg Config, w *Weights, numSlots, threads int) (*CPUBackend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkWeights(cfg, w); err != nil {
		return nil, err
	}
	if numSlots <= 0 {
		return nil, fmt.Errorf("engine: CPU backend: %d KV slots: %w", numSlots, ErrBadConfig)
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	b := &CPUBackend{cfg: cfg, w: w, numSlots: numSlots, threads: threads, invFreq: RopeInvFreq(cfg)}
	kvd := cfg.KVDim()
	for range cfg.NumLayers {
		b.k = append(b.k, make([]float32, numSlots*kvd))
		b.v = append(b.v, make([]float32, numSlots*kvd))
	}
	return b, nil
}

// Close drops the KV memory.
func (b *CPUBackend) Close() error {
	b.k, b.v = nil, nil
	return nil
}

// KV returns the key and value vectors ([NumKVHeads*HeadDim], aliasing the
// backend's memory; read-only) of slot in layer, for tests.
func (b *CPUBackend) KV(layer int, slot int32) (k, v []float32) {
	d := b.cfg.KVDim()
	o := int(slot) * d
	return b.k[layer][o : o+d], b.v[layer][o : o+d]
}

// CopySlots copies, in order, the KV of slot src[i] to slot dst[i] in every layer.
func (b *CPUBackend) CopySlots(src, dst []int32) error {
	if len(src) != len(dst) {
		return fmt.Errorf("engine: CopySlots: %d sources, %d destinations", len(src), len(dst))
	}
	for i := range src {
		if src[i] < 0 || int(src[i]) >= b.numSlots || dst[i] < 0 || int(dst[i]) >= b.numSlots {
			return fmt.Errorf("engine: CopySlots: slot pair (%d, %d) out of range [0, %d)", src[i], dst[i], b.numSlots)
		}
	}
	d := b.cfg.KVDim()
	for l := range b.k {
		for i := range src {
			s, t := int(src[i])*d, int(dst[i])*d
			copy(b.k[l][t:t+d], b.k[l][s:s+d])
			copy(b.v[l][t:t+d], b.v[l][s:s+d])
		}
	}
	return nil
}

// RopeInvFreq returns the rotary inverse frequencies of cfg ([HeadDim/2]),
// including linear or llama3 scaling, as HF transformers computes them
// (ROPE_INIT_FUNCTIONS), rounded to float32.
func RopeInvFreq(cfg Config) []float32 {
	half := cfg.HeadDim / 2
	out := make([]float32, half)
	r := cfg.RopeScaling
	for i := range half {
		// torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in float32.
		expo := float32(float32(2*i) / float32(cfg.HeadDim))
		f := float64(float32(1 / float32(math.Pow(cfg.RopeTheta, float64(expo)))))
		switch r.Type {
		case RopeLinear:
			f = float64(float32(f / r.Factor))
		case RopeLlama3:
			lowWav := float64(r.OriginalMaxPositions) / r.LowFreqFactor
			highWav := float64(r.OriginalMaxPositions) / r.HighFreqFactor
			wav := 2 * math.Pi / f
			switch {
			case wav > lowWav:
				f = f / r.Factor
			case wav < highWav:
			default:
				smooth := (float64(r.OriginalMaxPositions)/wav - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
				f = (1-smooth)*f/r.Factor + smooth*f
			}
			f = float64(float32(f))
		}
		out[i] = float32(f)
	}
	return out
}

// ropeCosSin fills cos/sin [len(pos)][half] for the given positions:
// angle = float32(pos) * invFreq (float32 product, as torch does).
func ropeCosSin(cos, sin []float32, pos []int32, invFreq []float32) {
	half := len(invFreq)
	for t, p := range pos {
		for j, f := range invFreq {
			a := float32(p) * f
			s, c := math.Sincos(float64(a))
			cos[t*half+j] = float32(c)
			sin[t*half+j] = float32(s)
		}
	}
}

// applyRope rotates each head of x ([heads][headDim]) in place with the
// rotate_half convention: out[j] = x[j]*cos - x[j+half]*sin,
// out[j+half] = x[j+half]*cos + x[j]*sin.
func applyRope(x []float32, heads, headDim int, cos, sin []float32) {
	half := headDim / 2
	for h := range heads {
		v := x[h*headDim : (h+1)*headDim]
		for j := range half {
			x1, x2 := v[j], v[j+half]
			v[j] = x1*cos[j] - x2*sin[j]
			v[j+half] = x2*cos[j] + x1*sin[j]
		}
	}
}

// rmsNorm writes w * (x * rsqrt(mean(x^2) + eps)) for one row, as HF's
// LlamaRMSNorm in float32 (the mean is accumulated in float64).
func rmsNorm(out, x, w []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	variance := float32(ss / float64(len(x)))
	r := float32(1 / math.Sqrt(float64(variance+float32(eps))))
	for i, v := range x {
		out[i] = w[i] * (v * r)
	}
}

func silu(x float32) float32 {
	return float32(float64(x) / (1 + math.Exp(-float64(x))))
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// validate checks one request against the backend's limits.
func (b *CPUBackend) validate(i int, r *ForwardRequest) error {
	return ValidateRequest(b.cfg, b.numSlots, i, r)
}

// ValidateRequest checks a ForwardRequest (index i in the batch) against a
// model config and a KV capacity: lengths agree, tokens are in the
// vocabulary, slots are in range, parents form a tree, logits has room.
// Backends call it before touching memory.
func ValidateRequest(cfg Config, numSlots, i int, r *ForwardRequest) error {
	n := len(r.Tokens)
	bad := func(f string, a ...any) error {
		return fmt.Errorf("engine: forward request %d: %s", i, fmt.Sprintf(f, a...))
	}
	if len(r.Positions) != n || len(r.Slots) != n {
		return bad("%d tokens, %d positions, %d slots", n, len(r.Positions), len(r.Slots))
	}
	if r.Parents != nil && len(r.Parents) != n {
		return bad("%d tokens, %d parents", n, len(r.Parents))
	}
	for j, t := range r.Tokens {
		if t < 0 || int(t) >= cfg.VocabSize {
			return bad("token %d = %d out of range [0, %d)", j, t, cfg.VocabSize)
		}
		if r.Slots[j] < 0 || int(r.Slots[j]) >= numSlots {
			return bad("slot %d = %d out of range [0, %d)", j, r.Slots[j], numSlots)
		}
		if r.Positions[j] < 0 || int(r.Positions[j]) >= maxPositions {
			return bad("position %d = %d out of range", j, r.Positions[j])
		}
		if r.Parents != nil && (r.Parents[j] < -1 || int(r.Parents[j]) >= j) {
			return bad("parent %d = %d not in [-1, %d)", j, r.Parents[j], j)
		}
	}
	for j, s := range r.CachedSlots {
		if s < 0 || int(s) >= numSlots {
			return bad("cached slot %d = %d out of range [0, %d)", j, s, numSlots)
		}
	}
	rows := n
	if r.LogitsRows != nil {
		rows = len(r.LogitsRows)
		for j, row := range r.LogitsRows {
			if row < 0 || int(row) >= n {
				return bad("logits row %d = %d out of range [0, %d)", j, row, n)
			}
		}
	}
	if len(r.Logits) < rows*cfg.VocabSize {
		return bad("logits buffer %d < %d rows * vocab %d", len(r.Logits), rows, cfg.VocabSize)
	}
	return nil
}

// Forward runs one batched forward (see Backend).
func (b *CPUBackend) Forward(reqs []*ForwardRequest) error {
	cfg := b.cfg
	T := 0
	for i, r := range reqs {
		if err := b.validate(i, r); err != nil {
			return err
		}
		T += len(r.Tokens)
	}
	if T == 0 {
		return nil
	}
	H, Q, KV, I, HD := cfg.HiddenSize, cfg.QDim(), cfg.KVDim(), cfg.IntermediateSize, cfg.HeadDim
	half := HD / 2
	s := &b.scratch
	s.x, s.h = grow(s.x, T*H), grow(s.h, T*H)
	s.q, s.kk, s.vv = grow(s.q, T*Q), grow(s.kk, T*KV), grow(s.vv, T*KV)
	s.att, s.o = grow(s.att, T*Q), grow(s.o, T*H)
	s.gate, s.up = grow(s.gate, T*I), grow(s.up, T*I)
	s.cos, s.sin = grow(s.cos, T*half), grow(s.sin, T*half)

	// Flatten the batch: tokens, positions, slots.
	toks := make([]int32, 0, T)
	pos := make([]int32, 0, T)
	slots := make([]int32, 0, T)
	for _, r := range reqs {
		toks = append(toks, r.Tokens...)
		pos = append(pos, r.Positions...)
		slots = append(slots, r.Slots...)
	}
	for t, id := range toks {
		copy(s.x[t*H:(t+1)*H], b.w.Embed[int(id)*H:(int(id)+1)*H])
	}
	ropeCosSin(s.cos, s.sin, pos, b.invFreq)
	attn := b.buildAttention(reqs)

	for l := range cfg.NumLayers {
		lw := &b.w.Layers[l]
		for t := range T {
			rmsNorm(s.h[t*H:(t+1)*H], s.x[t*H:(t+1)*H], lw.AttnNorm, cfg.RMSNormEps)
		}
		matmulT(b.threads, s.q, s.h, lw.Wq, T, H, Q)
		matmulT(b.threads, s.kk, s.h, lw.Wk, T, H, KV)
		matmulT(b.threads, s.vv, s.h, lw.Wv, T, H, KV)
		kc, vc := b.k[l], b.v[l]
		for t := range T {
			c, sn := s.cos[t*half:(t+1)*half], s.sin[t*half:(t+1)*half]
			applyRope(s.q[t*Q:(t+1)*Q], cfg.NumHeads, HD, c, sn)
			applyRope(s.kk[t*KV:(t+1)*KV], cfg.NumKVHeads, HD, c, sn)
			o := int(slots[t]) * KV
			copy(kc[o:o+KV], s.kk[t*KV:(t+1)*KV])
			copy(vc[o:o+KV], s.vv[t*KV:(t+1)*KV])
		}
		b.attention(attn, s.q, s.att, kc, vc)
		matmulT(b.threads, s.o, s.att, lw.Wo, T, Q, H)
		for i := range s.x[:T*H] {
			s.x[i] += s.o[i]
		}
		for t := range T {
			rmsNorm(s.h[t*H:(t+1)*H], s.x[t*H:(t+1)*H], lw.MLPNorm, cfg.RMSNormEps)
		}
		matmulT(b.threads, s.gate, s.h, lw.WGate, T, H, I)
		matmulT(b.threads, s.up, s.h, lw.WUp, T, H, I)
		for i := range s.gate[:T*I] {
			s.gate[i] = silu(s.gate[i]) * s.up[i]
		}
		matmulT(b.threads, s.o, s.gate, lw.WDown, T, I, H)
		for i := range s.x[:T*H] {
			s.x[i] += s.o[i]
		}
	}

	// Final norm and LM head on the requested rows only.
	var rows []int // global token index of each logits row
	off := 0
	for _, r := range reqs {
		if r.LogitsRows == nil {
			for j := range r.Tokens {
				rows = append(rows, off+j)
			}
		} else {
			for _, j := range r.LogitsRows {
				rows = append(rows, off+int(j))
			}
		}
		off += len(r.Tokens)
	}
	if len(rows) == 0 {
		return nil
	}
	R := len(rows)
	hn := make([]float32, R*H)
	for i, t := range rows {
		rmsNorm(hn[i*H:(i+1)*H], s.x[t*H:(t+1)*H], b.w.Norm, cfg.RMSNormEps)
	}
	V := cfg.VocabSize
	logits := make([]float32, R*V)
	matmulT(b.threads, logits, hn, b.w.LMHead, R, H, V)
	i := 0
	for _, r := range reqs {
		n := len(r.Tokens)
		if r.LogitsRows != nil {
			n = len(r.LogitsRows)
		}
		copy(r.Logits[:n*V], logits[i*V:(i+n)*V])
		i += n
	}
	return nil
}

// attnPlan lists, for every new token of the batch (global index), the KV
// slots it attends to (cached prefix, then its ancestors, then itself).
type attnPlan struct {
	keys [][]int32
}

func (b *CPUBackend) buildAttention(reqs []*ForwardRequest) attnPlan {
	var p attnPlan
	for _, r := range reqs {
		c := len(r.CachedSlots)
		for i := range r.Tokens {
			var ks []int32
			if r.Parents == nil {
				ks = make([]int32, 0, c+i+1)
				ks = append(ks, r.CachedSlots...)
				ks = append(ks, r.Slots[:i+1]...)
			} else {
				var anc []int32
				for j := int32(i); j >= 0; j = r.Parents[j] {
					anc = append(anc, r.Slots[j])
				}
				ks = make([]int32, 0, c+len(anc))
				ks = append(ks, r.CachedSlots...)
				for j := len(anc) - 1; j >= 0; j-- {
					ks = append(ks, anc[j])
				}
			}
			p.keys = append(p.keys, ks)
		}
	}
	return p
}

// attention computes, per token and query head, softmax(q·K^T / sqrt(d)) V
// over the plan's slots (GQA: query head h uses KV head h / (heads/kvHeads)).
func (b *CPUBackend) attention(p attnPlan, q, out, kc, vc []float32) {
	cfg := b.cfg
	NH, HD, KV := cfg.NumHeads, cfg.HeadDim, cfg.KVDim()
	group := NH / cfg.NumKVHeads
	scale := float32(1 / math.Sqrt(float64(HD)))
	T := len(p.keys)
	parallelFor(b.threads, T*NH, 1, func(lo, hi int) {
		var sc []float32
		acc := make([]float32, HD)
		for job := lo; job < hi; job++ {
			t, h := job/NH, job%NH
			g := h / group
			ks := p.keys[t]
			sc = grow(sc, len(ks))
			qv := q[t*NH*HD+h*HD : t*NH*HD+(h+1)*HD]
			mx := float32(math.Inf(-1))
			for i, slot := range ks {
				o := int(slot)*KV + g*HD
				v := dot(qv, kc[o:o+HD]) * scale
				sc[i] = v
				if v > mx {
					mx = v
				}
			}
			var sum float64
			for i, v := range sc {
				e := float32(math.Exp(float64(v - mx)))
				sc[i] = e
				sum += float64(e)
			}
			inv := float32(1 / sum)
			clear(acc)
			for i, slot := range ks {
				pw := sc[i] * inv
				o := int(slot)*KV + g*HD
				vv := vc[o : o+HD]
				for d := range acc {
					acc[d] += pw * vv[d]
				}
			}
			copy(out[t*NH*HD+h*HD:], acc)
		}
	})
}
