package engine

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// specState is one speculative request's scheduler-side state.
type specState struct {
	props      []Proposer
	needHidden bool
	hidden     []float32 // final hidden row that predicted the pending token
	typical    *TypicalAcceptance
	// acc[k][d-1] ≈ P(proposer k's node at depth d is accepted | depth d-1
	// was), an EWMA over this request's verified steps.
	acc   [][]float64
	stats []SourceStats // per proposer, for ProposeRequest feedback
	// glob[k] is proposer k's engine-wide state (acceptance prior, probing).
	glob []*propState
	// skipHidden: the next step need not fetch the hidden row (no hidden
	// proposer was granted drafts in this step and none is due a probe), so
	// its token can be sampled without the logits row on the host.
	skipHidden bool
	// declined: in the request's last step the budget granted its
	// proposers nothing (false before its first decode step).
	declined bool
	// lastProbe[k] is the engine step of proposer k's last probe of the request.
	lastProbe []int64
	// granted: draft nodes the budget granted the request in this step
	granted int
	// hiddenK[k]: proposer k needs the hidden row (HiddenNeeder); conf[k]:
	// proposer k as a Confident, or nil (looked up once per request: the
	// budget asks per candidate and depth every step)
	hiddenK []bool
	conf    []Confident
	// from[i] has bit k set when proposer k proposed node i of this step's tree.
	from []uint64
	id   RequestID // the request's id, for Confident proposers
	// headsID, headsW: the device heads of a HeadsProposer (devheads.go) and
	// their NumHeads*TopK; headTop: their candidates for the pending token.
	headsID, headsW, headsK int // headsK: the proposer's index in props
	headTop                 []int32
	// record's scratch (reused every verified step)
	scrOn, scrTried, scrAcc []bool
	scrDepth                []int
	// outs: the speculative part of the outputs handed to the caller and
	// not yet counted (specstats.go), oldest first from outHead; staged:
	// the next one was recorded, not yet handed out.
	outs          [maxOut]specOut
	outHead, outN int
	staged        bool
}

// srcTally is one draft source's nodes proposed (p) and, of those the
// caller took, accepted (a) in a step.
type srcTally struct {
	src  string
	p, a int
}

const (
	priorAccept   = 0.6  // initial conditional acceptance at every depth
	accWeight     = 0.2  // EWMA weight of the newest observation (per request)
	globWeight    = 0.02 // ... over all requests of a proposer
	probeEvery    = 8    // plain steps before a probe ...
	maxProbeEvery = 128  // ... backing off exponentially up to this
	specMargin    = 1.02 // a draft node must raise expected tokens/s by this factor
	exploreEvery  = 32   // speculative steps in a row before one plain step
	// optimisticLift is added to estimated acceptance when deciding whether
	// a probe could pay at all.
	optimisticLift = 0.25
)

// propState is a proposer's engine-wide speculation state: its
// acceptance per depth over all requests (the prior of a new request's
// estimate) and its probe schedule. Probes are engine-wide so that the
// probed requests share their draft forwards, and so that a proposer that
// does not pay on this machine and load is probed rarely, however short the
// requests are.
type propState struct {
	acc        []float64 // EWMA over all requests' verified steps
	idle       int       // steps in a row in which the budget granted it nothing
	probeEvery int
	// dormant: its last probe did not pay (and nothing was granted since):
	// a new request does not fetch its hidden row (or run device heads)
	// until a probe or a grant asks for it.
	dormant bool
}

func (e *Engine) propStateOf(p Proposer) *propState {
	ps := e.props[p]
	if ps == nil {
		ps = &propState{probeEvery: probeEvery}
		e.props[p] = ps
	}
	return ps
}

func (e *Engine) newSpecState(props []Proposer, typ *TypicalAcceptance) *specState {
	sp := &specState{props: props, typical: typ,
		acc: make([][]float64, len(props)), stats: make([]SourceStats, len(props)), glob: make([]*propState, len(props)),
		lastProbe: make([]int64, len(props))}
	dormant := true
	sp.hiddenK, sp.conf = make([]bool, len(props)), make([]Confident, len(props))
	for k, p := range props {
		sp.acc[k] = []float64{}
		sp.glob[k] = e.propStateOf(p)
		sp.conf[k], _ = p.(Confident)
		if h, ok := p.(HiddenNeeder); ok && h.NeedsHidden() {
			sp.needHidden, sp.hiddenK[k] = true, true
			dormant = dormant && sp.glob[k].dormant
		}
	}
	sp.skipHidden = sp.needHidden && dormant && !e.opts.FixedDraft
	e.initDeviceHeads(sp)
	return sp
}

