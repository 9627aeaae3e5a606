package cpu

import (
	"fmt"
	"math"
	"runtime"
	"slices"

	"github.com/specgate/specgate/engine/backend"
	"github.com/specgate/specgate/engine/model"
)

// CPUBackend is the pure-Go float32 Llama forward. It owns the KV memory:
// per layer, K and V of numSlots slots, each [NumKVHeads][HeadDim]. When
// every matmul weight is exactly representable in binary16 (fp16
// checkpoints) and the CPU has AVX2+FMA+F16C, it also keeps a binary16 copy
// of those weights (half the float32 size) and streams that instead: same
// results bit for bit, half the memory traffic per token.
// Not safe for concurrent Forward calls (Model serializes them).
type CPUBackend struct {
	cfg      model.Config
	w        *model.Weights
	embed    model.Tensor // w.Embed, rows widened per token
	norm     []float32    // w.Norm as float32
	numSlots int
	par      fanout      // Options.Threads (filled in) and Options.MinParallelMACs
	k, v     [][]float32 // [layer][slot*KVDim + head*HeadDim + d]
	invFreq  []float32   // [HeadDim/2]
	layers   []cpuLayer
	lmHead   wmat
	scratch  cpuScratch
	heads    headsReg // draft heads run inside Forward (heads.go)
}

// cpuLayer is one layer's matmul weights as the matmul kernels read them.
type cpuLayer struct {
	q, k, v, o, gate, up, down wmat
	attnNorm, mlpNorm          []float32
	bq, bk, bv                 []float32 // QKV biases (Config.QKVBias), else nil
}

type cpuScratch struct {
	x, h, q, kk, vv, att, o, gate, up []float32
	cos, sin, hn, logits              []float32
	lmIn                              []float32 // LM-head rows when some requests are HiddenOnly
	attnSc, attnAcc                   []float32 // attention on one thread: scores, value sums
	keyBuf                            []int32   // attention plan: every token's key slots, back to back
	keys                              [][]int32 // attention plan: one token's slots in keyBuf
	toks, pos, slots                  []int32
}

var _ backend.Backend = (*CPUBackend)(nil)

// Options tune a CPU backend. Zero values pick the defaults.
type Options struct {
	// Threads is the most threads one matmul or attention pass runs on
	// (<= 0: GOMAXPROCS).
	Threads int
	// MinParallelMACs: passes of fewer multiply-adds run on one thread
	// (0: DefaultMinParallelMACs; 1: every pass fans out).
	MinParallelMACs int
}

// DefaultMinParallelMACs is Options.MinParallelMACs's default: about 0.3
// ms of one core's FMA work. It keeps batch-1 decoding and verification
// forwards of up to 8 tokens of the shipped models on one thread (their
// largest pass, the target's LM head at 8 tokens, is 25M) and spreads
// prefill: on a shared 2-core machine a fan-out of the smaller passes cost
// 10-40% more CPU time (BenchmarkThreadPolicy) and made the target's
// 8-token forward slower (bench engine, 3 runs: 2.35 / 2.46 / 1.90 ms with
// the big passes on two threads vs 1.87 / 1.88 / 1.73 ms on one;
// docs/engine.md).
const DefaultMinParallelMACs = 1 << 25

// Options is the backend's fan-out as it runs (defaults filled in).
func (b *CPUBackend) Options() Options {
	return Options{Threads: b.par.threads, MinParallelMACs: b.par.minMACs}
}

// NewCPUBackend is New with Options{Threads: threads}.
func NewCPUBackend(cfg model.Config, w *model.Weights, numSlots, threads int) (*CPUBackend, error) {
	return New(cfg, w, numSlots, Options{Threads: threads})
}

// New allocates KV memory for numSlots slots; o tunes how passes spread
// over threads (the results do not depend on it: every output row is
// computed by one thread in a fixed order).
func New(cfg model.Config, w *model.Weights, numSlots int, o Options) (*CPUBackend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := model.Check(cfg, w); err != nil {
		return nil, err
	}
	if numSlots <= 0 {
		return nil, fmt.Errorf("engine: CPU backend: %d KV slots: %w", numSlots, model.ErrBadConfig)
	}
	if o.Threads <= 0 {
		o.Threads = runtime.GOMAXPROCS(0)
	}
	if o.MinParallelMACs <= 0 {
		o.MinParallelMACs = DefaultMinParallelMACs
	}
	b := &CPUBackend{cfg: cfg, w: w, numSlots: numSlots, par: fanout{o.Threads, o.MinParallelMACs}, invFreq: RopeInvFreq(cfg)}
	b.setWeights(true)
	kvd := cfg.KVDim()
	for range cfg.NumLayers {
		b.k = append(b.k, make([]float32, numSlots*kvd))
		b.v = append(b.v, make([]float32, numSlots*kvd))
	}
	return b, nil
}

