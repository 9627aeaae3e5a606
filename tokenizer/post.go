package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor computes the ids added around a single sequence when add_special_tokens
// is requested.
type postProcessor interface {
	wrap(prefix, suffix []int32) ([]int32, []int32)
}

type postSeq []postProcessor

func (p postSeq) wrap(prefix, suffix []int32) ([]int32, []int32) {
	for _, x := range p {
		prefix, suffix = x.wrap(prefix, suffix)
	}
	return prefix, suffix
}

// postNone is a post-processor that adds nothing (ByteLevel: offsets only).
type postNone struct{}

func (postNone) wrap(prefix, suffix []int32) ([]int32, []int32) { return prefix, suffix }

type tmplPiece struct {
	special string // SpecialToken id; "" for the sequence
}

type postTemplate struct {
	single   []tmplPiece
	specials map[string][]int32
}

func (p *postTemplate) wrap(prefix, suffix []int32) ([]int32, []int32) {
	// TemplateProcessing replaces the encoding: [specials...] A [specials...].
	var pre, suf []int32
	seen := false
	for _, x := range p.single {
		if x.special == "" {
			seen = true
			continue
		}
		if seen {
			suf = append(suf, p.specials[x.special]...)
		} else {
			pre = append(pre, p.specials[x.special]...)
		}
	}
	return append(pre, prefix...), append(suffix, suf...)
}

type postClsSep struct{ cls, sep int32 }

func (p postClsSep) wrap(prefix, suffix []int32) ([]int32, []int32) {
	return append([]int32{p.cls}, prefix...), append(suffix, p.sep)
}

func firstTemplate(p postProcessor) *postTemplate {
	switch x := p.(type) {
	case *postTemplate:
		return x
	case postSeq:
		for _, y := range x {
			if t := firstTemplate(y); t != nil {
				return t
			}
		}
	}
	return nil
}

func parsePostProcessor(r json.RawMessage, field string, depth int) (postProcessor, error) {
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
		seq, err := parseSequence(r, field, "processors", depth, parsePostProcessor)
		return postSeq(seq), err
	case "ByteLevel":
		return postNone{}, nil
	case "TemplateProcessing":
		var v struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				ID  string  `json:"id"`
				IDs []int64 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, errf(ErrFormat, field, "%v", err)
		}
		p := &postTemplate{specials: map[string][]int32{}}
		for name, st := range v.SpecialTokens {
			for _, id := range st.IDs {
				if id < 0 || id >= MaxVocab {
					return nil, errf(ErrFormat, field+".special_tokens."+name+".ids", "id %d out of range", id)
				}
				p.specials[name] = append(p.specials[name], int32(id))
			}
		}
		nseq := 0
		for i, x := range v.Single {
			switch {
			case x.SpecialToken != nil:
				if _, ok := p.specials[x.SpecialToken.ID]; !ok {
					return nil, errf(ErrFormat, fmt.Sprintf("%s.single[%d]", field, i), "special token %q not in special_tokens", x.SpecialToken.ID)
				}
				p.single = append(p.single, tmplPiece{special: x.SpecialToken.ID})
			case x.Sequence != nil:
				nseq++
				p.single = append(p.single, tmplPiece{})
			default:
				return nil, errf(ErrFormat, fmt.Sprintf("%s.single[%d]", field, i), "want SpecialToken or Sequence")
			}
		}
		if nseq != 1 {
			return nil, errf(ErrFormat, field+".single", "want exactly one Sequence, got %d", nseq)
		}
		return p, nil
	case "RobertaProcessing", "BertProcessing":
		var v struct {
			Sep []json.RawMessage `json:"sep"`
			Cls []json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(r, &v); err != nil || len(v.Sep) != 2 || len(v.Cls) != 2 {
			return nil, errf(ErrFormat, field, "want sep and cls as [token, id]")
		}
		var sep, cls int64
		if json.Unmarshal(v.Sep[1], &sep) != nil || json.Unmarshal(v.Cls[1], &cls) != nil ||
			sep < 0 || cls < 0 || sep >= MaxVocab || cls >= MaxVocab {
			return nil, errf(ErrFormat, field, "bad sep/cls id")
		}
		return postClsSep{cls: int32(cls), sep: int32(sep)}, nil
	}
	return nil, errf(ErrUnsupported, field+".type", "post-processor %q", typ)
}

// postProcess adds special tokens: the post-processor's, adjusted by tokenizer_config's
// add_bos_token / add_eos_token when present.
func (t *Tokenizer) postProcess(ids []int32) []int32 {
	var pre, suf []int32
	if t.post != nil {
		pre, suf = t.post.wrap(nil, nil)
	}
	if t.addBOS != nil && t.hasBOS {
		has := len(pre) > 0 && pre[0] == t.bos
		if *t.addBOS && !has {
			pre = append([]int32{t.bos}, pre...)
		} else if !*t.addBOS && has {
			pre = pre[1:]
		}
	}
	if t.addEOS != nil && len(t.eos) > 0 {
		eos := t.eos[0]
		has := len(suf) > 0 && suf[len(suf)-1] == eos
		if *t.addEOS && !has {
			suf = append(suf, eos)
		} else if !*t.addEOS && has {
			suf = suf[:len(suf)-1]
		}
	}
	out := make([]int32, 0, len(pre)+len(ids)+len(suf))
	out = append(out, pre...)
	out = append(out, ids...)
	return append(out, suf...)
}
