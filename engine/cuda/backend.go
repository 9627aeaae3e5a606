// Package cuda implements engine.Backend on an NVIDIA GPU over package
// kernels: fp16 weights, fp32 activations and KV cache, fp32 accumulation.
// Batches of up to kernels.GemvMaxM tokens run through our GEMV kernels and
// are captured as CUDA graphs (one per token/logit-row count) and replayed;
// larger batches (prefill) use cuBLAS when present. No cgo is needed: without
// a GPU, New returns an error wrapping kernels.ErrNoCUDA and
// engine.ErrBackendMissing, and the caller falls back to the CPU backend.
package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/safetensors"
)

// ErrSlot: a slot index outside [0, NumSlots).
var ErrSlot = errors.New("cuda backend: slot out of range")

// ErrRequest: a malformed ForwardRequest (lengths, parents, logits rows).
var ErrRequest = errors.New("cuda backend: bad forward request")

// Options tune the backend. Zero values pick defaults.
type Options struct {
	Device   int    // GPU ordinal
	NumSlots int    // KV capacity in tokens (slots); default 8192
	Random   bool   // ignore Weights; fill weights on device from Seed (benchmarks)
	Seed     uint64 // for Random
	NoGraphs bool   // run small batches eagerly instead of through CUDA graphs
	NoCUBLAS bool   // large batches through chunked GEMV even when cuBLAS is present
	NoPDL    bool   // no programmatic dependent launch (also Tuning.NoPDL)
	// NoAttnTile computes prefill attention with the per-token kernel
	// instead of attn_tile (also with SPECGATE_ATTN_TILE=0).
	NoAttnTile bool
	// NoDeviceSampling makes SamplesOnDevice report false, so the engine
	// samples on the CPU (also with SPECGATE_DEVICE_SAMPLING=0).
	NoDeviceSampling bool
	// NoGraphBatched captures only GEMV-sized steps as CUDA graphs, not the
	// batched ones of up to MaxGraphTokens tokens with cuBLAS GEMMs inside
	// (also with SPECGATE_GRAPH_BATCHED=0).
	NoGraphBatched bool
	// TimeSteps records device events around each forward's uploads and
	// kernels (not the copy back), read with StepTimes (benchmarks).
	TimeSteps bool
	// NoDeviceHeads runs Medusa-style draft heads and the tree argmax on
	// the host instead of inside the forward (heads.go; also with
	// SPECGATE_DEVICE_HEADS=0). NoHeadsFused never uses the fused head
	// kernels (also with SPECGATE_HEADS_FUSED=0).
	NoDeviceHeads, NoHeadsFused bool
	// FastVerify runs tree-verification steps of 9..64 tokens through
	// cuBLAS GEMMs instead of chunked GEMVs: faster, but their rounding
	// differs from plain decoding's, so a greedy output can differ from
	// plain decoding at a near-tie (exact.go; also with
	// SPECGATE_EXACT_VERIFY=0). Off by default: the output of speculation
	// is plain decoding's.
	FastVerify bool
	Eps        float32 // overrides cfg.RMSNormEps when > 0
	// Quantize: "" (or "none"/"fp16"): fp16 weights; engine.QuantInt8:
	// int8 weight-only projections and LM head; QuantInt4: int4
	// group-wise, quantized at upload (CUDA only; quant.go).
	Quantize string
	// Tuning is the kernel tuning of the backend's device (GEMV
	// families, launch shapes, split attention; zero values: the
	// measured defaults). Each backend opens its own device with it.
	Tuning kernels.Tuning
}

type layer struct {
	wqkv, wo, wgu, wd qmat              // fp16 or int8 (quant.go) [qDim+2kvDim][H] (kernels.RopeRows order), [H][qDim], [2I][H] interleaved, [H][I]
	attnNorm, mlpNorm kernels.DevicePtr // fp16 [H]
	bqkv              kernels.DevicePtr // fp32 [qDim+2kvDim] q/k/v biases in RopeRows order (Config.QKVBias), else 0
}

