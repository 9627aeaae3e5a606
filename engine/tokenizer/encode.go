package tokenizer

// encodeRaw runs added-token splitting, normalization, pre-tokenization and the model
// (HF encode without post-processing), appending ids to dst.
func (t *Tokenizer) encodeRaw(text string, dst []int32) []int32 {
	segs := t.added.raw.split(nil, text, true)
	var words []piece
	for _, sg := range segs {
		if sg.id >= 0 {
			dst = append(dst, sg.id)
			continue
		}
		s := sg.s
		if t.norm != nil {
			s = t.norm.normalize(s)
		}
		for _, sub := range t.added.norm.split(nil, s, sg.origin) {
			if sub.id >= 0 {
				dst = append(dst, sub.id)
				continue
			}
			words = t.pre.preTokenize(words[:0], []piece{{s: sub.s, origin: sub.origin}})
			for _, w := range words {
				dst = t.model.tokenize(dst, w.s)
			}
		}
	}
	return dst
}
