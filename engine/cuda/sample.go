package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// Sampling on the device and hidden-state rows (engine.DeviceSampler,
// ForwardRequest.Sample and ForwardRequest.Hidden).

var _ engine.DeviceSampler = (*Backend)(nil)

// SamplesOnDevice implements engine.DeviceSampler: true unless
// Options.NoDeviceSampling or SPECGATE_DEVICE_SAMPLING=0.
func (b *Backend) SamplesOnDevice() bool {
	return !b.opt.NoDeviceSampling
}

// sampleIO is the device and pinned host memory of one step's device
// sampling: parameters [R][8] int32, then tokens [R] int32, logprobs [R]
// fp32, then penalty tokens [P] int32 and deltas [P] fp32.
type sampleIO struct {
	capR, capP int
	dev        kernels.DevicePtr
	host       kernels.HostBuf
}

func (s *sampleIO) free(c *kernels.Ctx) {
	c.Free(s.dev)
	c.FreeHost(s.host)
	*s = sampleIO{}
}

func (s *sampleIO) bytes(R, P int) int { return (R*(kernels.SampleParamWords+2) + 2*P) * 4 }

func (s *sampleIO) ensure(c *kernels.Ctx, R, P int) error {
	if R <= s.capR && P <= s.capP && s.dev != 0 {
		return nil
	}
	s.free(c)
	R, P = max(R, 64), max(P, 4096)
	var err error
	if s.dev, err = c.Alloc(s.bytes(R, P)); err != nil {
		return err
	}
	if s.host, err = c.AllocHost(s.bytes(R, P)); err != nil {
		return err
	}
	s.capR, s.capP = R, P
	return nil
}

// sampleRows queues the device sampling of the logits rows of requests
// with Sample (each has one logits row; the other rows are skipped) and the
// copy of the tokens and logprobs back; finishSample reads them after the
// step's Sync.
func (b *Backend) sampleRows(c *kernels.Ctx, reqs []*engine.ForwardRequest, fb *flatBatch) error {
	R, P := fb.R, 0
	for _, r := range reqs {
		if r.Sample != nil {
			P += len(r.Sample.PenaltyTokens)
		}
	}
	s := &b.samp
	if err := s.ensure(c, R, P); err != nil {
		return err
	}
	words := unsafe.Slice((*int32)(unsafe.Pointer(&s.host.Bytes()[0])), s.capR*(kernels.SampleParamWords+2)+2*s.capP)
	prm := words[:R*kernels.SampleParamWords]
	ptok := words[s.capR*(kernels.SampleParamWords+2):][:P]
	pdel := words[s.capR*(kernels.SampleParamWords+2)+s.capP:][:P]
	clear(prm)
	p := 0
	for i, r := range reqs {
		rs := r.Sample
		if rs == nil {
			continue
		}
		row := fb.reqRows[i]
		w := prm[row*kernels.SampleParamWords:][:kernels.SampleParamWords]
		w[0] = int32(math.Float32bits(rs.Temperature))
		w[1] = int32(rs.TopK)
		w[2] = int32(math.Float32bits(rs.TopP))
		w[3] = int32(math.Float32bits(rs.MinP))
		w[4] = int32(math.Float32bits(float32(rs.U)))
		w[5], w[6], w[7] = int32(p), int32(len(rs.PenaltyTokens)), 1
		for j, t := range rs.PenaltyTokens {
			ptok[p+j] = t
			pdel[p+j] = int32(math.Float32bits(rs.Penalty[j]))
		}
		p += len(rs.PenaltyTokens)
	}
	host := unsafe.Pointer(&s.host.Bytes()[0])
	penOff := s.capR * (kernels.SampleParamWords + 2) * 4
	dPrm := s.dev
	dTok := s.dev + kernels.DevicePtr(s.capR*kernels.SampleParamWords*4)
	dLp := dTok + kernels.DevicePtr(s.capR*4)
	dPtok := s.dev + kernels.DevicePtr(penOff)
	dPdel := dPtok + kernels.DevicePtr(s.capP*4)
	if err := c.HtoDRaw(dPrm, host, R*kernels.SampleParamWords*4); err != nil {
		return err
	}
	if P > 0 {
		if err := c.HtoDRaw(dPtok, unsafe.Add(host, penOff), P*4); err != nil {
			return err
		}
		if err := c.HtoDRaw(dPdel, unsafe.Add(host, penOff+s.capP*4), P*4); err != nil {
			return err
		}
	}
	if err := c.SampleRowsP(b.logits, dPrm, dPtok, dPdel, dTok, dLp, R, b.cfg.VocabSize); err != nil {
		return err
	}
	resOff := s.capR * kernels.SampleParamWords * 4
	return c.DtoHRaw(unsafe.Add(host, resOff), dTok, 2*s.capR*4) // tokens then logprobs
}

// finishSample writes the sampled tokens and logprobs into the requests'
// Sample (after the step's Sync).
func (b *Backend) finishSample(reqs []*engine.ForwardRequest, fb *flatBatch) {
	s := &b.samp
	res := unsafe.Slice((*int32)(unsafe.Pointer(&s.host.Bytes()[s.capR*kernels.SampleParamWords*4])), 2*s.capR)
	for i, r := range reqs {
		if r.Sample == nil {
			continue
		}
		row := fb.reqRows[i]
		r.Sample.Token = res[row]
		r.Sample.Logprob = math.Float32frombits(uint32(res[s.capR+row]))
	}
}

// hiddenRows queues the final-normed hidden state of every logits row (the
// LM head's input) into b.hid and its copy to the pinned b.hidHost, when
// some request asks for Hidden.
func (b *Backend) hiddenRows(c *kernels.Ctx, fb *flatBatch, lay metaLayout) error {
	H := b.cfg.HiddenSize
	if need := fb.R * H * 4; need > b.hidCap {
		c.Free(b.hid)
		c.FreeHost(b.hidHost)
		b.hid, b.hidHost, b.hidCap = 0, kernels.HostBuf{}, 0
		var err error
		if b.hid, err = c.Alloc(need); err != nil {
			return err
		}
		if b.hidHost, err = c.AllocHost(need); err != nil {
			return err
		}
		b.hidCap = need
	}
	if err := c.RMSNormF32(b.x, b.meta+kernels.DevicePtr(lay.rows*4), b.norm, b.eps, b.hid, fb.R, H); err != nil {
		return fmt.Errorf("hidden rows: %w", err)
	}
	return c.DtoHRaw(unsafe.Pointer(&b.hidHost.Bytes()[0]), b.hid, fb.R*H*4)
}

// finishHidden copies each request's hidden rows into its Hidden (after Sync).
func (b *Backend) finishHidden(reqs []*engine.ForwardRequest, fb *flatBatch) {
	H := b.cfg.HiddenSize
	all := unsafe.Slice((*float32)(unsafe.Pointer(&b.hidHost.Bytes()[0])), fb.R*H)
	for i, r := range reqs {
		if r.Hidden == nil {
			continue
		}
		r0, r1 := fb.reqRows[i], fb.R
		if i+1 < len(reqs) {
			r1 = fb.reqRows[i+1]
		}
		copy(r.Hidden, all[r0*H:r1*H])
	}
}
