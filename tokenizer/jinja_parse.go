package tokenizer

import (
	"strconv"
)

// AST of the Jinja2 subset.

type jnode interface{}

type (
	jText   struct{ s string }
	jOutput struct{ e jexpr }
	jIf     struct {
		conds  []jexpr
		bodies [][]jnode
		els    []jnode
	}
	jFor struct {
		vars   []string
		iter   jexpr
		filter jexpr // nil: none
		body   []jnode
		els    []jnode
	}
	jSet struct {
		name, attr string // attr != "": namespace attribute assignment
		names      []string
		e          jexpr
		body       []jnode // block set: {% set x %}...{% endset %}
	}
	jBreak    struct{}
	jContinue struct{}
)

// jexpr is an expression AST node.
type jexpr interface{}

type (
	eLit  struct{ v any }
	eName struct{ n string }
	eList struct{ items []jexpr }
	eDict struct{ keys, vals []jexpr }
	eAttr struct {
		x    jexpr
		name string
	}
	eIndex struct{ x, i jexpr }
	eSlice struct {
		x                 jexpr
		start, stop, step jexpr // nil: omitted
	}
	eCall struct {
		fn   jexpr
		args []jexpr
		kw   []string
		kwv  []jexpr
	}
	eFilter struct {
		x    jexpr
		name string
		args []jexpr
		kw   []string
		kwv  []jexpr
		pos  int
	}
	eTest struct {
		x    jexpr
		name string
		args []jexpr
		neg  bool
		pos  int
	}
	eBin struct {
		op   string
		a, b jexpr
	}
	eNot  struct{ x jexpr }
	eNeg  struct{ x jexpr }
	eCond struct{ cond, a, b jexpr } // a if cond else b; b nil: undefined
)

type jparser struct {
	toks []jtok
	i    int
	pos  int // tag offset for errors
}

func (p *jparser) peek() jtok {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return jtok{kind: jtEOF, pos: p.pos}
}

func (p *jparser) next() jtok { t := p.peek(); p.i++; return t }

func (p *jparser) isOp(s string) bool { t := p.peek(); return t.kind == jtOp && t.s == s }

func (p *jparser) isName(s string) bool { t := p.peek(); return t.kind == jtName && t.s == s }

func (p *jparser) expectOp(s string) error {
	if !p.isOp(s) {
		return tmplErr(ErrUnsupportedTemplate, p.peek().pos, "expected %q, found %q", s, p.peek().s)
	}
	p.i++
	return nil
}

func (p *jparser) done() error {
	if p.i < len(p.toks) {
		return tmplErr(ErrUnsupportedTemplate, p.peek().pos, "unexpected %q", p.peek().s)
	}
	return nil
}

func (p *jparser) expr() (jexpr, error) {
	a, err := p.or()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.i++
		c, err := p.or()
		if err != nil {
			return nil, err
		}
		var b jexpr
		if p.isName("else") {
			p.i++
			if b, err = p.or(); err != nil {
				return nil, err
			}
		}
		a = eCond{c, a, b}
	}
	return a, nil
}

func (p *jparser) or() (jexpr, error) {
	a, err := p.and()
	for err == nil && p.isName("or") {
		p.i++
		var b jexpr
		b, err = p.and()
		a = eBin{"or", a, b}
	}
	return a, err
}

func (p *jparser) and() (jexpr, error) {
	a, err := p.not()
	for err == nil && p.isName("and") {
		p.i++
		var b jexpr
		b, err = p.not()
		a = eBin{"and", a, b}
	}
	return a, err
}

func (p *jparser) not() (jexpr, error) {
	if p.isName("not") {
		p.i++
		x, err := p.not()
		return eNot{x}, err
	}
	return p.compare()
}

func (p *jparser) compare() (jexpr, error) {
	a, err := p.math1()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == jtOp && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == ">" || t.s == "<=" || t.s == ">="):
			op = t.s
			p.i++
		case t.kind == jtName && t.s == "in":
			op = "in"
			p.i++
		case t.kind == jtName && t.s == "not" && p.i+1 < len(p.toks) && p.toks[p.i+1].kind == jtName && p.toks[p.i+1].s == "in":
			op = "notin"
			p.i += 2
		default:
			return a, nil
		}
		b, err := p.math1()
		if err != nil {
			return nil, err
		}
		a = eBin{op, a, b}
	}
}

func (p *jparser) math1() (jexpr, error) {
	a, err := p.concat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		op := p.next().s
		var b jexpr
		b, err = p.concat()
		a = eBin{op, a, b}
	}
	return a, err
}