// dormantSteps is how many steps the request may decode without asking
// its proposers (multi-step greedy decoding): none until the budget has
// declined to draft for it, while any of them was granted drafts in its
// last step, or in fixed mode; else until the first of their probes is
// due. A request with a hidden-state proposer (Medusa heads) decodes so
// only while it fetches no hidden row (planHidden decided its proposer
// cannot draft soon), and stops two steps short of the probe: the first
// decides whether to fetch the row the probe needs, the second fetches it. Before, such
// a request never used multi-step decoding, so on the GPU (serve: chunks of
// 8 at ~0.09 ms a token against ~0.12 ms one token a step) a dormant Medusa
// request ran slower than plain decoding.
func (sp *specState) dormantSteps(fixed bool) int {
	if fixed || !sp.declined || (sp.needHidden && !sp.skipHidden) {
		return 0
	}
	k := maxProbeEvery
	for _, g := range sp.glob {
		k = min(k, g.probeEvery-g.idle)
	}
	if sp.needHidden {
		k -= 2
	}
	return k
}

// skipped accounts n steps decoded without asking the proposers (their
// probe clocks advance as if asked and not granted).
func (sp *specState) skipped(n int) {
	sp.hidden, sp.headTop = sp.hidden[:0], sp.headTop[:0] // rows of an earlier token
	for _, g := range sp.glob {
		g.idle += n
	}
}

// wantsHidden reports whether the next step should fetch the request's
// hidden row for its proposers.
func (sp *specState) wantsHidden() bool { return sp.needHidden && !sp.skipHidden }

// accAt is proposer k's estimated conditional acceptance at depth d (1-based).
func (sp *specState) accAt(k, d int) float64 {
	if v := sp.confidence(k, d); v >= 0 { // the proposer's own estimate (proposer_confidence.go)
		return v
	}
	if d-1 < len(sp.acc[k]) {
		return sp.acc[k][d-1]
	}
	if g := sp.glob[k]; d-1 < len(g.acc) {
		return g.acc[d-1]
	}
	return priorAccept
}

// ewma is an exponentially weighted mean (zero until the first value).
type ewma struct {
	v float64
	n int
}

func (a *ewma) add(x float64) {
	a.n++
	w := max(0.1, 1/float64(a.n))
	a.v += w * (x - a.v)
}

// calibrate times target forwards of a few sizes once per class of step
// (plain, tree; with headsID > 0 also both with those draft heads): a
// chain below a short context on a scratch sequence, so that the first
// speculative steps are priced by measurement rather than a guess. Best
// of 3. Greedy trees are timed with the rows' argmax on the device where
// the backend has it, as the engine's greedy trees run.
func (e *Engine) calibrate(headsID int) {
	type class struct {
		tree  bool
		heads int
	}
	var classes []class
	if !e.calibrated {
		e.calibrated = true
		classes = append(classes, class{false, 0}, class{true, 0})
	}
	if headsID > 0 && !e.calibratedHeads {
		e.calibratedHeads = true
		classes = append(classes, class{false, headsID}, class{true, headsID})
	}
	if len(classes) == 0 {
		return
	}
	m := e.m
	maxPos := m.Config.MaxPositions
	ctxLen := max(min(32, maxPos/4), 1)
	sizes := []int{1, 2, 4, 8, 16, 32, 64} // 64: the largest step the CUDA backend graphs
	V := m.Config.VocabSize
	ctx := make([]int32, ctxLen)
	for i := range ctx {
		ctx[i] = int32((3 + 7*i) % V)
	}
	s := m.NewSequence()
	defer s.Free()
	if _, err := s.Forward(ctx, nil, []int32{}); err != nil {
		return
	}
	ra, ok := m.backend.(RowArgmaxer)
	argmax := ok && ra.ArgmaxOnDevice()
	for _, cl := range classes {
		for _, n := range sizes {
			if ctxLen+n >= maxPos {
				break
			}
			if cl.tree && n == 1 {
				continue // a tree has the pending token and at least one node
			}
			cost := e.costOf(cl.tree, cl.heads > 0)
			if c, ok := e.fixedCost(n, cl.tree, cl.heads > 0); ok {
				cost.observeCalibrated(n, c)
				continue
			}
			toks := make([]int32, n)
			var par []int32
			if cl.tree {
				par = make([]int32, n)
			}
			for i := range toks {
				toks[i] = int32((11 + 5*i) % V)
				if par != nil {
					par[i] = int32(i) - 1
				}
			}
			best := math.Inf(1)
			for range 3 {
				it := []BatchItem{{Seq: s, Tokens: toks, Parents: par, Heads: cl.heads, ArgmaxOnly: argmax}}
				t0 := time.Now()
				if err := m.ForwardBatch(it); err != nil {
					return
				}
				best = min(best, time.Since(t0).Seconds())
				if cl.tree {
					if err := s.KeepTree(nil); err != nil {
						return
					}
				} else {
					s.Truncate(ctxLen)
				}
			}
			cost.observeCalibrated(n, best)
		}
	}
}

