package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"sort"

	"github.com/specgate/specgate/cache"
)

// The response cache in front of the providers (the local engine and
// upstreams), JSON answers and streams alike, with one single-flight. A
// request is looked up first (the lookup decides X-Cache and serves hits,
// pre-rendered: cacheview.go); a cacheable miss then joins its entry's
// flight (joinFlight; the gateway's flights, keyed by namespace and entry
// id), before its provider starts, so a follower never starts a generation
// or an upstream call. The leader generates (runJSON, runLocal's stream,
// proxyChat, proxyStream), answers its own client, and hands the complete
// answer to the followers and to the cache (storeAnswer); followers replay
// it as JSON or as a stream. A local stream's answer is rendered from its
// chunks; an upstream's stream is teed: its chunks are assembled into the
// chat completion they add up to (chatAssembler). Streams and JSON answers
// of one request share flights and cache entries: a stored or shared JSON
// answer replays as a stream (upstream answers only when a stream can
// reproduce them: plainChat), and a stream's answer serves JSON.
//
// The flight is the gateway's rather than cache.Do's because a stream's
// provider must start before its response headers (its first event or
// status decides the HTTP status) and finish in the body writer, after
// the handler returned; cache.Do takes the generation as one call. The
// lookup's key and vector travel to the store in a cache.Pending.

// joinFlight puts a request whose lookup (l) missed on the flight of its
// cache entry: leader = true means it generates (fl is then its flight, nil
// for requests that are not shared: bypassed lookups, Cache-Control
// no-cache or no-store), else it waits for fl's leader.
func (s *Server) joinFlight(l cache.Lookup, creq *cache.Request) (fl *streamFlight, leader bool) {
	if l.ID == "" || creq.NoCache || creq.NoStore {
		return nil, true
	}
	return s.flights.join(l.Namespace + "\x00" + l.ID)
}

// answerStore stores the answer of a missed lookup (the zero value stores
// nothing).
type answerStore struct {
	// key is the entry's namespace NUL id: while the write is queued, an
	// identical request's lookup is answered from it ("": not registered).
	key string
	put func(ctx context.Context, body []byte, cost float64) error // nil: nothing to store
}

// pendingCache is a cache whose lookup keeps what storing a miss's answer
// needs (the prepared key and the query vector): *cache.Cache.
type pendingCache interface {
	GetPending(ctx context.Context, req *cache.Request) (cache.Lookup, *cache.Pending, error)
}

// cacheLookup looks creq up and returns how to store the answer of a miss:
// through the lookup's Pending when the cache has one (the key is not
// embedded again), else with Put. A miss whose entry has an answer waiting
// in the store queue (storeq.go) is served from that answer as an exact
// hit; a miss that raced with that answer's write is looked up again.
func (s *Server) cacheLookup(ctx context.Context, creq *cache.Request) (cache.Lookup, answerStore, error) {
	mark := s.stores.mark()
	l, st, err := s.lookupOnce(ctx, creq)
	if l.Hit || l.ID == "" || creq.NoCache {
		return l, st, err
	}
	body, retry := s.stores.answer(l.Namespace+"\x00"+l.ID, mark)
	if body != nil {
		s.met.store.pendingHits.Inc()
		return pendingHit(l, body), answerStore{}, err
	}
	if retry {
		return s.lookupOnce(ctx, creq)
	}
	return l, st, err
}

func (s *Server) lookupOnce(ctx context.Context, creq *cache.Request) (cache.Lookup, answerStore, error) {
	var l cache.Lookup
	var st answerStore
	var err error
	if pc, ok := s.cache.(pendingCache); ok {
		var p *cache.Pending
		l, p, err = pc.GetPending(ctx, creq)
		if p != nil {
			st.put = p.Put
		}
	} else {
		l, err = s.cache.Get(ctx, creq)
		if !l.Hit {
			st.put = func(ctx context.Context, body []byte, cost float64) error { return s.cache.Put(ctx, creq, body, cost) }
		}
	}
	if creq.NoStore {
		st.put = nil // the cache would skip it
	}
	if st.put != nil && l.ID != "" {
		st.key = l.Namespace + "\x00" + l.ID
	}
	return l, st, err
}

// storeAnswer hands a generated answer to the flight's followers (fl may be
// nil) and queues its cache write (storeq.go): the write runs after the
// response, and identical requests are answered from it until it
// committed. body must not be modified afterwards.
func (s *Server) storeAnswer(fl *streamFlight, st answerStore, body []byte, cost float64) {
	fl.finish(body, true)
	if st.put != nil {
		s.stores.enqueue(&storeJob{key: st.key, put: st.put, body: body, cost: cost})
	}
}

// streamTee is an upstream stream's way into the cache: the request to store
// it under and the flight it leads (nil: none). Its methods are safe on a
// nil tee.
type streamTee struct {
	save   answerStore
	flight *streamFlight
}

// fail ends the flight without an answer (followers forward themselves).
func (t *streamTee) fail() {
	if t != nil {
		t.flight.finish(nil, false)
	}
}

