package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/specgate/specgate/engine"
)

// connWatch notices a client that closes its connection while the gateway
// is still generating. fasthttp never cancels a handler's context, and a
// write to a closed socket only fails a token or two later, so the watch
// reads the idle connection (an HTTP/1.1 client sends nothing while it
// waits for the response): EOF or a reset means the client is gone.
type connWatch struct {
	conn     net.Conn
	stopping atomic.Bool
	done     chan struct{}
	once     sync.Once
	// Data is set when the client sent bytes during the response (HTTP
	// pipelining); they are consumed and lost, so the connection must close.
	data atomic.Bool
}

// watchConn starts watching conn; onClose runs at most once, in the
// watcher's goroutine, when the peer closes. conn may be nil (no watch).
func watchConn(conn net.Conn, onClose func()) *connWatch {
	w := &connWatch{conn: conn, done: make(chan struct{})}
	if conn == nil {
		close(w.done)
		return w
	}
	_ = conn.SetReadDeadline(time.Time{})
	go func() {
		defer close(w.done)
		var b [1]byte
		n, err := conn.Read(b[:])
		if w.stopping.Load() {
			return
		}
		if n > 0 {
			w.data.Store(true)
			return
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			onClose()
		}
	}()
	return w
}

// stop ends the watch and restores the connection for keep-alive reuse.
// Safe to call more than once.
func (w *connWatch) stop() {
	w.once.Do(func() {
		if w.conn == nil {
			return
		}
		w.stopping.Store(true)
		_ = w.conn.SetReadDeadline(time.Now())
		<-w.done
		_ = w.conn.SetReadDeadline(time.Time{})
	})
}

// sseWriter writes Server-Sent Events, flushing each. After the first write
// error it drops everything and calls onFail once.
type sseWriter struct {
	w      *bufio.Writer
	failed bool
	onFail func()
}

var (
	sseData = []byte("data: ")
	sseEnd  = []byte("\n\n")
	sseDone = []byte("data: [DONE]\n\n")
)

func (s *sseWriter) raw(b []byte) {
	if s.failed {
		return
	}
	if _, err := s.w.Write(b); err != nil {
		s.fail()
		return
	}
	if err := s.w.Flush(); err != nil {
		s.fail()
	}
}

func (s *sseWriter) fail() {
	s.failed = true
	if s.onFail != nil {
		s.onFail()
	}
}

func (s *sseWriter) event(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(append(append(buf, sseData...), b...), sseEnd...)
	s.raw(buf)
}

func (s *sseWriter) done() { s.raw(sseDone) }

var nullJSON = json.RawMessage("null")

// localStream turns engine events into OpenAI stream chunks.
type localStream struct {
	rs      *runState
	sw      *sseWriter
	acc     []*choiceAcc
	results []engine.Result
	started []bool
	offset  []int // completions: text offset for logprobs
	err     error
}

func newLocalStream(rs *runState, sw *sseWriter) *localStream {
	n := rs.j.choices()
	st := &localStream{rs: rs, sw: sw, acc: make([]*choiceAcc, n), results: make([]engine.Result, n), started: make([]bool, n), offset: make([]int, n)}
	for i := range st.acc {
		st.acc[i] = &choiceAcc{}
	}
	return st
}

func (st *localStream) usageField() json.RawMessage {
	if st.rs.j.includeUsage {
		return nullJSON
	}
	return nil
}

func (st *localStream) chat(choice ChatChunkChoice) {
	rs := st.rs
	st.sw.event(ChatCompletionChunk{ID: rs.id, Object: "chat.completion.chunk", Created: rs.created, Model: rs.j.model.Name,
		SystemFingerprint: systemFingerprint, Choices: []ChatChunkChoice{choice}, Usage: st.usageField()})
}

func (st *localStream) text(choice CompletionChoice) {
	rs := st.rs
	st.sw.event(Completion{ID: rs.id, Object: "text_completion", Created: rs.created, Model: rs.j.model.Name,
		SystemFingerprint: systemFingerprint, Choices: []CompletionChoice{choice}, Usage: st.usageField()})
}

func (st *localStream) start(i int) {
	if st.started[i] {
		return
	}
	st.started[i] = true
	j := st.rs.j
	if j.ep == endpointChat {
		empty := ""
		st.chat(ChatChunkChoice{Index: i, Delta: ChatDelta{Role: "assistant", Content: &empty}})
		return
	}
	if echo := j.echo[i/j.n]; echo != "" {
		st.text(CompletionChoice{Text: echo, Index: i})
		st.offset[i] = len(echo)
	}
}

func (st *localStream) handle(ev genEvent) {
	j := st.rs.j
	i := ev.idx
	if !ev.done {
		st.acc[i].add(ev.chunk)
		st.start(i)
		if ev.chunk.Text == "" && (!j.logprobs || len(ev.chunk.Logprobs) == 0) {
			return
		}
		if j.ep == endpointChat {
			txt := ev.chunk.Text
			ch := ChatChunkChoice{Index: i, Delta: ChatDelta{Content: &txt}}
			if j.logprobs {
				ch.Logprobs = chatLogprobs(ev.chunk.Logprobs, ev.chunk.Top)
			}
			st.chat(ch)
			return
		}
		ch := CompletionChoice{Text: ev.chunk.Text, Index: i}
		if j.logprobs {
			ch.Logprobs = completionLogprobs(ev.chunk.Logprobs, ev.chunk.Top, st.offset[i])
		}
		st.offset[i] += len(ev.chunk.Text)
		st.text(ch)
		return
	}
	st.results[i] = ev.res
	st.acc[i].res = ev.res
	st.acc[i].finished = true
	if ev.err != nil {
		if st.err == nil {
			st.err = ev.err
		}
		return
	}
	st.start(i)
	fr := finishString(ev.res.Finish)
	if j.ep == endpointChat {
		st.chat(ChatChunkChoice{Index: i, Delta: ChatDelta{}, FinishReason: &fr})
	} else {
		st.text(CompletionChoice{Text: "", Index: i, FinishReason: &fr})
	}
}