// mayPay reports whether drafts of c's proposer could pay in a step of
// baseT tokens and emit decoding requests if they were accepted more often
// than estimated (by optimisticLift): a probe is worth its cost only then.
// It uses the measured cost of the proposer's depth levels (unknown before
// its first call: then it may pay).
func (e *Engine) mayPay(c *specCand, baseT, emit int) bool {
	lc := 0.0
	if pc := e.propCost[c.r.spec.props[c.k]]; pc != nil {
		lc = pc.v
	}
	base := float64(emit) / e.cost.at(baseT)
	drafted := e.costOf(true, c.heads())
	gain, run := 0.0, 1.0
	for d := 1; d <= min(c.cap, 8); d++ {
		run *= min(1, c.accAt(d)+optimisticLift)
		gain += run
		if (float64(emit)+gain)/(drafted.at(baseT+d)+float64(d)*lc) > base*specMargin {
			return true
		}
	}
	return false
}

// specCand is one (request, proposer) pair competing for draft nodes.
type specCand struct {
	r      *request
	k      int     // proposer index in r.spec.props
	n      int     // nodes granted
	cap    int     // most nodes allowed
	run    float64 // P(all granted depths accepted) = Π acc
	probe  bool
	paid   bool // the budget granted nodes beyond the probe: speculation pays
	due    bool // a probe was due but could not pay at the measured costs
	propID int  // index into the step's distinct proposers
	blind  bool // needs the hidden row (heads' candidates) the last step did not fetch
	// depthCap is a blind candidate's cap had it its hidden row (planHidden)
	depthCap int
	// memo[d]: accAt(d) of this step, -1 until asked (the budget asks per
	// candidate, depth and look-ahead; a Confident proposer's estimate
	// takes a lock and a lookup, and it cannot move within the budget's
	// pass, which runs before any Propose call)
	memo []float64
}

// accAt is the candidate's proposer's estimated conditional acceptance at
// depth d in this step (specState.accAt, memoised).
func (c *specCand) accAt(d int) float64 {
	if d < len(c.memo) {
		if v := c.memo[d]; v >= 0 {
			return v
		}
		v := c.r.spec.accAt(c.k, d)
		c.memo[d] = max(v, 0)
		return v
	}
	return c.r.spec.accAt(c.k, d)
}

// probeShare is the part of a proposer's requests (at least probeMin)
// probed together when its probe is due: a draft model's probe first
// catches its KV up with each probed request's context (measured on the
// H100: 5.9 ms for the 20 requests of bench spec at concurrency 32, 9% of
// the run, to verify 2 nodes), and a few requests refresh the proposer's
// acceptance estimate as well as all of them.
const (
	probeShare = 4
	probeMin   = 2
)

// limitProbes keeps, per proposer, the probes of its least recently
// probed requests: at most max(probeMin, n/probeShare) of its n
// candidates, probeMin while the proposer is dormant (proposers by
// specCand.propID, nProps of them).
func limitProbes(cands []*specCand, nProps int) {
	var probes []*specCand
	for _, c := range cands {
		if c.probe {
			probes = append(probes, c)
		}
	}
	if len(probes) <= probeMin {
		return
	}
	n := make([]int, nProps)
	for _, c := range cands {
		n[c.propID]++
	}
	slices.SortStableFunc(probes, func(a, b *specCand) int {
		return cmp.Compare(a.r.spec.lastProbe[a.k], b.r.spec.lastProbe[b.k])
	})
	kept := make([]int, nProps)
	for _, c := range probes {
		limit := max(probeMin, n[c.propID]/probeShare)
		if g := c.r.spec.glob; c.k < len(g) && g[c.k].dormant {
			// its last probe did not pay: a re-check needs a few requests,
			// not a quarter of them (a Medusa probe runs the heads of every
			// probed request on the CPU: 1.8% of a bench spec run at
			// concurrency 32 that proposed nothing)
			limit = probeMin
		}
		if kept[c.propID] < limit {
			kept[c.propID]++
			continue
		}
		c.probe = false
	}
}

// blind reports whether proposer k needs the request's hidden row (or its
// device heads' candidates) and the last step did not fetch it.
func (sp *specState) blind(k int) bool {
	if !sp.hiddenK[k] {
		return false
	}
	if sp.headsID > 0 && k == sp.headsK {
		return len(sp.headTop) == 0
	}
	return len(sp.hidden) == 0
}