// store hands the assembled answer to the flight and the cache, or fails
// the flight when the stream was not a cacheable plain answer.
func (t *streamTee) store(s *Server, a *chatAssembler) {
	if t == nil {
		return
	}
	b, cost, ok := a.body()
	if !ok {
		t.fail()
		return
	}
	s.storeAnswer(t.flight, t.save, b, cost)
}

// chatAssembler collects the chunks of an upstream's chat stream into the
// chat completion they add up to, for the cache. Only plain text answers
// are assembled: a chunk with tool calls, function calls, audio, a refusal,
// logprobs or anything else the gateway's replay would not reproduce makes
// the stream uncacheable.
type chatAssembler struct {
	id, model string
	created   int64
	choices   map[int]*assembledChoice
	usage     *Usage
	size      int // content bytes so far, bounded by maxUpstreamBody
	bad       bool
}

type assembledChoice struct {
	content []byte
	finish  string
}

// upstreamChunk is the part of a chat.completion.chunk the assembler reads;
// deltas stay raw so that unknown keys are seen.
type upstreamChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int                        `json:"index"`
		Delta        map[string]json.RawMessage `json:"delta"`
		Logprobs     json.RawMessage            `json:"logprobs"`
		FinishReason *string                    `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

// add reads one data payload.
func (a *chatAssembler) add(data []byte) {
	if a.bad {
		return
	}
	var ch upstreamChunk
	if json.Unmarshal(data, &ch) != nil || ch.Object != "chat.completion.chunk" {
		a.bad = true
		return
	}
	if a.id == "" {
		a.id, a.model, a.created = ch.ID, ch.Model, ch.Created
	}
	if ch.Usage != nil {
		a.usage = ch.Usage
	}
	if a.choices == nil {
		a.choices = map[int]*assembledChoice{}
	}
	for _, c := range ch.Choices {
		if present(c.Logprobs) || c.Index < 0 || c.Index > 127 {
			a.bad = true
			return
		}
		ac := a.choices[c.Index]
		if ac == nil {
			ac = &assembledChoice{}
			a.choices[c.Index] = ac
		}
		for k, v := range c.Delta {
			switch k {
			case "role":
				var role string
				if json.Unmarshal(v, &role) != nil || role != "assistant" {
					a.bad = true
					return
				}
			case "content":
				if !present(v) {
					continue
				}
				var text string
				if json.Unmarshal(v, &text) != nil {
					a.bad = true
					return
				}
				if a.size += len(text); a.size > maxUpstreamBody {
					a.bad = true // too large to keep: relayed, not stored
					return
				}
				ac.content = append(ac.content, text...)
			case "refusal":
				if present(v) {
					a.bad = true
					return
				}
			default:
				a.bad = true
				return
			}
		}
		if c.FinishReason != nil {
			ac.finish = *c.FinishReason
		}
	}
}

// body returns the assembled chat completion and its cost (the usage's
// completion tokens); ok is false when the stream is not cacheable,
// incomplete (a choice without finish_reason) or came without usage (the
// client did not ask for stream_options.include_usage): a JSON request
// served from the entry, or a follower of the flight, must get the answer's
// usage, not "usage": null, and the gateway has no tokenizer for an
// upstream's model to count it.
func (a *chatAssembler) body() ([]byte, float64, bool) {
	if a.bad || len(a.choices) == 0 || a.usage == nil {
		return nil, 0, false
	}
	idx := make([]int, 0, len(a.choices))
	for i := range a.choices {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	resp := ChatCompletion{ID: a.id, Object: "chat.completion", Created: a.created, Model: a.model,
		SystemFingerprint: systemFingerprint, Usage: a.usage}
	for k, i := range idx {
		c := a.choices[i]
		if i != k || c.finish == "" {
			return nil, 0, false
		}
		resp.Choices = append(resp.Choices, ChatChoice{Index: i, Message: AssistantMsg{Role: "assistant", Content: string(c.content)},
			FinishReason: c.finish})
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return nil, 0, false
	}
	return b, float64(a.usage.CompletionTokens), true
}

// plainChat reports whether a stored answer is a chat completion whose
// choices carry nothing but assistant text: those can be replayed as a
// stream (sseChunks) without losing anything but the fingerprint.
func plainChat(body []byte) bool {
	var r struct {
		Object  string `json:"object"`
		Choices []struct {
			Message  map[string]json.RawMessage `json:"message"`
			Logprobs json.RawMessage            `json:"logprobs"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &r) != nil || r.Object != "chat.completion" {
		return false
	}
	for _, c := range r.Choices {
		if present(c.Logprobs) {
			return false
		}
		for k, v := range c.Message {
			switch k {
			case "role", "content":
			case "refusal", "annotations", "tool_calls", "function_call", "audio":
				if present(v) && string(v) != "[]" {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// writeReplay writes a stored chat or text completion as an SSE stream
// (the chunks sseChunks makes), for a body writer.
func writeReplay(w *bufio.Writer, body []byte, usage *Usage, id string, created int64, includeUsage, chat bool) {
	sw := &sseWriter{w: w}
	chunks, err := sseChunks(body, usage, id, created, includeUsage, chat)
	if err != nil {
		sw.event(err)
		sw.done()
		return
	}
	for _, ch := range chunks {
		sw.event(ch)
	}
	sw.done()
}