// Backend is the GPU engine.Backend. Its methods are safe for concurrent
// use (they are serialised on the device worker).
type Backend struct {
	cfg    engine.Config
	opt    Options
	dev    *kernels.Device
	layers []layer
	embed  kernels.DevicePtr // fp16 [V][H]
	lmHead kernels.DevicePtr // fp16 [V][H] (== embed when tied)
	norm   kernels.DevicePtr // fp16 [H]
	inv    kernels.DevicePtr // fp32 [hd/2]
	kc, vc kernels.DevicePtr // fp32 [L][NumSlots][kvDim]
	allocs []kernels.DevicePtr

	lmHeadQ  qmat              // the LM head decode reads: {lmHead, 0}, or int8 (quant.go)
	deq      kernels.DevicePtr // int8 weights: fp16 scratch of deqElems for the cuBLAS path
	deqElems int

	qkvDim, kvDim int
	weightBytes   int64
	eps           float32

	// Scratch, sized for capT tokens and capR logit rows.
	capT, capR               int
	x, qkv, attn, act, gu    kernels.DevicePtr
	h16, logits              kernels.DevicePtr
	argIdx                   kernels.DevicePtr // int32 [capR]: device argmax of each logits row
	stepOut, stepCnt         kernels.DevicePtr // DecodeGreedy: int32 [MaxDecodeSteps] tokens, int32 step counter
	meta                     kernels.DevicePtr // int32 metadata, layout from metaLayout(capT, capS, capW, capR)
	capS, capW               int
	stage                    kernels.HostBuf // pinned: metadata (int32) then logits (fp32)
	stageMetaBytes           int
	tmpKV                    kernels.DevicePtr
	tmpKVCap                 int
	graphs                   map[graphKey]*kernels.Graph
	closed                   bool
	hostMeta                 []int32
	hostFlat                 flatBatch
	lastGraphHit, graphsMade int
	ev0, ev1                 kernels.Event     // TimeSteps
	stepTimes                stepTimeLog       // TimeSteps: device seconds per forward (forward.go)
	attnMax                  int               // longest key count of the step being queued (AttnMeta.MaxLen)
	tileTokens               int               // kernels.AttnTileTokens of the model; 0: no attn_tile
	nTiles, nRest            int               // the step's attn_tile tiles and per-token attention tokens (uploadMeta)
	samp                     sampleIO          // device sampling (sample.go)
	noGraph                  map[graphKey]bool // batched shapes whose capture failed: eager
	seen                     map[graphKey]int  // eager runs of graphable shapes not yet captured (eagerFirst)
	hid                      kernels.DevicePtr
	hidHost                  kernels.HostBuf
	hidCap                   int        // bytes of hid and hidHost
	hd                       headsIO    // draft heads on the device (heads.go)
	exact                    bool       // the step being queued runs chunked GEMVs (exact.go)
	prof                     *stageProf // stage profile (prof.go), nil: off
}

var _ engine.Backend = (*Backend)(nil)

