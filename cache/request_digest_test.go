package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The namespace and entry id digests are unchanged by the one-buffer
// hashing: checked against the streaming form they had (written out here
// as the reference), over system prompts, parameter sets and keys around
// the stack buffer's size. Stored entries keep their ids.
func TestNamespaceDigest(t *testing.T) {
	refNS := func(req *Request) string {
		h := sha256.New()
		h.Write([]byte(req.System))
		h.Write([]byte{0})
		keys := make([]string, 0, len(req.Params))
		for k := range req.Params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			h.Write([]byte(k))
			h.Write([]byte{'='})
			h.Write([]byte(req.Params[k]))
			h.Write([]byte{0})
		}
		if req.Temperature > 0 {
			h.Write([]byte("temperature=" + strconv.FormatFloat(req.Temperature, 'g', -1, 64)))
		}
		return url.PathEscape(req.Tenant) + "/" + url.PathEscape(req.Model) + "/" + hex.EncodeToString(h.Sum(nil)[:8])
	}
	refID := func(ns, key string) string {
		h := sha256.New()
		h.Write([]byte(ns))
		h.Write([]byte{0})
		h.Write([]byte(key))
		return hex.EncodeToString(h.Sum(nil)[:16])
	}
	many := map[string]string{}
	for i := 0; i < 40; i++ { // more keys than the stack array holds
		many["p"+strconv.Itoa(i)] = strings.Repeat("v", i)
	}
	for _, req := range []*Request{
		{},
		{Tenant: "a/b c", Model: "m", System: "You are terse.", Temperature: 0.7},
		{Tenant: "t", Model: "m", Params: map[string]string{"max_tokens": "16", "n": "1", "top_p": "1", "stop": `["\n"]`, "endpoint": "chat"}},
		{Tenant: "t", Model: "m", System: strings.Repeat("long system prompt ", 100), Params: many},
	} {
		if got, want := Namespace(req), refNS(req); got != want {
			t.Errorf("Namespace(%+v) = %q, want %q", req.Tenant, got, want)
		}
		for _, key := range []string{"", "what does ephemeral mean", strings.Repeat("ü", 600)} {
			ns := Namespace(req)
			if got, want := EntryID(ns, key), refID(ns, key); got != want {
				t.Errorf("EntryID(%q, %d-byte key) = %q, want %q", ns, len(key), got, want)
			}
		}
	}
}
