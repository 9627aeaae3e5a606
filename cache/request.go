package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Message is one chat message of a request.
type Message struct {
	Role    string // "system", "user", "assistant", "tool"
	Content string
}

// Request is what the cache needs to know about one chat completion request.
// The gateway fills it from the OpenAI request body and headers; the cache
// never modifies it.
type Request struct {
	Tenant string // authenticated tenant; part of every key and vector filter
	Model  string // requested model name
	System string // system prompt (all system messages joined); hashed into the namespace
	// Messages are the non-system messages in order. The last user message is
	// the default key text.
	Messages []Message
	// Params are the output-changing sampling parameters other than
	// temperature (e.g. "top_p", "max_tokens", "seed", "stop", "n",
	// "response_format", "tools"), values already canonical (e.g. compact JSON).
	// They are hashed, in sorted key order, into the namespace.
	Params      map[string]string
	Temperature float64
	Stream      bool // replay mode only; not part of the namespace
	NoCache     bool // Cache-Control: no-cache — do not read from the cache
	NoStore     bool // Cache-Control: no-store — do not write to the cache
}

// Tier names, as reported in Lookup.Tier and metric labels.
const (
	TierExact    = "exact"
	TierSemantic = "semantic"
)

// Header names and values set by the gateway from a Lookup.
const (
	HeaderCache           = "X-Cache"
	HeaderCacheSimilarity = "X-Cache-Similarity"
	HitExact              = "HIT-EXACT"
	HitSemantic           = "HIT-SEMANTIC"
	Miss                  = "MISS"
)

// Lookup is the outcome of a cache read.
type Lookup struct {
	Hit        bool
	Tier       string  // TierExact or TierSemantic when Hit
	Similarity float32 // cosine similarity of the served entry (1 for exact hits); best rejected score on a semantic miss
	// Response is the stored response bytes. It is shared with the cache
	// (a hit copies nothing): read it, never modify it.
	Response []byte
	// View is the Renderer's pre-rendered form of Response (see
	// Cache.SetRenderer); nil when no renderer is set or on a miss. Read-only.
	View      any
	Namespace string // namespace of the request (set on hits and misses alike)
	ID        string // entry id of the served entry, or the id the request would be stored under
	// Reason explains a miss: "no-cache", "temperature", "empty", "miss",
	// "threshold" or a guard reason ("negation", "number", "entity", "role", "antonym").
	Reason string
	// Shared is set by Do when this caller did not run the generation itself
	// but received the result of a concurrent identical request.
	Shared bool
}

// XCache is the value of the X-Cache response header.
func (l Lookup) XCache() string {
	if !l.Hit {
		return Miss
	}
	if l.Tier == TierSemantic {
		return HitSemantic
	}
	return HitExact
}

// XCacheSimilarity is the value of the X-Cache-Similarity header ("" on a miss).
func (l Lookup) XCacheSimilarity() string {
	if !l.Hit {
		return ""
	}
	return strconv.FormatFloat(float64(l.Similarity), 'f', 4, 32)
}

// Headers returns the response headers to set for this lookup.
func (l Lookup) Headers() map[string]string {
	h := map[string]string{HeaderCache: l.XCache()}
	if s := l.XCacheSimilarity(); s != "" {
		h[HeaderCacheSimilarity] = s
	}
	return h
}

// KeyMode selects the key text of a request.
type KeyMode string

const (
	KeyLastUser     KeyMode = "last-user"    // last user message (default)
	KeyConversation KeyMode = "conversation" // every non-system message, role-tagged
)

// Namespace returns the namespace of a request: the escaped tenant and model,
// then a hash of the system prompt, the sorted sampling parameters and (when
// positive) the temperature. Tenants never share a namespace.
func Namespace(req *Request) string {
	// One buffer hashed once (on the stack for the usual sizes) instead of
	// a streaming hash, a key slice and per-part conversions: the same
	// bytes, the same digest (TestNamespaceDigest).
	var keysArr [16]string
	keys := keysArr[:0]
	for k := range req.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var bufArr [512]byte
	b := append(bufArr[:0], req.System...)
	b = append(b, 0)
	for _, k := range keys {
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, req.Params[k]...)
		b = append(b, 0)
	}
	if req.Temperature > 0 {
		b = append(b, "temperature="...)
		b = strconv.AppendFloat(b, req.Temperature, 'g', -1, 64)
	}
	sum := sha256.Sum256(b)
	var hx [16]byte
	hex.Encode(hx[:], sum[:8])
	return url.PathEscape(req.Tenant) + "/" + url.PathEscape(req.Model) + "/" + string(hx[:])
}

// KeyText returns the raw (un-normalized) key text of a request under mode.
// It is "" when the request has no user message.
func KeyText(req *Request, mode KeyMode) string {
	if mode == KeyConversation {
		var b strings.Builder
		for _, m := range req.Messages {
			if m.Role == "system" {
				continue
			}
			b.WriteString(m.Role)
			b.WriteString(": ")
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
		return b.String()
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Content
		}
	}
	return ""
}

// Normalize prepares key text for the exact tier: Unicode NFKC, whitespace
// runs collapsed to one space, leading and trailing space removed, and, with
// fold, simple case folding. Punctuation is kept (it can change meaning).
func Normalize(s string, fold bool) string {
	s = norm.NFKC.String(s)
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if fold {
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// EntryID is the exact-tier key: a hex hash of namespace and normalized key.
func EntryID(namespace, normalizedKey string) string {
	var bufArr [512]byte
	b := append(bufArr[:0], namespace...)
	b = append(b, 0)
	b = append(b, normalizedKey...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