// New copies w (converted to fp16) onto GPU opt.Device and allocates a KV
// cache of opt.NumSlots slots. w may be nil when opt.Random is set. The
// backend keeps no reference to w. New reads no environment: commands
// that honour the SPECGATE_* switches apply Options.WithEnv first.
func New(cfg engine.Config, w *engine.Weights, opt Options) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opt.NumSlots <= 0 {
		opt.NumSlots = 8192
	}
	if cfg.HiddenSize%8 != 0 || cfg.IntermediateSize%8 != 0 || cfg.QDim()%8 != 0 {
		return nil, fmt.Errorf("cuda backend: hidden %d, intermediate %d and q dim %d must be multiples of 8: %w",
			cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), engine.ErrBadConfig)
	}
	switch cfg.HeadDim {
	case 8, 16, 32, 64, 128, 256:
	default:
		return nil, fmt.Errorf("cuda backend: head_dim %d unsupported (8, 16, 32, 64, 128, 256): %w", cfg.HeadDim, engine.ErrBadConfig)
	}
	if w == nil && !opt.Random {
		return nil, fmt.Errorf("cuda backend: no weights: %w", engine.ErrBadWeights)
	}
	q, err := checkQuantize(cfg, w, opt.Quantize)
	if err != nil {
		return nil, err
	}
	opt.Quantize = q
	tune := opt.Tuning
	tune.NoPDL = tune.NoPDL || opt.NoPDL
	dev, err := kernels.OpenTuned(opt.Device, tune)
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w: %w", engine.ErrBackendMissing, err)
	}
	b := &Backend{cfg: cfg, opt: opt, dev: dev, graphs: map[graphKey]*kernels.Graph{},
		qkvDim: cfg.QDim() + 2*cfg.KVDim(), kvDim: cfg.KVDim(), eps: float32(cfg.RMSNormEps)}
	if opt.Eps > 0 {
		b.eps = opt.Eps
	}
	if !opt.NoAttnTile {
		b.tileTokens = kernels.AttnTileTokens(cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim)
	}
	if err := dev.Do(func(c *kernels.Ctx) error { return b.load(c, w) }); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Factory returns an engine.BackendFactory that builds this backend (for
// engine.LoadOptions.NewBackend); numSlots overrides opt.NumSlots.
func Factory(opt Options) engine.BackendFactory {
	return func(cfg engine.Config, w *engine.Weights, numSlots int) (engine.Backend, error) {
		o := opt
		o.NumSlots = numSlots
		return New(cfg, w, o)
	}
}

// Device describes the GPU.
func (b *Backend) Device() *kernels.Device { return b.dev }

// NumSlots is the KV capacity in tokens.
func (b *Backend) NumSlots() int { return b.opt.NumSlots }

// WeightBytes is the bytes of weights on the device.
func (b *Backend) WeightBytes() int64 { return b.weightBytes }

// Config is the model's configuration.
func (b *Backend) Config() engine.Config { return b.cfg }

func (b *Backend) alloc(c *kernels.Ctx, bytes int) (kernels.DevicePtr, error) {
	p, err := c.Alloc(bytes)
	if err == nil {
		b.allocs = append(b.allocs, p)
	}
	return p, err
}

// layerF32 is one layer's weights as float32 (F32 tensors shared, others
// widened) for the fp16 upload.
type layerF32 struct {
	AttnNorm, Wq, Wk, Wv, Wo, MLPNorm, WGate, WUp, WDown []float32
}

func f32Layer(l *engine.LayerWeights) *layerF32 {
	return &layerF32{l.AttnNorm.Float32(), l.Wq.Float32(), l.Wk.Float32(), l.Wv.Float32(), l.Wo.Float32(),
		l.MLPNorm.Float32(), l.WGate.Float32(), l.WUp.Float32(), l.WDown.Float32()}
}

func toF16(v []float32) []uint16 {
	out := make([]uint16, len(v))
	for i, x := range v {
		out[i] = safetensors.Float32ToF16(x)
	}
	return out
}

// upload allocates and fills an fp16 tensor of n elements: from the given
// host tensors concatenated, or random (scale) when Random.
func (b *Backend) upload(c *kernels.Ctx, n int, scale float32, parts ...[]float32) (kernels.DevicePtr, error) {
	p, err := b.alloc(c, 2*n)
	if err != nil {
		return 0, err
	}
	b.weightBytes += int64(2 * n)
	if b.opt.Random {
		b.opt.Seed += 0x9E3779B97F4A7C15
		if scale == 0 {
			return p, c.Memset32(p, 0x3c003c00, n/2) // 1.0 in fp16 (n even)
		}
		return p, c.FillRandomF16(p, int64(n), b.opt.Seed, scale)
	}
	h := make([]uint16, 0, n)
	for _, part := range parts {
		h = append(h, toF16(part)...)
	}
	if len(h) != n {
		return 0, fmt.Errorf("upload: %d elements, want %d: %w", len(h), n, engine.ErrBadWeights)
	}
	return p, kernels.Upload(c, p, h)
}

func (b *Backend) load(c *kernels.Ctx, w *engine.Weights) error {
	cfg := b.cfg
	H, I, V, L := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize, cfg.NumLayers
	q, kv := cfg.QDim(), cfg.KVDim()
	if !b.opt.Random {
		if len(w.Layers) != L || w.Embed.Len() != V*H || w.Norm.Len() != H || w.LMHead.Len() != V*H {
			return fmt.Errorf("cuda backend: weights do not match config (%d layers, embed %d, norm %d, lm_head %d): %w",
				len(w.Layers), w.Embed.Len(), w.Norm.Len(), w.LMHead.Len(), engine.ErrBadWeights)
		}
	} else {
		w = &engine.Weights{Layers: make([]engine.LayerWeights, L)}
	}
	var err error
	if b.embed, err = b.upload(c, V*H, 1, w.Embed.Float32()); err != nil {
		return fmt.Errorf("embed_tokens: %w", err)
	}
	if cfg.TieWordEmbeddings {
		b.lmHead = b.embed
	} else if b.lmHead, err = b.upload(c, V*H, 0.02, w.LMHead.Float32()); err != nil {
		return fmt.Errorf("lm_head: %w", err)
	}
	b.lmHeadQ = qmat{w: b.lmHead}
	if b.quantized() {
		var lm []float32
		if !b.opt.Random {
			lm = w.LMHead.Float32()
		}
		if b.lmHeadQ, err = b.uploadMat(c, V, H, 0.02, lm); err != nil {
			return fmt.Errorf("lm_head: %w", err)
		}
	}
	if b.norm, err = b.upload(c, H, 0, w.Norm.Float32()); err != nil {
		return fmt.Errorf("norm: %w", err)
	}
	b.layers = make([]layer, L)
	for l := range L {
		lw, ly := f32Layer(&w.Layers[l]), &b.layers[l]
		if !b.opt.Random && (len(lw.Wq) != q*H || len(lw.Wk) != kv*H || len(lw.Wv) != kv*H || len(lw.Wo) != H*q ||
			len(lw.WGate) != I*H || len(lw.WUp) != I*H || len(lw.WDown) != H*I || len(lw.AttnNorm) != H || len(lw.MLPNorm) != H) {
			return fmt.Errorf("cuda backend: layer %d: weight sizes do not match config: %w", l, engine.ErrBadWeights)
		}
		var qkv []float32
		if !b.opt.Random {
			// Rows in kernels.RopeRows order: rope pairs adjacent for the fused QKV+RoPE GEMV.
			std := [][]float32{lw.Wq, lw.Wk, lw.Wv}
			qkv = make([]float32, 0, (q+2*kv)*H)
			for _, r := range kernels.RopeRows(cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim) {
				part, i := 0, r
				for i >= len(std[part])/H {
					i -= len(std[part]) / H
					part++
				}
				qkv = append(qkv, std[part][i*H:(i+1)*H]...)
			}
		}
		if ly.wqkv, err = b.uploadMat(c, q+2*kv, H, 0.02, qkv); err != nil {
			return fmt.Errorf("layer %d qkv: %w", l, err)
		}
		if err := b.loadBias(c, w, l, ly); err != nil {
			return fmt.Errorf("layer %d qkv bias: %w", l, err)
		}
		if ly.wo, err = b.uploadMat(c, H, q, 0.02, lw.Wo); err != nil {
			return fmt.Errorf("layer %d o_proj: %w", l, err)
		}
		var gu []float32
		if !b.opt.Random {
			gu = make([]float32, 0, 2*I*H)
			for j := range I {
				gu = append(gu, lw.WGate[j*H:(j+1)*H]...)
				gu = append(gu, lw.WUp[j*H:(j+1)*H]...)
			}
		}
		if ly.wgu, err = b.uploadMat(c, 2*I, H, 0.02, gu); err != nil {
			return fmt.Errorf("layer %d gate/up: %w", l, err)
		}
		if ly.wd, err = b.uploadMat(c, H, I, 0.02, lw.WDown); err != nil {
			return fmt.Errorf("layer %d down: %w", l, err)
		}
		if ly.attnNorm, err = b.upload(c, H, 0, lw.AttnNorm); err != nil {
			return err
		}
		if ly.mlpNorm, err = b.upload(c, H, 0, lw.MLPNorm); err != nil {
			return err
		}
	}
	if err := b.allocDequant(c); err != nil {
		return fmt.Errorf("int8 dequantization scratch: %w", err)
	}
	inv := engine.RopeInvFreq(cfg)
	if b.inv, err = b.alloc(c, 4*len(inv)); err != nil {
		return err
	}
	if err := kernels.Upload(c, b.inv, inv); err != nil {
		return err
	}
	kvBytes := L * b.opt.NumSlots * kv * 4
	if b.kc, err = b.alloc(c, kvBytes); err != nil {
		return fmt.Errorf("KV cache of %d slots: %w", b.opt.NumSlots, err)
	}
	if b.vc, err = b.alloc(c, kvBytes); err != nil {
		return fmt.Errorf("KV cache of %d slots: %w", b.opt.NumSlots, err)
	}
	return c.Sync()
}

// Close releases all device memory and the device.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	_ = b.dev.Do(func(c *kernels.Ctx) error {
		b.freeScratch(c) // destroys the graphs too (destroying them twice crashed the driver)
		for _, p := range b.allocs {
			c.Free(p)
		}
		c.Free(b.tmpKV)
		b.samp.free(c)
		c.Free(b.hid)
		c.FreeHost(b.hidHost)
		b.freeHeads(c)
		if b.ev0 != 0 {
			c.DestroyEvent(b.ev0)
			c.DestroyEvent(b.ev1)
		}
		return nil
	})
	return b.dev.Close()
}