// planHidden decides, after the budget, which requests fetch their hidden
// row (or run their device heads) in the next step: only those whose
// hidden proposer may draft then, as the heads cost a step its share
// (priced in costHeads/costTreeHeads). That is a request granted nodes in
// this step (it speculates: the next step likely grants again), in fixed
// mode every one, one that could not draft in this step while its
// proposer paid for others (it joins them), and one whose proposer's
// probe is due in two steps (a row fetched by the next step's forward is
// what the step after reads), among those limitProbes would pick,
// when the probe may pay.
func (e *Engine) planHidden(cands []*specCand, paid []bool, baseT, emit int) {
	var due []*specCand
	for _, c := range cands {
		sp := c.r.spec
		if sp.needHidden {
			sp.skipHidden = true
		}
	}
	for _, c := range cands {
		sp := c.r.spec
		if !sp.hiddenK[c.k] {
			continue
		}
		g := sp.glob[c.k]
		switch {
		case c.n > 0 || e.opts.FixedDraft || (c.blind && paid[c.propID]):
			sp.skipHidden = false
		case g.idle+1 >= g.probeEvery:
			// the probe is due in two steps: the row fetched by the next
			// step's forward is what that step's Propose reads
			d := *c
			d.blind, d.probe, d.due = false, false, false
			if c.blind {
				d.cap = c.depthCap
			}
			if e.mayPay(&d, baseT, emit) {
				d.probe = true
				due = append(due, &d)
			}
		}
	}
	if len(due) > 0 {
		limitProbes(due, len(paid))
	}
	for _, c := range due {
		if c.probe {
			c.r.spec.skipHidden = false
		}
	}
}

// heads reports whether c's drafts come from heads that run on the
// backend: speculating with them runs the heads in every step.
func (c *specCand) heads() bool {
	sp := c.r.spec
	return sp.headsID > 0 && c.k == sp.headsK
}