// setWeights builds the matmul views of the weights; half asks for the
// binary16 copies (used only if every matmul weight converts exactly).
func (b *CPUBackend) setWeights(half bool) {
	w := b.w
	half = half && useAVX2 && hasF16C
	// Matmul weights as float32 (F32 tensors are shared, F16/BF16 widened
	// exactly; newWmatT), I8 kept as int8 (matmul_i8.go); F16 tensors are
	// binary16-exact by type.
	exact := func(t model.Tensor) bool {
		return t.DType == model.F16 || t.DType == model.I8 || newWmatExact(t.Float32())
	}
	if half {
		for _, l := range w.Layers {
			for _, m := range []model.Tensor{l.Wq, l.Wk, l.Wv, l.Wo, l.WGate, l.WUp, l.WDown} {
				half = half && exact(m)
			}
		}
		half = half && exact(w.LMHead)
	}
	lmHead := w.LMHead
	if backend.Int8Weights(w) && lmHead.DType != model.I8 {
		lmHead = lmHead.To(model.I8) // tied: project with an int8 copy, as the CUDA backend does
	}
	b.layers = make([]cpuLayer, len(w.Layers))
	for i, l := range w.Layers {
		H, Q, KV, I := b.cfg.HiddenSize, b.cfg.QDim(), b.cfg.KVDim(), b.cfg.IntermediateSize
		b.layers[i] = cpuLayer{q: newWmatT(l.Wq, Q, H, half), k: newWmatT(l.Wk, KV, H, half), v: newWmatT(l.Wv, KV, H, half),
			o: newWmatT(l.Wo, H, Q, half), gate: newWmatT(l.WGate, I, H, half), up: newWmatT(l.WUp, I, H, half),
			down: newWmatT(l.WDown, H, I, half), attnNorm: l.AttnNorm.Float32(), mlpNorm: l.MLPNorm.Float32()}
		if b.cfg.QKVBias {
			b.layers[i].bq, b.layers[i].bk, b.layers[i].bv = l.Bq.Float32(), l.Bk.Float32(), l.Bv.Float32()
		}
	}
	b.lmHead = newWmatT(lmHead, b.cfg.VocabSize, b.cfg.HiddenSize, half)
	b.embed, b.norm = w.Embed, w.Norm.Float32()
}

// HalfWeights reports whether the backend streams binary16 weight copies.
func (b *CPUBackend) HalfWeights() bool { return b.lmHead.h != nil }

// HalfCapable reports whether this CPU has the kernels that stream binary16
// weight copies (AVX2, FMA and F16C): an fp16 checkpoint then gets them.
func HalfCapable() bool { return useAVX2 && hasF16C }

