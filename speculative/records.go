package speculative

// records are continuation records of draft sources (confirmed draft tokens
// against rejections, decayed), keyed by tenant (Suffix) or by tenant and
// source (Known), bounded to maxSrcRecords keys with the least recently
// used dropped: a new request's prior. Only counts are kept, never text.
// Not safe for concurrent use (the owner's lock).
type records[K comparable] struct {
	m    map[K]*srcRecord
	tick uint64
}

// tenantRecords are a source's per-tenant records.
type tenantRecords = records[string]

// rate is key's continuation rate with prior at weight srcPriorWeight, and
// whether key has a record.
func (t *records[K]) rate(key K, prior float64) (float64, bool) {
	r := t.m[key]
	if r == nil {
		return prior, false
	}
	return (r.confirmed + prior*srcPriorWeight) / (r.confirmed + r.rejects + srcPriorWeight), true
}

// add records a request's new confirmations and rejections under key.
func (t *records[K]) add(key K, confirmed, rejects int) {
	if confirmed == 0 && rejects == 0 {
		return
	}
	if t.m == nil {
		t.m = map[K]*srcRecord{}
	}
	r := t.m[key]
	if r == nil {
		if len(t.m) >= maxSrcRecords {
			t.evict()
		}
		r = &srcRecord{}
		t.m[key] = r
	}
	t.tick++
	r.used = t.tick
	r.confirmed += float64(confirmed)
	r.rejects += float64(rejects)
	if r.confirmed+r.rejects > srcDecayAt {
		r.confirmed /= 2
		r.rejects /= 2
	}
}

// evict drops the least recently used record.
func (t *records[K]) evict() {
	var oldest K
	first := true
	var at uint64
	for key, r := range t.m {
		if first || r.used < at {
			oldest, at, first = key, r.used, false
		}
	}
	delete(t.m, oldest)
}
