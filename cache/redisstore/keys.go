// Package redisstore implements the semantic cache's scalar store
// ([cache.Store]) and a vector index ([cache.VectorIndex]) on Redis, so that
// every gateway replica pointed at the same Redis shares one cache.
//
// # Key layout
//
// Every key starts with the configured prefix (default "specgate") and the
// namespace hash in a Redis Cluster hash tag, so that all keys of one
// namespace live in one slot and the Lua scripts below stay cluster-safe:
//
//	{prefix}:{nsh}:e:{id}  hash   one entry (fields ns id key resp vec cost ca ea hits la)
//	{prefix}:{nsh}:lru     zset   member id, score = last access (unix ms): LRU bookkeeping
//	{prefix}:{nsh}:vec     hash   vector index: field id, value = little-endian float32s
//	{prefix}:{nsh}:vlog    zset   vector index change log: member id, score = version of its last change
//	{prefix}:{nsh}:vver    string vector index version (INCR on every Add/Remove)
//	{prefix}:{nsh}:vmin    string highest version of a pruned tombstone (replicas below it reload)
//
// nsh is the first 128 bits of SHA-256(namespace) in hex. The namespace is
// also stored inside every entry and checked on read, so a hash collision can
// never serve another tenant's entry.
//
// The store uses only commands of plain Redis ≥ 7.0 (no modules): hashes,
// sorted sets, PEXPIREAT/PEXPIRETIME, SCAN with MATCH (never KEYS) and Lua.
package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "specgate"

// nsHash returns the 32-hex-digit namespace hash used in keys.
func nsHash(namespace string) string {
	sum := sha256.Sum256([]byte(namespace))
	return hex.EncodeToString(sum[:16])
}

// keyspace builds the keys of one prefix.
type keyspace struct{ prefix string }

func (k keyspace) ns(namespace string) string { return k.prefix + ":{" + nsHash(namespace) + "}" }
func (k keyspace) entry(namespace, id string) string {
	return k.ns(namespace) + ":e:" + id
}
func (k keyspace) lru(namespace string) string  { return k.ns(namespace) + ":lru" }
func (k keyspace) vec(namespace string) string  { return k.ns(namespace) + ":vec" }
func (k keyspace) vlog(namespace string) string { return k.ns(namespace) + ":vlog" }
func (k keyspace) vver(namespace string) string { return k.ns(namespace) + ":vver" }
func (k keyspace) vmin(namespace string) string { return k.ns(namespace) + ":vmin" }

// entryPattern is the SCAN MATCH pattern of the entry keys of one namespace,
// or of all namespaces when namespace is "" and all is true.
func (k keyspace) entryPattern(namespace string, all bool) string {
	p := globEscape(k.prefix)
	if all {
		return p + ":{*}:e:*"
	}
	return p + ":{" + nsHash(namespace) + "}:e:*"
}

// globEscape escapes the characters that are special in a Redis glob pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '^':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