func (p *jparser) concat() (jexpr, error) {
	a, err := p.math2()
	for err == nil && p.isOp("~") {
		p.i++
		var b jexpr
		b, err = p.math2()
		a = eBin{"~", a, b}
	}
	return a, err
}

func (p *jparser) math2() (jexpr, error) {
	a, err := p.pow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		op := p.next().s
		var b jexpr
		b, err = p.pow()
		a = eBin{op, a, b}
	}
	return a, err
}

func (p *jparser) pow() (jexpr, error) {
	a, err := p.unary(true)
	for err == nil && p.isOp("**") {
		p.i++
		var b jexpr
		b, err = p.unary(true)
		a = eBin{"**", a, b}
	}
	return a, err
}

func (p *jparser) unary(withFilter bool) (jexpr, error) {
	var x jexpr
	var err error
	switch {
	case p.isOp("-"):
		p.i++
		if x, err = p.unary(false); err != nil {
			return nil, err
		}
		x = eNeg{x}
	case p.isOp("+"):
		p.i++
		if x, err = p.unary(false); err != nil {
			return nil, err
		}
	default:
		if x, err = p.primary(); err != nil {
			return nil, err
		}
		if x, err = p.postfix(x); err != nil {
			return nil, err
		}
	}
	if withFilter {
		return p.filterExpr(x)
	}
	return x, nil
}

func (p *jparser) primary() (jexpr, error) {
	t := p.next()
	switch t.kind {
	case jtName:
		switch t.s {
		case "true", "True":
			return eLit{true}, nil
		case "false", "False":
			return eLit{false}, nil
		case "none", "None":
			return eLit{nil}, nil
		}
		return eName{t.s}, nil
	case jtString:
		s := t.s
		for p.peek().kind == jtString { // adjacent literals concatenate
			s += p.next().s
		}
		return eLit{s}, nil
	case jtInt:
		v, err := strconv.ParseInt(t.s, 10, 64)
		if err != nil {
			return nil, tmplErr(ErrTemplate, t.pos, "bad integer %q", t.s)
		}
		return eLit{v}, nil
	case jtFloat:
		v, err := strconv.ParseFloat(t.s, 64)
		if err != nil {
			return nil, tmplErr(ErrTemplate, t.pos, "bad float %q", t.s)
		}
		return eLit{v}, nil
	case jtOp:
		switch t.s {
		case "(":
			if p.isOp(")") {
				p.i++
				return eList{}, nil
			}
			x, err := p.expr()
			if err != nil {
				return nil, err
			}
			if p.isOp(",") { // tuple
				items := []jexpr{x}
				for p.isOp(",") {
					p.i++
					if p.isOp(")") {
						break
					}
					y, err := p.expr()
					if err != nil {
						return nil, err
					}
					items = append(items, y)
				}
				x = eList{items}
			}
			return x, p.expectOp(")")
		case "[":
			var items []jexpr
			for !p.isOp("]") {
				x, err := p.expr()
				if err != nil {
					return nil, err
				}
				items = append(items, x)
				if !p.isOp(",") {
					break
				}
				p.i++
			}
			return eList{items}, p.expectOp("]")
		case "{":
			var d eDict
			for !p.isOp("}") {
				k, err := p.expr()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.expr()
				if err != nil {
					return nil, err
				}
				d.keys, d.vals = append(d.keys, k), append(d.vals, v)
				if !p.isOp(",") {
					break
				}
				p.i++
			}
			return d, p.expectOp("}")
		}
	}
	if t.kind == jtEOF {
		return nil, tmplErr(ErrUnsupportedTemplate, t.pos, "unexpected end of expression")
	}
	return nil, tmplErr(ErrUnsupportedTemplate, t.pos, "unexpected %q", t.s)
}

func (p *jparser) postfix(x jexpr) (jexpr, error) {
	for {
		switch {
		case p.isOp("."):
			p.i++
			t := p.next()
			if t.kind != jtName && t.kind != jtInt {
				return nil, tmplErr(ErrUnsupportedTemplate, t.pos, "bad attribute %q", t.s)
			}
			x = eAttr{x, t.s}
		case p.isOp("["):
			p.i++
			var parts [3]jexpr
			n := 0
			for {
				if !p.isOp(":") && !p.isOp("]") {
					e, err := p.expr()
					if err != nil {
						return nil, err
					}
					parts[n] = e
				}
				if p.isOp(":") && n < 2 {
					p.i++
					n++
					continue
				}
				break
			}
			if err := p.expectOp("]"); err != nil {
				return nil, err
			}
			if n == 0 {
				x = eIndex{x, parts[0]}
			} else {
				x = eSlice{x, parts[0], parts[1], parts[2]}
			}
		case p.isOp("("):
			c, err := p.callArgs(x)
			if err != nil {
				return nil, err
			}
			x = c
		default:
			return x, nil
		}
	}
}