func (b *Backend) freeScratch(c *kernels.Ctx) {
	for _, p := range []kernels.DevicePtr{b.x, b.qkv, b.attn, b.act, b.gu, b.h16, b.logits, b.meta, b.argIdx, b.stepOut, b.stepCnt} {
		c.Free(p)
	}
	c.FreeHost(b.stage)
	b.x, b.qkv, b.attn, b.act, b.gu, b.h16, b.logits, b.meta, b.argIdx = 0, 0, 0, 0, 0, 0, 0, 0, 0
	b.stepOut, b.stepCnt = 0, 0
	b.stage = kernels.HostBuf{}
	for k, g := range b.graphs {
		c.DestroyGraph(g)
		delete(b.graphs, k)
	}
}

// metaLayout gives int32 offsets of the metadata arrays for capacities
// (tokens T, slot list S, mask words W, logit rows R).
type metaLayout struct {
	tokens, pos, slots, kvoff, kvlen, cached, maskoff, rows, tiles, rest, hrows, slotList, mask, total int
}

func layoutFor(T, S, W, R int) metaLayout {
	var m metaLayout
	o := 0
	next := func(n int) int { r := o; o += (n + 3) / 4 * 4; return r } // 16-byte aligned
	m.tokens, m.pos, m.slots = next(T), next(T), next(T)
	m.kvoff, m.kvlen, m.cached, m.maskoff = next(T), next(T), next(T), next(T)
	m.rows, m.tiles, m.rest, m.hrows = next(R), next(2*T), next(T), next(R)
	m.slotList, m.mask = next(S), next(max(W, 1))
	m.total = o
	return m
}

