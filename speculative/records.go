package speculative

// tenantRecords are per-tenant continuation records of a draft source
// (confirmed draft tokens against rejections, decayed), bounded to
// maxSrcRecords tenants with the least recently used dropped: a new
// request's prior. Only counts are kept, never text. Not safe for
// concurrent use (the owner's lock).
type tenantRecords struct {
	m    map[string]*srcRecord
	tick uint64
}

// rate is the tenant's continuation rate with prior at weight
// srcPriorWeight, and whether the tenant has a record.
func (t *tenantRecords) rate(tenant string, prior float64) (float64, bool) {
	r := t.m[tenant]
	if r == nil {
		return prior, false
	}
	return (r.confirmed + prior*srcPriorWeight) / (r.confirmed + r.rejects + srcPriorWeight), true
}

// add records a request's new confirmations and rejections.
func (t *tenantRecords) add(tenant string, confirmed, rejects int) {
	if confirmed == 0 && rejects == 0 {
		return
	}
	if t.m == nil {
		t.m = map[string]*srcRecord{}
	}
	r := t.m[tenant]
	if r == nil {
		if len(t.m) >= maxSrcRecords {
			var oldest string
			first := true
			for k, v := range t.m {
				if first || v.used < t.m[oldest].used {
					oldest, first = k, false
				}
			}
			delete(t.m, oldest)
		}
		r = &srcRecord{}
		t.m[tenant] = r
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