func (p *jparser) callArgs(fn jexpr) (eCall, error) {
	c := eCall{fn: fn}
	if err := p.expectOp("("); err != nil {
		return c, err
	}
	for !p.isOp(")") {
		if p.peek().kind == jtName && p.i+1 < len(p.toks) && p.toks[p.i+1].kind == jtOp && p.toks[p.i+1].s == "=" {
			name := p.next().s
			p.i++
			v, err := p.expr()
			if err != nil {
				return c, err
			}
			c.kw, c.kwv = append(c.kw, name), append(c.kwv, v)
		} else {
			v, err := p.expr()
			if err != nil {
				return c, err
			}
			c.args = append(c.args, v)
		}
		if !p.isOp(",") {
			break
		}
		p.i++
	}
	return c, p.expectOp(")")
}

func (p *jparser) filterExpr(x jexpr) (jexpr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.i++
			t := p.next()
			if t.kind != jtName {
				return nil, tmplErr(ErrUnsupportedTemplate, t.pos, "bad filter name %q", t.s)
			}
			f := eFilter{x: x, name: t.s, pos: t.pos}
			if p.isOp("(") {
				c, err := p.callArgs(nil)
				if err != nil {
					return nil, err
				}
				f.args, f.kw, f.kwv = c.args, c.kw, c.kwv
			}
			x = f
		case p.isName("is"):
			p.i++
			neg := false
			if p.isName("not") {
				p.i++
				neg = true
			}
			t := p.next()
			if t.kind != jtName && !(t.kind == jtOp && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == ">" || t.s == "<=" || t.s == ">=")) {
				return nil, tmplErr(ErrUnsupportedTemplate, t.pos, "bad test name %q", t.s)
			}
			if t.s == "none" || t.s == "None" {
				t.s = "none"
			}
			e := eTest{x: x, name: t.s, neg: neg, pos: t.pos}
			if p.isOp("(") {
				c, err := p.callArgs(nil)
				if err != nil {
					return nil, err
				}
				e.args = c.args
			} else if nt := p.peek(); nt.kind == jtString || nt.kind == jtInt || nt.kind == jtFloat || (nt.kind == jtName && !isKeyword(nt.s)) {
				// Test with one argument without parentheses: `x is divisibleby 3`, `x is sameas y`.
				a, err := p.primary()
				if err != nil {
					return nil, err
				}
				e.args = []jexpr{a}
			}
			x = e
		default:
			return x, nil
		}
	}
}

func isKeyword(s string) bool {
	switch s {
	case "and", "or", "not", "in", "is", "if", "else", "for", "recursive":
		return true
	}
	return false
}

// parseTemplate builds the statement tree.
func parseTemplate(src string) ([]jnode, error) {
	parts, err := lexTemplate(src)
	if err != nil {
		return nil, err
	}
	i := 0
	nodes, end, err := parseBlock(parts, &i)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, tmplErr(ErrUnsupportedTemplate, parts[i].pos, "unexpected {%% %s %%}", end)
	}
	return nodes, nil
}