// end writes the usage chunk and [DONE] (or an error event) and reports the
// usage and outcome: ok, disconnected, cancelled or error.
func (st *localStream) end(cause error) (*Usage, string) {
	j := st.rs.j
	if st.sw.failed || errors.Is(cause, ErrClientGone) {
		return usageOf(j, st.results), "disconnected"
	}
	if st.err != nil {
		ae := engineError(st.err, paramOf(j))
		outcome := "error"
		if errors.Is(st.err, context.Canceled) {
			ae = errUnavailable("The server is shutting down; generation was cancelled.", 0)
			outcome = "cancelled"
		}
		st.sw.event(ae)
		st.sw.done()
		st.rs.logger().Warn("stream ended with error", "err", st.err)
		return usageOf(j, st.results), outcome
	}
	usage := usageOf(j, st.results)
	if j.includeUsage {
		ub, _ := json.Marshal(usage)
		if j.ep == endpointChat {
			st.sw.event(ChatCompletionChunk{ID: st.rs.id, Object: "chat.completion.chunk", Created: st.rs.created, Model: j.model.Name,
				SystemFingerprint: systemFingerprint, Choices: []ChatChunkChoice{}, Usage: ub})
		} else {
			st.sw.event(Completion{ID: st.rs.id, Object: "text_completion", Created: st.rs.created, Model: j.model.Name,
				SystemFingerprint: systemFingerprint, Choices: []CompletionChoice{}, Usage: ub})
		}
	}
	st.sw.done()
	if st.sw.failed {
		return usage, "disconnected"
	}
	return usage, "ok"
}

// replaySSE serves a stored response as a stream (a cache hit, or the
// answer of a shared generation): per choice a role chunk, one content
// chunk and a finish chunk, then the usage chunk when asked for.
func (s *Server) replaySSE(c *fiber.Ctx, rs *runState, stored []byte, hit bool) error {
	body, usage := rewriteCached(stored, rs.id, rs.created, hit)
	j := rs.j
	chunks, err := sseChunks(body, usage, rs.id, rs.created, j.includeUsage, j.ep == endpointChat)
	if err != nil {
		return err
	}
	outcome := "cache_hit"
	if !hit {
		outcome = "shared"
	}
	rs.finish(usage, outcome, 0)
	setSSEHeaders(c)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		sw := &sseWriter{w: w}
		for _, ch := range chunks {
			sw.event(ch)
		}
		sw.done()
	})
	return nil
}

// sseChunks turns a (rewritten) stored response into the chunks of its
// stream replay: per choice a role chunk, a content chunk and a finish
// chunk, then the usage chunk when asked for.
func sseChunks(body []byte, usage *Usage, id string, created int64, includeUsage, chat bool) ([]any, error) {
	var chunks []any
	null := json.RawMessage(nil)
	if includeUsage {
		null = nullJSON
	}
	if chat {
		var resp ChatCompletion
		if err := json.Unmarshal(body, &resp); err != nil {
			return nil, errInternal("cached response is corrupt")
		}
		mk := func(ch ChatChunkChoice) ChatCompletionChunk {
			return ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: resp.Model,
				SystemFingerprint: systemFingerprint, Choices: []ChatChunkChoice{ch}, Usage: null}
		}
		for _, ch := range resp.Choices {
			empty := ""
			content := ch.Message.Content
			fr := ch.FinishReason
			chunks = append(chunks, mk(ChatChunkChoice{Index: ch.Index, Delta: ChatDelta{Role: "assistant", Content: &empty}}),
				mk(ChatChunkChoice{Index: ch.Index, Delta: ChatDelta{Content: &content}, Logprobs: ch.Logprobs}),
				mk(ChatChunkChoice{Index: ch.Index, FinishReason: &fr}))
		}
		if includeUsage && usage != nil {
			ub, _ := json.Marshal(usage)
			chunks = append(chunks, ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: resp.Model,
				SystemFingerprint: systemFingerprint, Choices: []ChatChunkChoice{}, Usage: ub})
		}
		return chunks, nil
	}
	var resp Completion
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, errInternal("cached response is corrupt")
	}
	mk := func(ch CompletionChoice) Completion {
		return Completion{ID: id, Object: "text_completion", Created: created, Model: resp.Model,
			SystemFingerprint: systemFingerprint, Choices: []CompletionChoice{ch}, Usage: null}
	}
	for _, ch := range resp.Choices {
		fr := ch.FinishReason
		chunks = append(chunks, mk(CompletionChoice{Text: ch.Text, Index: ch.Index, Logprobs: ch.Logprobs}),
			mk(CompletionChoice{Index: ch.Index, FinishReason: fr}))
	}
	if includeUsage && usage != nil {
		ub, _ := json.Marshal(usage)
		chunks = append(chunks, Completion{ID: id, Object: "text_completion", Created: created, Model: resp.Model,
			SystemFingerprint: systemFingerprint, Choices: []CompletionChoice{}, Usage: ub})
	}
	return chunks, nil
}

// copyStream copies an upstream SSE body to the client, flushing after
// every read; it stops at the first write error (client gone).
func copyStream(w *bufio.Writer, r io.Reader, onFail func()) (int64, error) {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				onFail()
				return total, err
			}
			if err := w.Flush(); err != nil {
				onFail()
				return total, err
			}
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}
