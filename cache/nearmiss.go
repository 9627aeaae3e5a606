package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sort"
	"strings"
)

// NearMiss is a stored answer that did not qualify as a hit for a request
// but is close: its similarity is within the near-miss band (below the
// threshold), or it was above the threshold and refused by the guard. Its
// answer can still serve as a draft for speculative decoding, where the
// model verifies every token, so "close enough" carries no risk.
type NearMiss struct {
	Namespace  string
	ID         string
	Key        string  // the stored entry's normalized key text
	Similarity float32 // cosine similarity to the request's key
	// Reason: "threshold" (below the hit threshold) or the guard's reason.
	Reason   string
	Response []byte // the stored response bytes (a copy owned by the caller)
}

// NearMissNoCache is NearMiss.Reason for an answer the cache would have
// served as a hit to a request that did not read the cache (Cache-Control:
// no-cache).
const NearMissNoCache = "no-cache"

// maxNearMissNamespaces bounds the other namespaces one NearMiss searches.
const maxNearMissNamespaces = 16

func modelPrefix(tenant, model string) string {
	return url.PathEscape(tenant) + "/" + url.PathEscape(model) + "/"
}

// tenantNamespaces lists the namespaces of tenant under the given model
// names (any system prompt and parameters), but skip; sorted, at most limit.
func (c *Cache) tenantNamespaces(tenant string, models []string, skip string, limit int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for ns := range c.ns {
		if ns == skip {
			continue
		}
		for _, m := range models {
			if strings.HasPrefix(ns, modelPrefix(tenant, m)) {
				out = append(out, ns)
				break
			}
		}
	}
	sort.Strings(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// ErrNearMissBand reports a band outside (0, 1].
var ErrNearMissBand = errors.New("cache: near-miss band must be in (0, 1]")

// NearMiss returns the best stored answer for req with similarity >= band
// that is not a hit (or is one, reason NearMissNoCache, when req.NoCache:
// the request is generated anyway): from req's own namespace, the same tenant's
// namespaces of req's model with other system prompts or parameters
// (reason "params"), and the same tenant's namespaces of the other model
// names in models (reason "model": answers another model gave, e.g. an
// upstream's, as a draft for a local model); at most 16 other namespaces.
// The tenant is never changed. ok is false when there
// is none (also for requests the cache bypasses, or without a semantic
// tier). The lookup embeds the key once and searches each namespace; it
// records no hit and changes no statistics.
//
// It is separate from Get so that Get stays the hot path of hits; callers
// ask for a near miss only when they are about to generate.
func (c *Cache) NearMiss(ctx context.Context, req *Request, band float32, models []string) (NearMiss, bool, error) {
	nms, err := c.NearMisses(ctx, req, band, models, 1)
	if err != nil || len(nms) == 0 {
		return NearMiss{}, false, err
	}
	return nms[0], true, nil
}

// NearMisses is NearMiss's k best answers, best first (at most one per
// stored entry).
//
// Best is not simply most similar. The embedding scores the whole key, so
// a question in the same wording about another subject ("Define lucid." for
// "Define arduous.") often outscores the same subject asked another way
// ("What does arduous mean?"); as a draft, the other subject's answer is
// rejected at its first token. So the candidates in the band (up to
// nearMissPool per namespace) are ranked by how much of the request's
// distinctive content is in their key: the request's content words (not
// function words), each weighted by how rare it is among the candidates'
// keys (a word that every candidate shares, like the wording's "define",
// says little about which answer fits), summed over the words a candidate
// shares, as a fraction of the request's total; then by similarity.
func (c *Cache) NearMisses(ctx context.Context, req *Request, band float32, models []string, k int) ([]NearMiss, error) {
	if !(band > 0 && band <= 1) {
		return nil, fmt.Errorf("%w: %v", ErrNearMissBand, band)
	}
	p := c.prepare(req)
	if p.bypass != "" || c.cfg.DisableSemantic || k <= 0 {
		return nil, nil
	}
	vs, err := c.emb.Embed(ctx, []string{p.norm})
	if err != nil || len(vs) != 1 {
		return nil, fmt.Errorf("cache: near miss: embed %s: %w", c.emb.Name(), errOr(err, len(vs)))
	}
	v := vs[0]
	var out []NearMiss
	var keys [][]token // out[i]'s key, tokenized (for the guard and the ranking)
	qt := tokenize(p.norm)
	fetched := 0 // store reads so far: a remote store (Redis) pays a round trip for each
	nss := append([]string{p.ns}, c.tenantNamespaces(req.Tenant, append([]string{req.Model}, models...), p.ns, maxNearMissNamespaces)...)
	for _, ns := range nss {
		ms, err := c.index.Search(ctx, ns, v, max(c.cfg.TopK, k, nearMissPool))
		if err != nil {
			return nil, fmt.Errorf("cache: near miss: vector search: %w", err)
		}
		took := 0
		for _, m := range ms {
			if m.Score < band || took == max(k, nearMissPool) || fetched == maxNearMissFetches {
				break
			}
			fetched++
			e, err := c.store.Get(ctx, ns, m.ID)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("cache: near miss: fetch: %w", err)
			}
			reason := "threshold"
			kt := tokenize(e.Key)
			if ns == p.ns && m.Score >= p.cfg.Threshold {
				// a hit unless the guard refuses it (Get decided so already
				// when the caller saw a miss; check again: entries change).
				// A request that did not read the cache (Cache-Control:
				// no-cache) is generated although the cache holds this
				// answer: it is the closest draft there is.
				switch {
				case req.NoCache:
					reason = NearMissNoCache // a hit or not, the request is generated
				case c.cfg.DisableGuard:
					continue
				default:
					if reason = guardTokens(qt, kt); reason == "" {
						continue
					}
				}
			} else if ns != p.ns {
				reason = "params"
				if !strings.HasPrefix(ns, modelPrefix(req.Tenant, req.Model)) {
					reason = "model"
				}
			}
			took++
			out = append(out, NearMiss{Namespace: ns, ID: e.ID, Key: e.Key, Similarity: m.Score, Reason: reason, Response: e.Response})
			keys = append(keys, kt)
		}
	}
	rankNearMisses(qt, keys, out)
	if len(out) > k {
		out = out[:k]
	}
	return out, nil
}

// nearMissPool is how many candidates in the band per namespace
// NearMisses ranks.
const nearMissPool = 8

// maxNearMissFetches bounds the store reads of one NearMisses call over all
// namespaces (the request's own first, which keeps its whole pool). Without
// it a tenant with 17 namespaces cost up to 17 × nearMissPool = 136 reads on
// the time-to-first-token path of a miss: 136 round trips to a Redis store.
const maxNearMissFetches = 3 * nearMissPool

// rankNearMisses sorts candidates (keyToks[i] is nms[i].Key tokenized) by
// their share of the query's distinctive content (see NearMisses), then by
// similarity.
func rankNearMisses(query []token, keyToks [][]token, nms []NearMiss) {
	if len(nms) < 2 {
		return
	}
	q := map[string]bool{}
	for _, t := range query {
		if isContent(t) {
			q[t.stem] = true
		}
	}
	// the query's content words each key holds (keys' other words do not
	// count)
	keys := make([]map[string]bool, len(nms))
	df := map[string]int{}
	for i, kt := range keyToks {
		keys[i] = map[string]bool{}
		for _, t := range kt {
			if q[t.stem] && isContent(t) && !keys[i][t.stem] {
				keys[i][t.stem] = true
				df[t.stem]++
			}
		}
	}
	// idf over the candidates: a word in every key weighs little, one in
	// a single key much.
	n := float64(len(nms))
	idf := func(w string) float64 { return math.Log((n + 1) / float64(df[w]+1)) }
	total := 0.0
	for w := range q {
		total += idf(w)
	}
	share := make([]float64, len(nms))
	if total > 0 {
		for i, kw := range keys {
			for w := range kw {
				share[i] += idf(w)
			}
			share[i] /= total
		}
	}
	idx := make([]int, len(nms))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		if sa, sb := share[idx[a]], share[idx[b]]; sa != sb {
			return sa > sb
		}
		return nms[idx[a]].Similarity > nms[idx[b]].Similarity
	})
	sorted := make([]NearMiss, len(nms))
	for i, j := range idx {
		sorted[i] = nms[j]
	}
	copy(nms, sorted)
}