// InvFreq returns the rotary inverse frequencies the backend uses (aliasing
// its memory: a diagnostic may change them between forwards).
func (b *CPUBackend) InvFreq() []float32 { return b.invFreq }

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
func RopeInvFreq(cfg model.Config) []float32 {
	half := cfg.HeadDim / 2
	out := make([]float32, half)
	r := cfg.RopeScaling
	for i := range half {
		// torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in float32.
		expo := float32(float32(2*i) / float32(cfg.HeadDim))
		f := float64(float32(1 / float32(math.Pow(cfg.RopeTheta, float64(expo)))))
		switch r.Type {
		case model.RopeLinear:
			f = float64(float32(f / r.Factor))
		case model.RopeLlama3:
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
	rmsScale(out, x, w, ss, eps)
}

// rmsScale is rmsNorm after the sum of squares ss of x.
func rmsScale(out, x, w []float32, ss, eps float64) {
	variance := float32(ss / float64(len(x)))
	r := float32(1 / math.Sqrt(float64(variance+float32(eps))))
	out, w = out[:len(x)], w[:len(x)]
	for i, v := range x {
		out[i] = w[i] * (v * r)
	}
}

// rmsNormRows is rmsNorm of each of the T rows of x ([T][len(w)]) into out,
// with the same operations per row (each row's sum of squares is one
// sequential float64 chain); four rows at a time keep four chains in
// flight instead of waiting on one add's latency per element (an 8-row
// pass 1.7 us instead of 3.0 us).
func rmsNormRows(out, x, w []float32, T int, eps float64) {
	H := len(w)
	t := 0
	for ; t+4 <= T; t += 4 {
		var ss [4]float64
		ss[0], ss[1], ss[2], ss[3] = sumSquares4(x[t*H:(t+4)*H], H)
		for j := range 4 {
			rmsScale(out[(t+j)*H:(t+j+1)*H], x[(t+j)*H:(t+j+1)*H], w, ss[j], eps)
		}
	}
	for ; t < T; t++ {
		rmsNorm(out[t*H:(t+1)*H], x[t*H:(t+1)*H], w, eps)
	}
}

// sumSquares4 returns, for each of the 4 rows of x ([4][H]), the float64
// sum of its squares in order, as rmsNorm accumulates it.
func sumSquares4(x []float32, H int) (float64, float64, float64, float64) {
	r0, r1, r2, r3 := x[:H], x[H:2*H], x[2*H:3*H], x[3*H:4*H]
	r1, r2, r3 = r1[:len(r0)], r2[:len(r0)], r3[:len(r0)]
	var s0, s1, s2, s3 float64
	for k, v := range r0 {
		a, b, c, d := float64(v), float64(r1[k]), float64(r2[k]), float64(r3[k])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	return s0, s1, s2, s3
}

// addBias adds bias to every row of x ([rows][len(bias)]).
func addBias(x, bias []float32) {
	n := len(bias)
	for o := 0; o < len(x); o += n {
		row := x[o : o+n]
		for i, v := range bias {
			row[i] += v
		}
	}
}

// addTo sets x[i] += y[i] for i in [0, len(x)) (the AVX2 path is
// fma(1, y, x), which rounds x + y exactly like the addition).
func addTo(x, y []float32) {
	y = y[:len(x)]
	n := 0
	if useAVX2 && len(x) >= 8 {
		n = len(x) &^ 7
		axpyAVX2(&x[0], &y[0], 1, n)
	}
	for i := n; i < len(x); i++ {
		x[i] += y[i]
	}
}

// soleLogits returns the Logits of the one request that takes all rows
// LM-head rows (nil when several requests share them, or none).
func (b *CPUBackend) soleLogits(reqs []*backend.ForwardRequest, rows int) []float32 {
	var sole []float32
	for _, r := range reqs {
		n := len(r.Tokens)
		if r.LogitsRows != nil {
			n = len(r.LogitsRows)
		}
		if r.HiddenOnly || n == 0 {
			continue
		}
		if sole != nil || n != rows {
			return nil
		}
		sole = r.Logits[:n*b.cfg.VocabSize]
	}
	return sole
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
func (b *CPUBackend) validate(i int, r *backend.ForwardRequest) error {
	return backend.ValidateRequest(b.cfg, b.numSlots, i, r)
}

// DecodeGreedy implements GreedyStepper with one Forward per step (the
// CPU has no host round trip to save; it keeps the engine's multi-step
// path testable without a GPU).
func (b *CPUBackend) DecodeGreedy(token, pos int32, cached, slots []int32, out []int32) error {
	if len(slots) < 1 || len(out) < len(slots) {
		return fmt.Errorf("engine: DecodeGreedy: %d steps, out holds %d", len(slots), len(out))
	}
	ctx := append([]int32(nil), cached...)
	logits := make([]float32, b.cfg.VocabSize)
	for i, s := range slots {
		r := &backend.ForwardRequest{CachedSlots: ctx, Tokens: []int32{token}, Positions: []int32{pos + int32(i)},
			Slots: []int32{s}, Logits: logits}
		if err := b.Forward([]*backend.ForwardRequest{r}); err != nil {
			return err
		}
		token = backend.Argmax(r.Logits)
		out[i] = token
		ctx = append(ctx, s)
	}
	return nil
}

var _ backend.GreedyStepper = (*CPUBackend)(nil)

// Forward runs one batched forward (see Backend).
func (b *CPUBackend) Forward(reqs []*backend.ForwardRequest) error {
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
	hj, err := b.headsOf(reqs) // draft heads (heads.go)
	if err != nil {
		return err
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
	toks, pos, slots := s.toks[:0], s.pos[:0], s.slots[:0]
	for _, r := range reqs {
		toks = append(toks, r.Tokens...)
		pos = append(pos, r.Positions...)
		slots = append(slots, r.Slots...)
	}
	s.toks, s.pos, s.slots = toks, pos, slots
	for t, id := range toks {
		b.embed.RowInto(s.x[t*H:(t+1)*H], int(id))
	}
	ropeCosSin(s.cos, s.sin, pos, b.invFreq)
	attn := b.buildAttention(reqs)

	for l := range cfg.NumLayers {
		if l == max(cfg.NumLayers-headsWakeLayers, 0) {
			b.wakeHeads(hj)
		}
		cl := &b.layers[l]
		rmsNormRows(s.h, s.x, cl.attnNorm, T, cfg.RMSNormEps)
		matmulJobs(b.par, s.h, T, H, mmJob{s.q, &cl.q, Q}, mmJob{s.kk, &cl.k, KV}, mmJob{s.vv, &cl.v, KV})
		if cl.bq != nil {
			addBias(s.q[:T*Q], cl.bq)
			addBias(s.kk[:T*KV], cl.bk)
			addBias(s.vv[:T*KV], cl.bv)
		}
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
		matmulJobs(b.par, s.att, T, Q, mmJob{s.o, &cl.o, H})
		addTo(s.x[:T*H], s.o)
		rmsNormRows(s.h, s.x, cl.mlpNorm, T, cfg.RMSNormEps)
		matmulJobs(b.par, s.h, T, H, mmJob{s.gate, &cl.gate, I}, mmJob{s.up, &cl.up, I})
		siluMul(s.gate[:T*I], s.up[:T*I])
		matmulJobs(b.par, s.gate, T, I, mmJob{s.o, &cl.down, H})
		addTo(s.x[:T*H], s.o)
	}

	// Final norm and LM head on the requested rows only.
	R := 0
	for _, r := range reqs {
		if r.LogitsRows == nil {
			R += len(r.Tokens)
		} else {
			R += len(r.LogitsRows)
		}
	}
	if R == 0 {
		return nil
	}
	V := cfg.VocabSize
	s.hn = grow(s.hn, R*H)
	if b.soleLogits(reqs, R) == nil {
		s.logits = grow(s.logits, R*V)
	}
	hn := s.hn
	i, off := 0, 0
	for _, r := range reqs {
		if r.LogitsRows == nil {
			n := len(r.Tokens)
			rmsNormRows(hn[i*H:(i+n)*H], s.x[off*H:(off+n)*H], b.norm, n, cfg.RMSNormEps)
			i += n
		} else {
			for _, j := range r.LogitsRows {
				t := off + int(j)
				rmsNorm(hn[i*H:(i+1)*H], s.x[t*H:(t+1)*H], b.norm, cfg.RMSNormEps)
				i++
			}
		}
		off += len(r.Tokens)
	}
	logits := s.logits
	lmIn, lmRows := b.lmHeadRows(reqs, hn, R)
	// one request takes every LM-head row (batch 1, a verification tree):
	// the matmul writes its logits in place instead of through s.logits
	direct := b.soleLogits(reqs, lmRows)
	if direct != nil {
		logits = direct
	}
	// draft heads on the final hidden rows, on a worker while this
	// goroutine runs the LM head (heads.go)
	b.readyHeads(hj, hn)
	if lmRows > 0 {
		matmulJobs(b.par, lmIn, lmRows, H, mmJob{logits, &b.lmHead, V})
	}
	b.finishHeads(hj)
	i, li := 0, 0
	for _, r := range reqs {
		n := len(r.Tokens)
		if r.LogitsRows != nil {
			n = len(r.LogitsRows)
		}
		if !r.HiddenOnly {
			if direct == nil {
				copy(r.Logits[:n*V], logits[li*V:(li+n)*V])
			}
			li += n
		}
		if r.Hidden != nil {
			copy(r.Hidden[:n*H], hn[i*H:(i+n)*H])
		}
		i += n
	}
	return nil
}

// attnPlan lists, for every new token of the batch (global index), the KV
// slots it attends to (cached prefix, then its ancestors, then itself).
// keys alias the backend's scratch (valid until the next Forward).
type attnPlan struct {
	keys [][]int32
}

func (b *CPUBackend) buildAttention(reqs []*backend.ForwardRequest) attnPlan {
	s := &b.scratch
	total, T := 0, 0
	for _, r := range reqs {
		n := len(r.Tokens)
		total += n*len(r.CachedSlots) + n*(n+1)/2 // at most: a chain
		T += n
	}
	if cap(s.keyBuf) < total {
		s.keyBuf = make([]int32, 0, total)
	}
	if cap(s.keys) < T {
		s.keys = make([][]int32, 0, T)
	}
	buf, keys := s.keyBuf[:0], s.keys[:0]
	for _, r := range reqs {
		for i := range r.Tokens {
			start := len(buf)
			buf = append(buf, r.CachedSlots...)
			if r.Parents == nil {
				buf = append(buf, r.Slots[:i+1]...)
			} else {
				// ancestors, self first, then reversed in place
				a := len(buf)
				for j := int32(i); j >= 0; j = r.Parents[j] {
					buf = append(buf, r.Slots[j])
				}
				slices.Reverse(buf[a:])
			}
			keys = append(keys, buf[start:len(buf):len(buf)])
		}
	}
	s.keyBuf, s.keys = buf, keys
	return attnPlan{keys: keys}
}

// attnTokenBlock is the most tokens one attention job (one KV head)
// serves: their scores, then their value sums (AVX-512 path).
const attnTokenBlock = 8

// attention computes, per token and query head, softmax(q·K^T / sqrt(d)) V
// over the plan's slots (GQA: query head h uses KV head h / (heads/kvHeads)).
func (b *CPUBackend) attention(p attnPlan, q, out, kc, vc []float32) {
	cfg := b.cfg
	NH, HD, KV := cfg.NumHeads, cfg.HeadDim, cfg.KVDim()
	group := NH / cfg.NumKVHeads
	scale := float32(1 / math.Sqrt(float64(HD)))
	T := len(p.keys)
	keys := 0
	for _, ks := range p.keys {
		keys += len(ks)
	}
	threads := b.par.threadsFor(2 * keys * NH * HD)
	if hasAttn512(HD) {
		// Jobs of one KV head and a block of up to attnTokenBlock tokens,
		// KV head outermost: first the scores and softmax of every query
		// head of the group for every token of the block, then their value
		// sums, one pass over the value rows per token for the group's
		// heads. A token's keys (its request's cached prefix and its
		// ancestors) are mostly shared with the other tokens of its block,
		// so one KV head's key rows, then its value rows, are read from L1
		// by all of them (per token and KV head, keys and then values, the
		// two KV heads' rows of a 128-token context evicted each other from
		// L1: 21% of an 8-token forward of the shipped target was
		// attention). Each score, softmax and value sum is computed as
		// before, so the order changes no bit.
		NKV := cfg.NumKVHeads
		nb := (T + attnTokenBlock - 1) / attnTokenBlock
		parallelFor(threads, NKV*nb, 1, func(lo, hi int) {
			var sc, acc []float32
			if threads == 1 { // one goroutine: the backend's scratch
				sc, acc = b.scratch.attnSc, grow(b.scratch.attnAcc, group*HD)
				defer func() { b.scratch.attnSc, b.scratch.attnAcc = sc, acc }()
			} else {
				acc = make([]float32, group*HD)
			}
			for job := lo; job < hi; job++ {
				g, blk := job/nb, job%nb
				t0, t1 := blk*attnTokenBlock, min((blk+1)*attnTokenBlock, T)
				tot := 0
				for t := t0; t < t1; t++ {
					tot += group * len(p.keys[t])
				}
				sc = grow(sc, tot)
				off := 0
				for t := t0; t < t1; t++ {
					ks := p.keys[t]
					n := len(ks)
					for j := range group {
						h := g*group + j
						qv := q[t*NH*HD+h*HD : t*NH*HD+(h+1)*HD]
						row := sc[off+j*n : off+(j+1)*n]
						scores512(&qv[0], &kc[g*HD], ks, KV, HD, row)
						softmaxScaled(row, scale)
					}
					off += group * n
				}
				off = 0
				for t := t0; t < t1; t++ {
					ks := p.keys[t]
					n := len(ks)
					clear(acc)
					values512(acc, &vc[g*HD], ks, sc[off:off+group*n], n, group, KV, HD)
					copy(out[t*NH*HD+g*group*HD:], acc)
					off += group * n
				}
			}
		})
		return
	}
	parallelFor(threads, T*NH, 1, func(lo, hi int) {
		var sc []float32
		acc := make([]float32, HD)
		fast := useAVX2 && HD%8 == 0
		for job := lo; job < hi; job++ {
			t, h := job/NH, job%NH
			g := h / group
			ks := p.keys[t]
			sc = grow(sc, len(ks))
			qv := q[t*NH*HD+h*HD : t*NH*HD+(h+1)*HD]
			if fast {
				// the same dots as below, one kernel call per head
				dotsAVX2(&qv[0], &kc[g*HD], &ks[0], len(ks), KV, HD, &sc[0])
			} else {
				for i, slot := range ks {
					o := int(slot)*KV + g*HD
					sc[i] = dot(qv, kc[o:o+HD])
				}
			}
			softmaxScaled(sc, scale)
			clear(acc)
			if fast {
				// the same FMAs as len(ks) axpy calls, acc kept in registers
				axpysAVX2(&acc[0], &vc[g*HD], &ks[0], &sc[0], len(ks), KV, HD)
			} else {
				for i, slot := range ks {
					o := int(slot)*KV + g*HD
					axpy(acc, vc[o:o+HD], sc[i])
				}
			}
			copy(out[t*NH*HD+h*HD:], acc)
		}
	})
}
