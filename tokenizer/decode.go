package tokenizer

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// decoder is HF's Decoder::decode_chain: tokens in, (possibly fewer) strings out.
type decoder interface {
	chain(tokens []string) []string
}

type decSeq []decoder

func (d decSeq) chain(t []string) []string {
	for _, x := range d {
		t = x.chain(t)
	}
	return t
}

type decByteLevel struct{}

func (decByteLevel) chain(tokens []string) []string {
	var b []byte
	for _, t := range tokens {
		start := len(b)
		ok := true
		for _, r := range t {
			c, found := runeToByte[r]
			if !found {
				ok = false
				break
			}
			b = append(b, c)
		}
		if !ok {
			b = append(b[:start], t...)
		}
	}
	return []string{lossyUTF8(b)}
}

type decMetaspace struct {
	replR  rune
	scheme prependScheme
}

func (d decMetaspace) chain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var b strings.Builder
		for _, r := range t {
			if r == d.replR {
				if i == 0 && d.scheme != prependNever {
					continue
				}
				b.WriteByte(' ')
			} else {
				b.WriteRune(r)
			}
		}
		out[i] = b.String()
	}
	return out
}

type decReplace struct{ r replacer }

func (d decReplace) chain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = d.r.replace(t)
	}
	return out
}

type decByteFallback struct{}

func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(t[3:5]) {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | d
	}
	return v, true
}

func (decByteFallback) chain(tokens []string) []string {
	var out []string
	var pend []byte
	flush := func() {
		if len(pend) == 0 {
			return
		}
		if utf8.Valid(pend) {
			out = append(out, string(pend))
		} else {
			for range pend {
				out = append(out, "\uFFFD")
			}
		}
		pend = pend[:0]
	}
	for _, t := range tokens {
		if b, ok := parseByteToken(t); ok {
			pend = append(pend, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

type decFuse struct{}

func (decFuse) chain(tokens []string) []string { return []string{strings.Join(tokens, "")} }

type decStrip struct {
	content     rune
	start, stop int
}

func (d decStrip) chain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		rs := []rune(t)
		a := 0
		for k := 0; k < d.start && k < len(rs) && rs[k] == d.content; k++ {
			a = k + 1
		}
		b := len(rs)
		for k := 0; k < d.stop; k++ {
			idx := len(rs) - k - 1
			if idx < a || rs[idx] != d.content {
				break
			}
			b = idx
		}
		out[i] = string(rs[a:b])
	}
	return out
}

type decBPE struct{ suffix string }

func (d decBPE) chain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		rep := " "
		if i == len(tokens)-1 {
			rep = ""
		}
		out[i] = strings.ReplaceAll(t, d.suffix, rep)
	}
	return out
}