// propose asks every speculative request's proposers for draft trees, one
// Propose call per proposer, with node budgets that pay for themselves:
// baseT tokens are already in the step's forward and emit requests decode
// in it. It returns each request's merged tree (nil: decode plainly).
func (e *Engine) propose(reqs []*request, baseT, emit, active int) map[*request]*Proposal {
	headsID := 0
	for _, r := range reqs {
		headsID = max(headsID, r.spec.headsID)
	}
	if !e.calibrated || (headsID > 0 && !e.calibratedHeads) {
		e.calibrate(headsID)
	}
	if !e.opts.FixedDraft && e.specStreak >= exploreEvery {
		// one step without drafts after a run of speculative steps keeps
		// the cost of the batch's plain step measured (the budget compares
		// against it).
		e.specStreak = 0
		return nil
	}
	kv := e.m.kv
	// KV room for draft nodes beyond the step's own tokens (the pool as
	// makeRoom counted it for this step; an overestimate costs the step its
	// trees, never a request: the forward is retried without them).
	room := (e.availBlocks - len(reqs)) * kv.BlockSize() // a block of slack per request (partial blocks)
	// distinct proposers, their per-level cost, their current depth. The
	// step's bookkeeping lives in reused scratch (e.scr): a step that
	// grants nothing, the common case where drafts do not pay, allocates
	// nothing (it cost 2-11 µs per step on the H100 host at concurrency
	// 1-32, 2-3% of a plain step).
	scr := &e.scr
	if e.stillDormant(reqs, baseT, emit) {
		return nil
	}
	props := scr.props[:0]
	n := 0
	for _, r := range reqs {
		n += len(r.spec.props)
	}
	if cap(scr.cands) < n {
		scr.cands = make([]specCand, n)
	}
	vals := scr.cands[:0]
	cands := scr.ptrs[:0]
	memoW := e.opts.MaxDraft + 1
	memo := growTo(&scr.memo, n*memoW)
	for _, r := range reqs {
		sp := r.spec
		sp.id = r.id
		sp.granted = 0
		maxDepth := min(r.maxNew-len(r.generated)-1, e.m.Config.MaxPositions-1-r.seq.Len(), e.opts.MaxDraft)
		for k, p := range sp.props {
			id := slices.Index(props, p)
			if id < 0 {
				id = len(props)
				props = append(props, p)
			}
			if maxDepth > 0 {
				g := sp.glob[k]
				m := memo[len(vals)*memoW : (len(vals)+1)*memoW]
				for i := range m {
					m[i] = -1
				}
				vals = append(vals, specCand{r: r, k: k, cap: maxDepth, run: 1, propID: id, memo: m})
				c := &vals[len(vals)-1]
				if sp.blind(k) {
					// its hidden row (or device heads' candidates) was not
					// fetched in the last step: it cannot draft in this one;
					// a due probe did not pay (planHidden found it could not)
					c.cap, c.blind, c.due = 0, true, g.idle >= g.probeEvery
					c.depthCap = maxDepth
				} else if g.idle >= g.probeEvery {
					c.probe = e.mayPay(c, baseT, emit)
					c.due = !c.probe // due, but could not pay: counts as a probe that did not pay
				}
				cands = append(cands, c)
			}
		}
	}
	scr.props, scr.ptrs = props, cands
	limitProbes(cands, len(props))
	levelCost := growTo(&scr.levelCost, len(props))
	depth := growTo(&scr.depth, len(props)) // deepest grant per proposer
	for i, p := range props {
		if c := e.propCost[p]; c != nil {
			levelCost[i] = c.v
		}
	}
	T, E := baseT, float64(emit)
	propTime := 0.0
	used := 0
	heads := false // a granted candidate's heads run on the backend
	// probes first: a small draft whatever the estimate (fixed: the full one).
	for _, c := range cands {
		if !c.probe && !e.opts.FixedDraft {
			continue
		}
		want := min(2, c.cap)
		if e.opts.FixedDraft {
			want = c.cap
		}
		for c.n < want && used < e.opts.SpecBudget && used < room && c.r.spec.granted < e.opts.MaxDraft {
			c.run *= c.accAt(c.n + 1)
			c.n++
			used++
			c.r.spec.granted++
			T++
			E += c.run
			heads = heads || c.heads()
			if c.n > depth[c.propID] {
				propTime += levelCost[c.propID] * float64(c.n-depth[c.propID])
				depth[c.propID] = c.n
			}
		}
	}
	for !e.opts.FixedDraft && used < e.opts.SpecBudget && used < room {
		var best *specCand
		var bestV float64
		for _, c := range cands {
			if c.n >= c.cap || c.r.spec.granted >= e.opts.MaxDraft {
				continue
			}
			v := c.run * c.accAt(c.n+1)
			if best == nil || v > bestV {
				best, bestV = c, v
			}
		}
		if best == nil {
			break
		}
		// the step as it stands (plain until a node is granted) against the
		// step with best's next nodes: a tree step, with heads when its
		// heads run on the backend
		now := E / (e.costOf(used > 0, heads).at(T) + propTime)
		drafted := e.costOf(true, heads || best.heads())
		take := e.lookAhead(best, drafted, now, E, T, propTime, used, room, best.r.spec.granted, depth[best.propID], levelCost[best.propID])
		if take == 0 {
			break
		}
		heads = heads || best.heads()
		best.paid = true
		for range take {
			extra := 0.0
			if best.n+1 > depth[best.propID] {
				extra = levelCost[best.propID]
			}
			v := best.run * best.accAt(best.n+1)
			best.run = v
			best.n++
			used++
			best.r.spec.granted++
			T++
			E += v
			propTime += extra
			depth[best.propID] = max(depth[best.propID], best.n)
		}
	}
	// probing, per proposer over the engine: while its drafts pay, they are
	// granted every step; while they do not, its requests are probed after
	// probeEvery steps (a share of them: limitProbes), and each probe that
	// does not pay doubles the interval (up to maxProbeEvery), so estimates
	// stay fresh at a small cost.
	paid, probed := growTo(&scr.paid, len(props)), growTo(&scr.probed, len(props))
	for _, c := range cands {
		paid[c.propID] = paid[c.propID] || c.paid || (e.opts.FixedDraft && c.n > 0)
		probed[c.propID] = probed[c.propID] || (c.probe && c.n > 0) || c.due
		sp := c.r.spec
		if c.probe && c.n > 0 {
			sp.lastProbe[c.k] = e.steps.Load()
		}
		sp.declined = sp.granted == 0
	}
	for id, p := range props {
		g := e.propStateOf(p)
		switch {
		case paid[id]:
			g.idle, g.probeEvery, g.dormant = 0, probeEvery, false
		case probed[id]:
			g.idle, g.probeEvery, g.dormant = 0, min(g.probeEvery*2, maxProbeEvery), true
		default:
			g.idle++
		}
	}
	e.planHidden(cands, paid, baseT, emit)
	if used == 0 {
		e.noteTrees(0)
		quiet := !e.opts.FixedDraft
		for _, c := range cands {
			quiet = quiet && !c.probe && !c.due
		}
		if quiet {
			scr.dormant = append(scr.dormant[:0], reqs...)
			scr.dormantT, scr.dormantE = baseT, emit
		}
		return nil
	}
	scr.dormant = scr.dormant[:0]
	// one Propose call per proposer
	type call struct {
		reqs  []ProposeRequest
		cands []*specCand
	}
	calls := make([]call, len(props))
	for _, c := range cands {
		if c.n == 0 {
			continue
		}
		sp := c.r.spec
		pr := ProposeRequest{ID: c.r.id, Tenant: c.r.req.Tenant, Prompt: c.r.req.Prompt, Generated: c.r.generated,
			Params: c.r.sampler, Budget: c.n, MaxDepth: c.cap, Known: c.r.req.KnownDrafts, Rand: c.r.rng,
			Active: active, Proposed: sp.stats[c.k].Proposed, Accepted: sp.stats[c.k].Accepted}
		if sp.hiddenK[c.k] && len(sp.hidden) > 0 {
			pr.Hidden = sp.hidden
		}
		if len(sp.headTop) > 0 {
			pr.HeadTop = sp.headTop
		}
		calls[c.propID].reqs = append(calls[c.propID].reqs, pr)
		calls[c.propID].cands = append(calls[c.propID].cands, c)
	}
	got := map[*request][]contrib{}
	for i, p := range props {
		cl := calls[i]
		if len(cl.reqs) == 0 {
			continue
		}
		t0 := time.Now()
		out, err := p.Propose(cl.cands[0].r.ctx, cl.reqs)
		secs := time.Since(t0).Seconds()
		if err == nil && len(out) != len(cl.reqs) {
			err = fmt.Errorf("%d proposals for %d requests", len(out), len(cl.reqs))
		}
		maxD := 0
		for j, c := range cl.cands {
			if err != nil {
				// a failing proposer costs its requests the draft, not the answer.
				e.proposeErrors.Add(1)
				continue
			}
			pr := out[j]
			if verr := e.checkProposal(&pr, c.n, c.cap); verr != nil {
				e.proposeErrors.Add(1)
				continue
			}
			maxD = max(maxD, proposalDepth(&pr))
			ex, run := 0.0, 1.0
			for d := 1; d <= c.n; d++ {
				run *= c.accAt(d)
				ex += run
			}
			got[c.r] = append(got[c.r], contrib{k: c.k, p: pr, e: ex})
		}
		if e.propCost[p] == nil {
			e.propCost[p] = &costWindow{}
		}
		perLevel := secs / float64(max(maxD, 1))
		if e.opts.ProposeCost != nil {
			perLevel = e.opts.ProposeCost().Seconds()
		}
		e.propCost[p].add(perLevel)
	}
	trees := map[*request]*Proposal{}
	for _, r := range reqs {
		cs := got[r]
		var t *Proposal
		sp := r.spec
		if len(cs) > 0 {
			greedy := r.sampler.Temperature <= 0
			if greedy && len(cs) > 1 {
				// the likeliest proposer's nodes first: when its chain is
				// accepted, the kept path is the tree's first nodes and the
				// KV needs no compaction (on the GPU a device round trip of
				// its own). Greedy only: sampled trees keep their order.
				slices.SortStableFunc(cs, func(a, b contrib) int { return cmp.Compare(b.e, a.e) })
			}
			t, sp.from = mergeProposals(cs, greedy, &e.scr.merge)
		}
		if t == nil || t.Len() == 0 {
			// granted but nothing proposed (no match, a lost or paused
			// cursor): a declined step for dormantSteps, so a lone greedy
			// request decodes its next tokens in a multi-step chunk, not
			// one token a step while its proposers have nothing.
			sp.declined = true
			continue
		}
		trees[r] = t
	}
	e.noteTrees(len(trees))
	return trees
}