// ensure grows scratch to hold T tokens, S slot-list entries, W mask words, R logit rows.
func (b *Backend) ensure(c *kernels.Ctx, T, S, W, R int) error {
	if T <= b.capT && S <= b.capS && W <= b.capW && R <= b.capR && b.meta != 0 {
		return nil
	}
	b.freeScratch(c)
	T, S, W, R = max(T, b.capT, 16), max(S, b.capS, 4096), max(W, b.capW, 256), max(R, b.capR, 8)
	cfg := b.cfg
	var err error
	for _, a := range []struct {
		p     *kernels.DevicePtr
		bytes int
	}{
		{&b.x, T * cfg.HiddenSize * 4}, {&b.qkv, T * b.qkvDim * 4}, {&b.attn, T * cfg.QDim() * 4},
		{&b.act, T * cfg.IntermediateSize * 4}, {&b.gu, T * max(2*cfg.IntermediateSize, b.qkvDim) * 4},
		{&b.h16, T * max(cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim()) * 2},
		{&b.logits, R * cfg.VocabSize * 4}, {&b.argIdx, R * 4},
		{&b.stepOut, MaxDecodeSteps * 4}, {&b.stepCnt, 4},
	} {
		if *a.p, err = c.Alloc(a.bytes); err != nil {
			return err
		}
	}
	lay := layoutFor(T, S, W, R)
	if b.meta, err = c.Alloc(lay.total * 4); err != nil {
		return err
	}
	b.stageMetaBytes = lay.total * 4
	if b.stage, err = c.AllocHost(b.stageMetaBytes + max(R*cfg.VocabSize, MaxDecodeSteps)*4); err != nil {
		return err
	}
	b.capT, b.capS, b.capW, b.capR = T, S, W, R
	b.hostMeta = unsafe.Slice((*int32)(unsafe.Pointer(&b.stage.Bytes()[0])), lay.total)
	return nil
}

// captureAfter is how many times a graphable step shape runs eagerly
// before it is captured as a CUDA graph. Capturing and instantiating a
// step costs the host milliseconds (measured on the H100 inside bench
// spec's runs at concurrency 32: ~2.6 ms per batched step shape, about 7
// plain steps), and a serving process sees many shapes only once (a
// prefill chunk beside some decode tokens, a tree of an unusual size, a
// new attention split): each one captured at first sight cost the run that
// met it several percent (bench spec at concurrency 8: 10 captures in one
// plain run, +37 µs per step). A shape seen once now costs one eager run;
// one that comes back is captured at its second step and replayed after.
const captureAfter = 1

// eagerFirst reports, for a graphable shape with no graph yet, whether
// this step runs eagerly without capturing (fewer than captureAfter eager
// runs so far), and counts it.
func (b *Backend) eagerFirst(key graphKey) bool {
	if b.seen == nil {
		b.seen = map[graphKey]int{}
	}
	n := b.seen[key]
	if n >= captureAfter {
		return false
	}
	b.seen[key] = n + 1
	return true
}