func parseDecoder(r json.RawMessage, field string, depth int) (decoder, error) {
	if isNull(r) {
		return nil, nil
	}
	if depth > maxDepth {
		return nil, errf(ErrFormat, field, "nested deeper than %d", maxDepth)
	}
	typ, err := componentType(r, field)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := parseSequence(r, field, "decoders", depth, parseDecoder)
		return decSeq(seq), err
	case "ByteLevel":
		return decByteLevel{}, nil
	case "Metaspace":
		var v struct {
			Replacement    *string `json:"replacement"`
			PrependScheme  *string `json:"prepend_scheme"`
			AddPrefixSpace *bool   `json:"add_prefix_space"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		p, err := metaspaceParams(v.Replacement, v.PrependScheme, v.AddPrefixSpace, field)
		if err != nil {
			return nil, err
		}
		return decMetaspace{replR: p.replR, scheme: p.scheme}, nil
	case "Replace":
		rep, err := parseReplace(r, field)
		if err != nil {
			return nil, err
		}
		return decReplace{rep}, nil
	case "ByteFallback":
		return decByteFallback{}, nil
	case "Fuse":
		return decFuse{}, nil
	case "Strip":
		var v struct {
			Content *string `json:"content"`
			Start   int     `json:"start"`
			Stop    int     `json:"stop"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		if v.Content == nil || utf8.RuneCountInString(*v.Content) != 1 {
			return nil, errf(ErrFormat, field+".content", "want exactly one character")
		}
		if v.Start < 0 || v.Stop < 0 || v.Start > 1<<16 || v.Stop > 1<<16 {
			return nil, errf(ErrFormat, field+".start", "start/stop out of range")
		}
		c, _ := utf8.DecodeRuneInString(*v.Content)
		return decStrip{content: c, start: v.Start, stop: v.Stop}, nil
	case "BPEDecoder":
		var v struct {
			Suffix *string `json:"suffix"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		s := "</w>"
		if v.Suffix != nil {
			s = *v.Suffix
		}
		return decBPE{s}, nil
	}
	return nil, errf(ErrUnsupported, field+".type", "decoder %q", typ)
}

// lossyUTF8 converts b like Rust's String::from_utf8_lossy: each maximal invalid subpart
// becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			sb.Write(b[i : i+w])
			i += w
			continue
		}
		sb.WriteString("\uFFFD")
		i += maximalSubpart(b[i:])
	}
	return sb.String()
}

// maximalSubpart returns the length (>= 1) of the invalid prefix of b that Unicode's
// "maximal subpart" practice replaces with a single U+FFFD.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 {
			if x < lo || x > hi {
				break
			}
		} else if x < 0x80 || x > 0xBF {
			break
		}
		n++
	}
	return n
}

// decodeRaw is HF Tokenizer::decode (without transformers' cleanup).
func (t *Tokenizer) decodeRaw(ids []int32, skipSpecial bool) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.idToTok) {
			continue
		}
		if a, ok := t.added.byID[id]; ok {
			if skipSpecial && a.special {
				continue
			}
			toks = append(toks, a.match)
			continue
		}
		if int(id) >= len(t.model.vocabR) {
			continue
		}
		tok := t.model.vocabR[id]
		if tok == "" {
			if v, ok := t.model.vocab[""]; !ok || v != id {
				continue
			}
		}
		toks = append(toks, tok)
	}
	if t.dec == nil {
		return strings.Join(toks, " ")
	}
	return strings.Join(t.dec.chain(toks), "")
}

// StreamDecoder turns a stream of ids into text, emitting only complete UTF-8 (text is held
// back while it ends in U+FFFD, i.e. an incomplete character). The concatenation of all Add
// results and Flush equals Decode of the ids for the byte-level and SentencePiece families
// (the decoded window always starts one token back, so leading-space stripping matches);
// the exception is a stream of invalid byte tokens that rewrites already emitted text, where
// the decoder resynchronizes instead. Memory is bounded: ids before the window are dropped.
// Not safe for concurrent use.
type StreamDecoder struct {
	t         *Tokenizer
	skip      bool
	ids       []int32
	prefixIdx int
	readIdx   int
	prefix    string // decode(ids[prefixIdx:readIdx])
}

// NewDecoder starts a streaming decoder.
func (t *Tokenizer) NewDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skip: skipSpecial}
}

// Add appends id and returns the newly completed text ("" while a character is incomplete).
func (d *StreamDecoder) Add(id int32) string {
	if d.skip && d.t.IsSpecial(id) {
		return ""
	}
	d.ids = append(d.ids, id)
	text := d.t.decodeRaw(d.ids[d.prefixIdx:], d.skip)
	if len(text) <= len(d.prefix) || strings.HasSuffix(text, "\uFFFD") {
		return ""
	}
	var out string
	if strings.HasPrefix(text, d.prefix) {
		out = text[len(d.prefix):]
	} else {
		// The new ids changed already emitted text (only possible for invalid byte
		// sequences under ByteFallback grouping): resynchronize on the unread ids.
		out = d.t.decodeRaw(d.ids[d.readIdx:], d.skip)
	}
	d.prefixIdx, d.readIdx = d.readIdx, len(d.ids)
	d.prefix = d.t.decodeRaw(d.ids[d.prefixIdx:d.readIdx], d.skip)
	if d.prefixIdx > 256 {
		// Drop ids before the window so memory stays bounded on long streams.
		n := d.prefixIdx
		d.ids = append(d.ids[:0], d.ids[n:]...)
		d.prefixIdx, d.readIdx = 0, d.readIdx-n
	}
	return out
}

// Flush returns any text still held back (an incomplete character becomes U+FFFD) and
// resets the decoder.
func (d *StreamDecoder) Flush() string {
	text := d.t.decodeRaw(d.ids[d.prefixIdx:], d.skip)
	out := ""
	if strings.HasPrefix(text, d.prefix) {
		out = text[len(d.prefix):]
	} else if d.readIdx < len(d.ids) {
		out = d.t.decodeRaw(d.ids[d.readIdx:], d.skip)
	}
	d.ids, d.prefixIdx, d.readIdx, d.prefix = d.ids[:0], 0, 0, ""
	return out
}