// noteTrees counts speculative steps in a row (exploreEvery).
func (e *Engine) noteTrees(n int) {
	if n > 0 {
		e.specStreak++
	} else {
		e.specStreak = 0
	}
}

// mergeKey is a merged tree node: its parent there and its token.
type mergeKey struct{ parent, tok int32 }

// mergeScratch is mergeProposals' reused index and remap table.
type mergeScratch struct {
	index map[mergeKey]int32
	remap []int32
}

// proposeScratch is propose's reused bookkeeping (scheduler-owned).
type proposeScratch struct {
	merge        mergeScratch
	props        []Proposer
	cands        []specCand
	ptrs         []*specCand
	levelCost    []float64
	memo         []float64 // specCand.memo storage
	depth        []int
	paid, probed []bool
	// dormant: the requests of the last step, when its budget granted
	// nothing, probed nothing and found no probe due (stillDormant);
	// dormantT, dormantE its baseT and emit.
	dormant            []*request
	dormantT, dormantE int
}

// stillDormant is the budget's shortcut for a step that is the last one
// again: the same speculative requests in the same batch size, nothing
// granted, probed or due then, so no acceptance estimate has moved since
// (none of their proposers is Confident: those estimates move per token),
// and no proposer's probe is due within two steps (planHidden would then
// fetch rows). The full budget would grant nothing again; this
// advances the proposers' probe clocks as it would and returns true. Only
// the step costs can have drifted since, and the full budget runs again at
// the latest two steps before the next probe.
func (e *Engine) stillDormant(reqs []*request, baseT, emit int) bool {
	scr := &e.scr
	if len(scr.dormant) == 0 || len(reqs) != len(scr.dormant) || baseT != scr.dormantT || emit != scr.dormantE {
		return false
	}
	for i, r := range reqs {
		if scr.dormant[i] != r || !r.spec.declined {
			return false
		}
		for _, c := range r.spec.conf {
			if c != nil {
				return false // its own estimate moves with every token (a draft that realigns)
			}
		}
	}
	for _, p := range scr.props {
		if g := e.propStateOf(p); g.idle+2 >= g.probeEvery {
			return false
		}
	}
	for _, p := range scr.props {
		e.propStateOf(p).idle++
	}
	for _, r := range reqs {
		r.spec.id, r.spec.granted = r.id, 0
	}
	e.noteTrees(0)
	return true
}

