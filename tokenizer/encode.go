package tokenizer

// encodeRaw runs added-token splitting, normalization, pre-tokenization and the model
// (HF encode without post-processing), appending ids to dst.
func (t *Tokenizer) encodeRaw(text string, dst []int32) []int32 {
	var buf []byte
	run := pipeline(t.pre, func(w piece) {
		if w.raw {
			buf = appendByteLevel(buf[:0], w.s)
			dst = t.model.tokenizeBytes(dst, buf)
		} else {
			dst = t.model.tokenize(dst, w.s)
		}
	})
	for _, sg := range t.added.raw.split(nil, text, true) {
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
			run(piece{s: sub.s, origin: sub.origin})
		}
	}
	return dst
}

func appendByteLevel(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		b = append(b, byteToStr[s[i]]...)
	}
	return b
}