// parseBlock parses nodes until an end/intermediate tag (endif, elif, else, endfor,
// endset, endgeneration), which is returned by name with its parser positioned after the
// keyword.
func parseBlock(parts []tmplPart, i *int) ([]jnode, string, error) {
	var out []jnode
	for *i < len(parts) {
		pt := parts[*i]
		*i++
		switch pt.kind {
		case 't':
			out = append(out, jText{pt.text})
			continue
		case 'e':
			p := &jparser{toks: pt.toks, pos: pt.pos}
			e, err := p.expr()
			if err != nil {
				return nil, "", err
			}
			if err := p.done(); err != nil {
				return nil, "", err
			}
			out = append(out, jOutput{e})
			continue
		}
		if len(pt.toks) == 0 || pt.toks[0].kind != jtName {
			return nil, "", tmplErr(ErrUnsupportedTemplate, pt.pos, "empty or malformed statement")
		}
		kw := pt.toks[0].s
		p := &jparser{toks: pt.toks[1:], pos: pt.pos}
		switch kw {
		case "endif", "elif", "else", "endfor", "endset", "endgeneration":
			*i-- // let the caller inspect this part
			return out, kw, nil
		case "if":
			n := jIf{}
			cond, err := p.expr()
			if err == nil {
				err = p.done()
			}
			if err != nil {
				return nil, "", err
			}
			for {
				body, end, err := parseBlock(parts, i)
				if err != nil {
					return nil, "", err
				}
				n.conds, n.bodies = append(n.conds, cond), append(n.bodies, body)
				if end == "" {
					return nil, "", tmplErr(ErrTemplate, pt.pos, "unclosed {%% if %%}")
				}
				tag := parts[*i]
				*i++
				tp := &jparser{toks: tag.toks[1:], pos: tag.pos}
				switch end {
				case "elif":
					if cond, err = tp.expr(); err == nil {
						err = tp.done()
					}
					if err != nil {
						return nil, "", err
					}
					continue
				case "else":
					els, end2, err := parseBlock(parts, i)
					if err != nil {
						return nil, "", err
					}
					if end2 != "endif" {
						return nil, "", tmplErr(ErrTemplate, tag.pos, "expected {%% endif %%}, found %q", end2)
					}
					*i++
					n.els = els
				case "endif":
				default:
					return nil, "", tmplErr(ErrTemplate, tag.pos, "unexpected {%% %s %%} in if", end)
				}
				break
			}
			out = append(out, n)
		case "for":
			n := jFor{}
			for {
				t := p.next()
				if t.kind != jtName {
					return nil, "", tmplErr(ErrUnsupportedTemplate, t.pos, "bad loop variable %q", t.s)
				}
				n.vars = append(n.vars, t.s)
				if !p.isOp(",") {
					break
				}
				p.i++
			}
			if !p.isName("in") {
				return nil, "", tmplErr(ErrUnsupportedTemplate, p.peek().pos, "expected 'in' in for")
			}
			p.i++
			iter, err := p.or() // not expr(): a trailing `if` is the loop filter
			if err != nil {
				return nil, "", err
			}
			n.iter = iter
			if p.isName("if") {
				p.i++
				if n.filter, err = p.expr(); err != nil {
					return nil, "", err
				}
			}
			if p.isName("recursive") {
				return nil, "", tmplErr(ErrUnsupportedTemplate, p.peek().pos, "recursive loops")
			}
			if err := p.done(); err != nil {
				return nil, "", err
			}
			body, end, err := parseBlock(parts, i)
			if err != nil {
				return nil, "", err
			}
			if end == "else" {
				*i++
				if n.els, end, err = parseBlock(parts, i); err != nil {
					return nil, "", err
				}
			}
			if end != "endfor" {
				return nil, "", tmplErr(ErrTemplate, pt.pos, "unclosed {%% for %%}")
			}
			*i++
			n.body = body
			out = append(out, n)
		case "set":
			n := jSet{}
			t := p.next()
			if t.kind != jtName {
				return nil, "", tmplErr(ErrUnsupportedTemplate, t.pos, "bad set target %q", t.s)
			}
			n.name = t.s
			if p.isOp(".") {
				p.i++
				a := p.next()
				if a.kind != jtName {
					return nil, "", tmplErr(ErrUnsupportedTemplate, a.pos, "bad set target attribute")
				}
				n.attr = a.s
			} else if p.isOp(",") {
				n.names = []string{n.name}
				for p.isOp(",") {
					p.i++
					a := p.next()
					if a.kind != jtName {
						return nil, "", tmplErr(ErrUnsupportedTemplate, a.pos, "bad set target")
					}
					n.names = append(n.names, a.s)
				}
			}
			if p.i == len(p.toks) && n.attr == "" && n.names == nil { // block set
				body, end, err := parseBlock(parts, i)
				if err != nil {
					return nil, "", err
				}
				if end != "endset" {
					return nil, "", tmplErr(ErrTemplate, pt.pos, "unclosed {%% set %%}")
				}
				*i++
				n.body = body
				out = append(out, n)
				continue
			}
			if err := p.expectOp("="); err != nil {
				return nil, "", err
			}
			e, err := p.expr()
			if err != nil {
				return nil, "", err
			}
			if p.isOp(",") { // set a = x, y  → tuple
				items := []jexpr{e}
				for p.isOp(",") {
					p.i++
					y, err := p.expr()
					if err != nil {
						return nil, "", err
					}
					items = append(items, y)
				}
				e = eList{items}
			}
			if err := p.done(); err != nil {
				return nil, "", err
			}
			n.e = e
			out = append(out, n)
		case "break":
			out = append(out, jBreak{})
		case "continue":
			out = append(out, jContinue{})
		case "generation":
			body, end, err := parseBlock(parts, i)
			if err != nil {
				return nil, "", err
			}
			if end != "endgeneration" {
				return nil, "", tmplErr(ErrTemplate, pt.pos, "unclosed {%% generation %%}")
			}
			*i++
			out = append(out, body...)
		default:
			return nil, "", tmplErr(ErrUnsupportedTemplate, pt.pos, "statement {%% %s %%}", kw)
		}
	}
	return out, "", nil
}