// growTo returns (*buf)[:n] zeroed, growing *buf when needed.
func growTo[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	s := (*buf)[:n]
	clear(s)
	return s
}

// contrib is one proposer's proposal for a request.
type contrib struct {
	k int
	p Proposal
	e float64 // the budget's expected accepted nodes of the grant
}

// proposalDepth is the depth of the deepest node.
func proposalDepth(p *Proposal) int {
	d := make([]int, len(p.Tokens))
	m := 0
	for i, par := range p.Parents {
		d[i] = 1
		if par >= 0 {
			d[i] = d[par] + 1
		}
		m = max(m, d[i])
	}
	return m
}

// checkProposal validates a proposal and trims it to budget nodes (a
// prefix of a tree in index order is a tree) and maxDepth.
func (e *Engine) checkProposal(p *Proposal, budget, maxDepth int) error {
	V := e.m.Config.VocabSize
	n := len(p.Tokens)
	if len(p.Parents) != n {
		return fmt.Errorf("bad proposal: %d tokens, %d parents", n, len(p.Parents))
	}
	if p.Q != nil && len(p.Q) != n {
		return fmt.Errorf("bad proposal: %d tokens, %d draft distributions", n, len(p.Q))
	}
	if p.Sources != nil && len(p.Sources) != n {
		return fmt.Errorf("bad proposal: %d tokens, %d sources", n, len(p.Sources))
	}
	depth := make([]int, n)
	keep := n
	for i := range n {
		t, par := p.Tokens[i], p.Parents[i]
		if t < 0 || int(t) >= V {
			return fmt.Errorf("bad proposal: node %d: token %d not in [0, %d)", i, t, V)
		}
		if par < -1 || int(par) >= i {
			return fmt.Errorf("bad proposal: node %d: parent %d not in [-1, %d)", i, par, i)
		}
		if p.Q != nil && p.Q[i] != nil && len(p.Q[i]) != V {
			return fmt.Errorf("bad proposal: node %d: draft distribution of %d, vocabulary %d", i, len(p.Q[i]), V)
		}
		depth[i] = 1
		if par >= 0 {
			depth[i] = depth[par] + 1
		}
		if depth[i] > maxDepth && keep == n {
			keep = i // nodes are trimmed from here: drop deeper nodes below
		}
	}
	if keep < n || n > budget {
		// keep nodes in index order within the budget and depth limit.
		var toks, pars []int32
		var q [][]float32
		var src []string
		idx := make([]int32, n)
		for i := range n {
			idx[i] = -2
			par := p.Parents[i]
			if depth[i] > maxDepth || len(toks) >= budget || (par >= 0 && idx[par] < 0) {
				continue
			}
			np := int32(-1)
			if par >= 0 {
				np = idx[par]
			}
			idx[i] = int32(len(toks))
			toks, pars = append(toks, p.Tokens[i]), append(pars, np)
			if p.Q != nil {
				q = append(q, p.Q[i])
			}
			if p.Sources != nil {
				src = append(src, p.Sources[i])
			}
		}
		p.Tokens, p.Parents, p.Q, p.Sources = toks, pars, q, src
	}
	return nil
}

// mergeProposals unites several proposers' trees into one. Greedy
// requests merge nodes with equal token paths; sampled requests merge only
// deterministic nodes (nodes drawn from a distribution keep their own
// group, which lossless verification needs). from[i] has bit k set when
// proposer k proposed node i.
func mergeProposals(cs []contrib, greedy bool, scr *mergeScratch) (out *Proposal, from []uint64) {
	if len(cs) == 1 && cs[0].p.Sources == nil {
		p := cs[0].p
		out = &Proposal{Tokens: p.Tokens, Parents: p.Parents, Q: p.Q, Source: p.Source}
		if out.Source == "" {
			out.Source = fmt.Sprintf("%d", cs[0].k)
		}
		if greedy {
			out.Q = nil
		}
		from = make([]uint64, len(p.Tokens))
		for i := range from {
			from[i] = 1 << uint(cs[0].k%64)
		}
		return out, from
	}
	out = &Proposal{}
	type key = mergeKey
	if scr.index == nil {
		scr.index = map[mergeKey]int32{}
	}
	index := scr.index
	clear(index)
	total := 0
	for _, c := range cs {
		total += len(c.p.Tokens)
	}
	out.Tokens, out.Parents = make([]int32, 0, total), make([]int32, 0, total)
	out.Sources, out.Q = make([]string, 0, total), make([][]float32, 0, total)
	from = make([]uint64, 0, total)
	anyQ := false
	for _, c := range cs {
		p := c.p
		remap := growTo(&scr.remap, len(p.Tokens))
		for i, tok := range p.Tokens {
			par := int32(-1)
			if p.Parents[i] >= 0 {
				par = remap[p.Parents[i]]
			}
			det := greedy || p.Q == nil || p.Q[i] == nil
			src := p.Source
			if p.Sources != nil {
				src = p.Sources[i]
			}
			if src == "" {
				src = fmt.Sprintf("%d", c.k)
			}
			if det {
				if j, ok := index[key{par, tok}]; ok {
					remap[i] = j
					from[j] |= 1 << uint(c.k%64)
					continue
				}
			}
			j := int32(len(out.Tokens))
			remap[i] = j
			from = append(from, 1<<uint(c.k%64))
			out.Tokens = append(out.Tokens, tok)
			out.Parents = append(out.Parents, par)
			out.Sources = append(out.Sources, src)
			var q []float32
			if !det {
				q, anyQ = p.Q[i], true
			}
			out.Q = append(out.Q, q)
			if det {
				index[key{par, tok}] = j
			}
		}
	}
	if !anyQ {
		out.Q = nil
	}
	return out, from
}

// record notes a verified step: the request's statistics (staged for the
// output this step hands the caller: specstats.go counts them once the
// caller takes it) and its proposers' acceptance estimates (at once: they
// are the verifier's, whatever the caller keeps).
func (sp *specState) record(r *request, t *Proposal, vd verdict, e *Engine) {
	n := t.Len()
	onPath := growTo(&sp.scrOn, n)
	for _, i := range vd.path {
		onPath[i] = true
	}
	o := sp.stage(r, e)
	o.tree, o.approx, o.proposed = true, vd.approx, n
	o.start = len(r.generated) - len(vd.path) - 1 // verify appended the path and the bonus
	o.path = o.path[:0]
	if t.Sources == nil {
		o.srcs = append(o.srcs[:0], srcTally{src: t.Source, p: n})
		for range vd.path {
			o.path = append(o.path, t.Source)
		}
	} else {
		// tallied per distinct source (a handful), then one map update per
		// source when counted instead of one per node
		tally := o.srcs[:0]
	nodes:
		for _, src := range t.Sources {
			for j := range tally {
				if tally[j].src == src {
					tally[j].p++
					continue nodes
				}
			}
			tally = append(tally, srcTally{src: src, p: 1})
		}
		o.srcs = tally
		for _, i := range vd.path {
			o.path = append(o.path, t.Sources[i])
		}
	}
	// per-proposer estimates: a node's depth is tried when its parent was
	// accepted (or is the root); accepted when it is on the path.
	depth := growTo(&sp.scrDepth, n)
	for i, par := range t.Parents {
		depth[i] = 1
		if par >= 0 {
			depth[i] = depth[par] + 1
		}
	}
	for k := range sp.props {
		// tried[d]: a node of depth d was tried (its parent is the root or
		// accepted); acc[d]: one was accepted
		tried, acc := growTo(&sp.scrTried, n+2), growTo(&sp.scrAcc, n+2)
		for i := range t.Tokens {
			if i < len(sp.from) && sp.from[i]&(1<<uint(k%64)) == 0 {
				continue
			}
			par := t.Parents[i]
			if par < 0 || onPath[int(par)] {
				tried[depth[i]] = true
				sp.stats[k].Proposed++
				if onPath[i] {
					acc[depth[i]] = true
					sp.stats[k].Accepted++
				}
			}
		}
		for d := 1; tried[d]; d++ {
			for len(sp.acc[k]) < d {
				sp.acc[k] = append(sp.acc[k], priorAccept)
			}
			x := 0.0
			if acc[d] {
				x = 1
			}
			sp.acc[k][d-1] += accWeight * (x - sp.acc[k][d-1])
			g := sp.glob[k]
			for len(g.acc) < d {
				g.acc = append(g.acc, priorAccept)
			}
			g.acc[d-1] += globWeight * (x - g.acc[d-1])
		}
	}
}
