package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Runtime values: nil (None), undefinedV, bool, int64, float64, string, []any (list/tuple),
// *jdict, *jnamespace, *jloop, jfunc, boundMethod.

type undefinedV struct{ name string }

type jdict struct {
	keys []string
	m    map[string]any
}

func newDict() *jdict { return &jdict{m: map[string]any{}} }

func (d *jdict) set(k string, v any) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

type jnamespace struct{ d *jdict }

type jloop struct {
	index0, length int
	items          []any
}

type jfunc func(args []any, kw map[string]any) (any, error)

type boundMethod struct {
	recv any
	name string
}

// Limits for rendering untrusted templates.
const (
	maxRenderOutput = 16 << 20
	maxRenderSteps  = 1 << 20
	maxRange        = 1 << 20
)

type ctrl int

const (
	ctrlNone ctrl = iota
	ctrlBreak
	ctrlContinue
)

type jenv struct {
	scopes []map[string]any
	out    *strings.Builder
	steps  int
}

func rtErr(format string, args ...any) error {
	return fmt.Errorf("%s: chat_template: %s: %w", fileCfg, fmt.Sprintf(format, args...), ErrTemplate)
}

func unsup(format string, args ...any) error {
	return fmt.Errorf("%s: chat_template: %s: %w", fileCfg, fmt.Sprintf(format, args...), ErrUnsupportedTemplate)
}

func (e *jenv) lookup(n string) any {
	for i := len(e.scopes) - 1; i >= 0; i-- {
		if v, ok := e.scopes[i][n]; ok {
			return v
		}
	}
	return undefinedV{n}
}

func (e *jenv) exec(nodes []jnode) (ctrl, error) {
	for _, n := range nodes {
		e.steps++
		if e.steps > maxRenderSteps {
			return 0, rtErr("more than %d steps", maxRenderSteps)
		}
		if e.out.Len() > maxRenderOutput {
			return 0, rtErr("output exceeds %d bytes", maxRenderOutput)
		}
		switch n := n.(type) {
		case jText:
			e.out.WriteString(n.s)
		case jOutput:
			v, err := e.eval(n.e)
			if err != nil {
				return 0, err
			}
			e.out.WriteString(pyStr(v))
		case jIf:
			done := false
			for i, c := range n.conds {
				v, err := e.eval(c)
				if err != nil {
					return 0, err
				}
				if truthy(v) {
					if c, err := e.exec(n.bodies[i]); err != nil || c != ctrlNone {
						return c, err
					}
					done = true
					break
				}
			}
			if !done && n.els != nil {
				if c, err := e.exec(n.els); err != nil || c != ctrlNone {
					return c, err
				}
			}
		case jFor:
			if err := e.execFor(n); err != nil {
				return 0, err
			}
		case jSet:
			if err := e.execSet(n); err != nil {
				return 0, err
			}
		case jBreak:
			return ctrlBreak, nil
		case jContinue:
			return ctrlContinue, nil
		}
	}
	return ctrlNone, nil
}

func (e *jenv) execSet(n jSet) error {
	var v any
	if n.body != nil {
		saved := e.out
		var b strings.Builder
		e.out = &b
		_, err := e.exec(n.body)
		e.out = saved
		if err != nil {
			return err
		}
		v = b.String()
	} else {
		var err error
		if v, err = e.eval(n.e); err != nil {
			return err
		}
	}
	scope := e.scopes[len(e.scopes)-1]
	switch {
	case n.attr != "":
		ns, ok := e.lookup(n.name).(*jnamespace)
		if !ok {
			return rtErr("cannot assign attribute %q of %s (not a namespace)", n.attr, n.name)
		}
		ns.d.set(n.attr, v)
	case n.names != nil:
		items, err := iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(n.names) {
			return rtErr("cannot unpack %d values into %d names", len(items), len(n.names))
		}
		for i, name := range n.names {
			scope[name] = items[i]
		}
	default:
		scope[n.name] = v
	}
	return nil
}

func (e *jenv) execFor(n jFor) error {
	it, err := e.eval(n.iter)
	if err != nil {
		return err
	}
	items, err := iterate(it)
	if err != nil {
		return err
	}
	scope := map[string]any{}
	e.scopes = append(e.scopes, scope)
	defer func() { e.scopes = e.scopes[:len(e.scopes)-1] }()
	bind := func(x any) error {
		if len(n.vars) == 1 {
			scope[n.vars[0]] = x
			return nil
		}
		parts, err := iterate(x)
		if err != nil {
			return err
		}
		if len(parts) != len(n.vars) {
			return rtErr("cannot unpack %d values into %d loop variables", len(parts), len(n.vars))
		}
		for i, v := range n.vars {
			scope[v] = parts[i]
		}
		return nil
	}
	if n.filter != nil {
		var kept []any
		for _, x := range items {
			if err := bind(x); err != nil {
				return err
			}
			v, err := e.eval(n.filter)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, x)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		if n.els != nil {
			_, err := e.exec(n.els)
			return err
		}
		return nil
	}
	loop := &jloop{length: len(items), items: items}
	for i, x := range items {
		e.steps++
		if e.steps > maxRenderSteps {
			return rtErr("more than %d steps", maxRenderSteps)
		}
		clear(scope)
		loop.index0 = i
		scope["loop"] = loop
		if err := bind(x); err != nil {
			return err
		}
		c, err := e.exec(n.body)
		if err != nil {
			return err
		}
		if c == ctrlBreak {
			break
		}
	}
	return nil
}

func iterate(v any) ([]any, error) {
	switch v := v.(type) {
	case []any:
		return v, nil
	case string:
		out := make([]any, 0, len(v))
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case *jdict:
		out := make([]any, len(v.keys))
		for i, k := range v.keys {
			out[i] = k
		}
		return out, nil
	case undefinedV:
		return nil, nil // Jinja iterates an undefined as empty
	case nil:
		return nil, rtErr("'NoneType' object is not iterable")
	}
	return nil, rtErr("%s is not iterable", typeName(v))
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case undefinedV:
		return "undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case *jdict:
		return "dict"
	case *jnamespace:
		return "namespace"
	}
	return fmt.Sprintf("%T", v)
}

func truthy(v any) bool {
	switch v := v.(type) {
	case nil, undefinedV:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case *jdict:
		return len(v.keys) > 0
	}
	return true
}

func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if strings.Contains(s, "e") {
		// Python: 1e-05, 1e+16
		mant, exp, _ := strings.Cut(s, "e")
		if len(exp) == 2 {
			exp = exp[:1] + "0" + exp[1:]
		}
		s = mant + "e" + exp
	}
	return s
}

// pyStr is Python's str() as Jinja prints values.
func pyStr(v any) string {
	switch v := v.(type) {
	case undefinedV:
		return ""
	case string:
		return v
	}
	return pyRepr(v)
}

func pyRepr(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case undefinedV:
		return ""
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return pyFloat(v)
	case string:
		q := "'"
		if strings.Contains(v, "'") && !strings.Contains(v, "\"") {
			q = "\""
		}
		var b strings.Builder
		b.WriteString(q)
		for _, r := range v {
			switch {
			case r == '\\':
				b.WriteString(`\\`)
			case string(r) == q:
				b.WriteString(`\` + q)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case r < 0x20 || r == 0x7f:
				fmt.Fprintf(&b, `\x%02x`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteString(q)
		return b.String()
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = pyRepr(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *jdict:
		parts := make([]string, len(v.keys))
		for i, k := range v.keys {
			parts[i] = pyRepr(k) + ": " + pyRepr(v.m[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case *jnamespace:
		return "<Namespace " + pyRepr(v.d) + ">"
	}
	return fmt.Sprintf("<%s>", typeName(v))
}

func toFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case int64:
		return float64(v), true
	case float64:
		return v, true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func jeq(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case undefinedV:
		_, ok := b.(undefinedV)
		return ok
	case string:
		s, ok := b.(string)
		return ok && a == s
	case []any:
		l, ok := b.([]any)
		if !ok || len(l) != len(a) {
			return false
		}
		for i := range a {
			if !jeq(a[i], l[i]) {
				return false
			}
		}
		return true
	case *jdict:
		d, ok := b.(*jdict)
		if !ok || len(d.keys) != len(a.keys) {
			return false
		}
		for k, v := range a.m {
			w, ok := d.m[k]
			if !ok || !jeq(v, w) {
				return false
			}
		}
		return true
	case bool, int64, float64:
		x, _ := toFloat(a)
		y, ok := toFloat(b)
		if _, isStr := b.(string); isStr {
			return false
		}
		return ok && x == y
	}
	return a == b
}

func jcompare(op string, a, b any) (bool, error) {
	var c int
	if x, ok := toFloat(a); ok {
		y, ok := toFloat(b)
		if !ok {
			return false, rtErr("cannot compare %s and %s", typeName(a), typeName(b))
		}
		c = cmpF(x, y)
	} else if x, ok := a.(string); ok {
		y, ok := b.(string)
		if !ok {
			return false, rtErr("cannot compare %s and %s", typeName(a), typeName(b))
		}
		c = strings.Compare(x, y)
	} else {
		return false, rtErr("cannot compare %s and %s", typeName(a), typeName(b))
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	}
	return c >= 0, nil
}

func cmpF(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func jin(a, b any) (bool, error) {
	switch b := b.(type) {
	case string:
		s, ok := a.(string)
		if !ok {
			return false, rtErr("'in <string>' requires string as left operand, not %s", typeName(a))
		}
		return strings.Contains(b, s), nil
	case []any:
		for _, x := range b {
			if jeq(a, x) {
				return true, nil
			}
		}
		return false, nil
	case *jdict:
		s, ok := a.(string)
		if !ok {
			return false, nil
		}
		_, has := b.m[s]
		return has, nil
	case undefinedV:
		return false, nil
	}
	return false, rtErr("argument of type %s is not iterable", typeName(b))
}

func (e *jenv) eval(x jexpr) (any, error) {
	switch x := x.(type) {
	case eLit:
		return x.v, nil
	case eName:
		return e.lookup(x.n), nil
	case eList:
		out := make([]any, len(x.items))
		for i, it := range x.items {
			v, err := e.eval(it)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case eDict:
		d := newDict()
		for i := range x.keys {
			k, err := e.eval(x.keys[i])
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, unsup("dict literal with non-string key %s", pyRepr(k))
			}
			v, err := e.eval(x.vals[i])
			if err != nil {
				return nil, err
			}
			d.set(ks, v)
		}
		return d, nil
	case eAttr:
		v, err := e.eval(x.x)
		if err != nil {
			return nil, err
		}
		if u, ok := v.(undefinedV); ok {
			return nil, rtErr("'%s' is undefined (reading .%s)", u.name, x.name)
		}
		return getAttr(v, x.name), nil
	case eIndex:
		v, err := e.eval(x.x)
		if err != nil {
			return nil, err
		}
		k, err := e.eval(x.i)
		if err != nil {
			return nil, err
		}
		if u, ok := v.(undefinedV); ok {
			return nil, rtErr("'%s' is undefined (reading [%s])", u.name, pyRepr(k))
		}
		return getItem(v, k), nil
	case eSlice:
		return e.evalSlice(x)
	case eCall:
		return e.evalCall(x)
	case eFilter:
		return e.evalFilter(x)
	case eTest:
		return e.evalTest(x)
	case eNot:
		v, err := e.eval(x.x)
		return !truthy(v), err
	case eNeg:
		v, err := e.eval(x.x)
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case int64:
			return -v, nil
		case float64:
			return -v, nil
		}
		return nil, rtErr("bad operand type for unary -: %s", typeName(v))
	case eCond:
		c, err := e.eval(x.cond)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return e.eval(x.a)
		}
		if x.b == nil {
			return undefinedV{}, nil
		}
		return e.eval(x.b)
	case eBin:
		return e.evalBin(x)
	}
	return nil, unsup("expression %T", x)
}

func (e *jenv) evalBin(x eBin) (any, error) {
	a, err := e.eval(x.a)
	if err != nil {
		return nil, err
	}
	switch x.op {
	case "and":
		if !truthy(a) {
			return a, nil
		}
		return e.eval(x.b)
	case "or":
		if truthy(a) {
			return a, nil
		}
		return e.eval(x.b)
	}
	b, err := e.eval(x.b)
	if err != nil {
		return nil, err
	}
	switch x.op {
	case "==":
		return jeq(a, b), nil
	case "!=":
		return !jeq(a, b), nil
	case "<", ">", "<=", ">=":
		return jcompare(x.op, a, b)
	case "in":
		return jin(a, b)
	case "notin":
		r, err := jin(a, b)
		return !r, err
	case "~":
		sa, sb := pyStr(a), pyStr(b)
		if len(sa)+len(sb) > maxRenderOutput {
			return nil, rtErr("string longer than %d bytes", maxRenderOutput)
		}
		return sa + sb, nil
	case "+":
		switch av := a.(type) {
		case string:
			if bv, ok := b.(string); ok {
				if len(av)+len(bv) > maxRenderOutput {
					return nil, rtErr("string longer than %d bytes", maxRenderOutput)
				}
				return av + bv, nil
			}
		case []any:
			if bv, ok := b.([]any); ok {
				if len(av)+len(bv) > maxRange {
					return nil, rtErr("list longer than %d items", maxRange)
				}
				return append(append([]any{}, av...), bv...), nil
			}
		}
	}
	return arith(x.op, a, b)
}

func arith(op string, a, b any) (any, error) {
	ai, aInt := a.(int64)
	bi, bInt := b.(int64)
	if _, ok := a.(bool); ok {
		return nil, rtErr("unsupported operand types for %s: %s and %s", op, typeName(a), typeName(b))
	}
	if op == "*" {
		if s, ok := a.(string); ok && bInt {
			if bi <= 0 {
				return "", nil
			}
			if bi > maxRenderOutput || int64(len(s))*bi > maxRenderOutput {
				return nil, rtErr("string longer than %d bytes", maxRenderOutput)
			}
			return strings.Repeat(s, int(bi)), nil
		}
	}
	if aInt && bInt {
		switch op {
		case "+":
			return ai + bi, nil
		case "-":
			return ai - bi, nil
		case "*":
			return ai * bi, nil
		case "//":
			if bi == 0 {
				return nil, rtErr("integer division by zero")
			}
			q := ai / bi
			if (ai%bi != 0) && ((ai < 0) != (bi < 0)) {
				q--
			}
			return q, nil
		case "%":
			if bi == 0 {
				return nil, rtErr("integer modulo by zero")
			}
			m := ai % bi
			if m != 0 && (m < 0) != (bi < 0) {
				m += bi
			}
			return m, nil
		}
	}
	x, ok1 := toFloat(a)
	y, ok2 := toFloat(b)
	if !ok1 || !ok2 {
		if _, isStr := a.(string); isStr && op == "%" {
			return nil, unsup("string %% formatting")
		}
		return nil, rtErr("unsupported operand types for %s: %s and %s", op, typeName(a), typeName(b))
	}
	switch op {
	case "+":
		return x + y, nil
	case "-":
		return x - y, nil
	case "*":
		return x * y, nil
	case "/":
		if y == 0 {
			return nil, rtErr("division by zero")
		}
		return x / y, nil
	case "//":
		if y == 0 {
			return nil, rtErr("division by zero")
		}
		return math.Floor(x / y), nil
	case "%":
		if y == 0 {
			return nil, rtErr("modulo by zero")
		}
		return x - y*math.Floor(x/y), nil
	case "**":
		if aInt && bInt && bi >= 0 {
			return int64(math.Pow(x, y)), nil
		}
		return math.Pow(x, y), nil
	}
	return nil, unsup("operator %q", op)
}

func getAttr(v any, name string) any {
	switch v := v.(type) {
	case *jdict:
		switch name {
		case "get", "items", "keys", "values":
			return boundMethod{v, name}
		}
		if x, ok := v.m[name]; ok {
			return x
		}
	case *jnamespace:
		if x, ok := v.d.m[name]; ok {
			return x
		}
	case *jloop:
		i := v.index0
		switch name {
		case "index0":
			return int64(i)
		case "index":
			return int64(i + 1)
		case "first":
			return i == 0
		case "last":
			return i == v.length-1
		case "length":
			return int64(v.length)
		case "revindex":
			return int64(v.length - i)
		case "revindex0":
			return int64(v.length - i - 1)
		case "previtem":
			if i > 0 {
				return v.items[i-1]
			}
		case "nextitem":
			if i+1 < v.length {
				return v.items[i+1]
			}
		}
	case string:
		switch name {
		case "strip", "lstrip", "rstrip", "lower", "upper", "title", "capitalize", "startswith",
			"endswith", "split", "replace", "find", "count", "join", "splitlines", "isdigit", "isspace":
			return boundMethod{v, name}
		}
	}
	return undefinedV{name}
}

func getItem(v any, k any) any {
	switch v := v.(type) {
	case *jdict:
		if s, ok := k.(string); ok {
			if x, ok := v.m[s]; ok {
				return x
			}
		}
		return undefinedV{pyStr(k)}
	case []any:
		if i, ok := k.(int64); ok {
			if i < 0 {
				i += int64(len(v))
			}
			if i >= 0 && i < int64(len(v)) {
				return v[i]
			}
		}
		return undefinedV{pyStr(k)}
	case string:
		if i, ok := k.(int64); ok {
			rs := []rune(v)
			if i < 0 {
				i += int64(len(rs))
			}
			if i >= 0 && i < int64(len(rs)) {
				return string(rs[i])
			}
		}
		return undefinedV{pyStr(k)}
	}
	if s, ok := k.(string); ok {
		return getAttr(v, s)
	}
	return undefinedV{pyStr(k)}
}

func (e *jenv) evalSlice(x eSlice) (any, error) {
	v, err := e.eval(x.x)
	if err != nil {
		return nil, err
	}
	var items []any
	isStr := false
	switch t := v.(type) {
	case []any:
		items = t
	case string:
		isStr = true
		for _, r := range t {
			items = append(items, string(r))
		}
	default:
		return nil, rtErr("cannot slice %s", typeName(v))
	}
	idx := func(ex jexpr) (int64, bool, error) {
		if ex == nil {
			return 0, false, nil
		}
		v, err := e.eval(ex)
		if err != nil {
			return 0, false, err
		}
		if v == nil {
			return 0, false, nil
		}
		i, ok := v.(int64)
		if !ok {
			return 0, false, rtErr("slice indices must be integers, not %s", typeName(v))
		}
		return i, true, nil
	}
	start, hasStart, err := idx(x.start)
	if err != nil {
		return nil, err
	}
	stop, hasStop, err := idx(x.stop)
	if err != nil {
		return nil, err
	}
	step, hasStep, err := idx(x.step)
	if err != nil {
		return nil, err
	}
	if !hasStep {
		step = 1
	}
	if step == 0 {
		return nil, rtErr("slice step cannot be zero")
	}
	n := int64(len(items))
	norm := func(i int64, has bool, def int64, lo, hi int64) int64 {
		if !has {
			return def
		}
		if i < 0 {
			i += n
		}
		return max(lo, min(hi, i))
	}
	var out []any
	if step > 0 {
		a, b := norm(start, hasStart, 0, 0, n), norm(stop, hasStop, n, 0, n)
		for i := a; i < b; i += step {
			out = append(out, items[i])
		}
	} else {
		a, b := norm(start, hasStart, n-1, -1, n-1), norm(stop, hasStop, -1, -1, n-1)
		for i := a; i > b; i += step {
			out = append(out, items[i])
		}
	}
	if isStr {
		var sb strings.Builder
		for _, s := range out {
			sb.WriteString(s.(string))
		}
		return sb.String(), nil
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

var errRaise = errors.New("raise_exception")

func (e *jenv) evalArgs(args []jexpr, kw []string, kwv []jexpr) ([]any, map[string]any, error) {
	av := make([]any, len(args))
	for i, a := range args {
		v, err := e.eval(a)
		if err != nil {
			return nil, nil, err
		}
		av[i] = v
	}
	var kwm map[string]any
	if len(kw) > 0 {
		kwm = map[string]any{}
		for i, k := range kw {
			v, err := e.eval(kwv[i])
			if err != nil {
				return nil, nil, err
			}
			kwm[k] = v
		}
	}
	return av, kwm, nil
}

func (e *jenv) evalCall(x eCall) (any, error) {
	fn, err := e.eval(x.fn)
	if err != nil {
		return nil, err
	}
	args, kw, err := e.evalArgs(x.args, x.kw, x.kwv)
	if err != nil {
		return nil, err
	}
	switch f := fn.(type) {
	case jfunc:
		return f(args, kw)
	case boundMethod:
		return callMethod(f, args, kw)
	case undefinedV:
		return nil, unsup("call of undefined function %q", f.name)
	}
	return nil, rtErr("%s is not callable", typeName(fn))
}

func argStr(args []any, i int, what string) (string, error) {
	if i >= len(args) {
		return "", rtErr("%s: missing argument %d", what, i+1)
	}
	s, ok := args[i].(string)
	if !ok {
		return "", rtErr("%s: argument %d must be a string, not %s", what, i+1, typeName(args[i]))
	}
	return s, nil
}

func callMethod(m boundMethod, args []any, kw map[string]any) (any, error) {
	switch r := m.recv.(type) {
	case *jdict:
		switch m.name {
		case "get":
			k, err := argStr(args, 0, "get")
			if err != nil {
				return nil, err
			}
			if v, ok := r.m[k]; ok {
				return v, nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return nil, nil
		case "items":
			out := make([]any, len(r.keys))
			for i, k := range r.keys {
				out[i] = []any{k, r.m[k]}
			}
			return out, nil
		case "keys":
			out := make([]any, len(r.keys))
			for i, k := range r.keys {
				out[i] = k
			}
			return out, nil
		case "values":
			out := make([]any, len(r.keys))
			for i, k := range r.keys {
				out[i] = r.m[k]
			}
			return out, nil
		}
	case string:
		switch m.name {
		case "strip", "lstrip", "rstrip":
			cut := func(c rune) bool { return unicode.IsSpace(c) }
			if len(args) > 0 && args[0] != nil {
				chars, err := argStr(args, 0, m.name)
				if err != nil {
					return nil, err
				}
				cut = func(c rune) bool { return strings.ContainsRune(chars, c) }
			}
			switch m.name {
			case "strip":
				return strings.TrimFunc(r, cut), nil
			case "lstrip":
				return strings.TrimLeftFunc(r, cut), nil
			}
			return strings.TrimRightFunc(r, cut), nil
		case "lower":
			return strings.ToLower(r), nil
		case "upper":
			return strings.ToUpper(r), nil
		case "title":
			return pyTitle(r), nil
		case "capitalize":
			return pyCapitalize(r), nil
		case "startswith", "endswith":
			if len(args) == 0 {
				return nil, rtErr("%s: missing argument", m.name)
			}
			cands := []any{args[0]}
			if l, ok := args[0].([]any); ok {
				cands = l
			}
			for _, c := range cands {
				s, ok := c.(string)
				if !ok {
					return nil, rtErr("%s: argument must be a string", m.name)
				}
				if m.name == "startswith" && strings.HasPrefix(r, s) || m.name == "endswith" && strings.HasSuffix(r, s) {
					return true, nil
				}
			}
			return false, nil
		case "split":
			var parts []string
			if len(args) == 0 || args[0] == nil {
				parts = strings.Fields(r)
			} else {
				sep, err := argStr(args, 0, "split")
				if err != nil {
					return nil, err
				}
				if sep == "" {
					return nil, rtErr("split: empty separator")
				}
				n := -1
				if len(args) > 1 {
					if k, ok := args[1].(int64); ok && k >= 0 {
						n = int(k) + 1
					}
				}
				parts = strings.SplitN(r, sep, n)
			}
			out := make([]any, len(parts))
			for i, p := range parts {
				out[i] = p
			}
			return out, nil
		case "splitlines":
			lines := strings.FieldsFunc(r, func(c rune) bool { return c == '\n' })
			out := make([]any, len(lines))
			for i, p := range lines {
				out[i] = p
			}
			return out, nil
		case "replace":
			a, err := argStr(args, 0, "replace")
			if err != nil {
				return nil, err
			}
			b, err := argStr(args, 1, "replace")
			if err != nil {
				return nil, err
			}
			n := -1
			if len(args) > 2 {
				if k, ok := args[2].(int64); ok {
					n = int(k)
				}
			}
			return strings.Replace(r, a, b, n), nil
		case "find":
			s, err := argStr(args, 0, "find")
			if err != nil {
				return nil, err
			}
			i := strings.Index(r, s)
			if i < 0 {
				return int64(-1), nil
			}
			return int64(utf8.RuneCountInString(r[:i])), nil
		case "count":
			s, err := argStr(args, 0, "count")
			if err != nil {
				return nil, err
			}
			return int64(strings.Count(r, s)), nil
		case "join":
			if len(args) == 0 {
				return nil, rtErr("join: missing argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				s, ok := it.(string)
				if !ok {
					return nil, rtErr("join: sequence item %d: expected str, %s found", i, typeName(it))
				}
				parts[i] = s
			}
			return strings.Join(parts, r), nil
		case "isdigit":
			return r != "" && strings.IndexFunc(r, func(c rune) bool { return !unicode.IsDigit(c) }) < 0, nil
		case "isspace":
			return r != "" && strings.IndexFunc(r, func(c rune) bool { return !unicode.IsSpace(c) }) < 0, nil
		}
	}
	return nil, unsup("method %s.%s", typeName(m.recv), m.name)
}

func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, w := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + strings.ToLower(s[w:])
}

func pyTitle(s string) string {
	var b strings.Builder
	prev := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prev {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
			prev = true
		} else {
			b.WriteRune(r)
			prev = false
		}
	}
	return b.String()
}

func (e *jenv) evalTest(x eTest) (any, error) {
	v, err := e.eval(x.x)
	if err != nil {
		return nil, err
	}
	args, _, err := e.evalArgs(x.args, nil, nil)
	if err != nil {
		return nil, err
	}
	var r bool
	switch x.name {
	case "defined":
		_, u := v.(undefinedV)
		r = !u
	case "undefined":
		_, r = v.(undefinedV)
	case "none":
		r = v == nil
	case "string":
		_, r = v.(string)
	case "number":
		switch v.(type) {
		case int64, float64:
			r = true
		}
	case "integer":
		_, r = v.(int64)
	case "float":
		_, r = v.(float64)
	case "boolean":
		_, r = v.(bool)
	case "true":
		r = v == true
	case "false":
		r = v == false
	case "mapping":
		_, r = v.(*jdict)
	case "sequence", "iterable":
		switch v.(type) {
		case []any, string, *jdict:
			r = true
		}
	case "even", "odd":
		i, ok := v.(int64)
		if !ok {
			return nil, rtErr("test %s on %s", x.name, typeName(v))
		}
		r = (i%2 == 0) == (x.name == "even")
	case "divisibleby":
		i, ok1 := v.(int64)
		if len(args) != 1 {
			return nil, rtErr("test divisibleby needs one argument")
		}
		d, ok2 := args[0].(int64)
		if !ok1 || !ok2 || d == 0 {
			return nil, rtErr("test divisibleby on %s", typeName(v))
		}
		r = i%d == 0
	case "eq", "equalto", "==", "sameas", "ne", "!=", "lt", "<", "gt", ">", "le", "<=", "ge", ">=", "in":
		if len(args) != 1 {
			return nil, rtErr("test %s needs one argument", x.name)
		}
		switch x.name {
		case "eq", "equalto", "==", "sameas":
			r = jeq(v, args[0])
		case "ne", "!=":
			r = !jeq(v, args[0])
		case "in":
			if r, err = jin(v, args[0]); err != nil {
				return nil, err
			}
		default:
			op := map[string]string{"lt": "<", "gt": ">", "le": "<=", "ge": ">="}[x.name]
			if op == "" {
				op = x.name
			}
			if r, err = jcompare(op, v, args[0]); err != nil {
				return nil, err
			}
		}
	default:
		return nil, unsup("test %q (offset %d)", x.name, x.pos)
	}
	return r != x.neg, nil
}

func (e *jenv) evalFilter(x eFilter) (any, error) {
	v, err := e.eval(x.x)
	if err != nil {
		return nil, err
	}
	args, kw, err := e.evalArgs(x.args, x.kw, x.kwv)
	if err != nil {
		return nil, err
	}
	return applyFilter(x.name, x.pos, v, args, kw)
}

func applyFilter(name string, pos int, v any, args []any, kw map[string]any) (any, error) {
	switch name {
	case "trim":
		return callMethod(boundMethod{pyStr(v), "strip"}, args, nil)
	case "upper":
		return strings.ToUpper(pyStr(v)), nil
	case "lower":
		return strings.ToLower(pyStr(v)), nil
	case "capitalize":
		return pyCapitalize(pyStr(v)), nil
	case "title":
		return pyTitle(pyStr(v)), nil
	case "string":
		return pyStr(v), nil
	case "safe", "e", "escape":
		if name != "safe" {
			return nil, unsup("filter %q (offset %d)", name, pos)
		}
		return v, nil
	case "length", "count":
		switch t := v.(type) {
		case string:
			return int64(utf8.RuneCountInString(t)), nil
		case []any:
			return int64(len(t)), nil
		case *jdict:
			return int64(len(t.keys)), nil
		case undefinedV:
			return int64(0), nil
		}
		return nil, rtErr("object of type %s has no len()", typeName(v))
	case "default", "d":
		def := any("")
		if len(args) > 0 {
			def = args[0]
		}
		boolean := len(args) > 1 && truthy(args[1])
		if b, ok := kw["boolean"]; ok {
			boolean = truthy(b)
		}
		if _, u := v.(undefinedV); u || (boolean && !truthy(v)) {
			return def, nil
		}
		return v, nil
	case "tojson":
		indent := -1
		if len(args) > 0 {
			if i, ok := args[0].(int64); ok {
				indent = int(i)
			}
		}
		if i, ok := kw["indent"].(int64); ok {
			indent = int(i)
		}
		sortKeys := truthy(kw["sort_keys"])
		var b strings.Builder
		if err := pyJSON(&b, v, indent, sortKeys, 0); err != nil {
			return nil, err
		}
		return b.String(), nil
	case "first", "last":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefinedV{name}, nil
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "join":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		sep := ""
		if len(args) > 0 {
			sep = pyStr(args[0])
		}
		attr, _ := kw["attribute"].(string)
		parts := make([]string, len(items))
		for i, it := range items {
			if attr != "" {
				it = getItem(it, attr)
			}
			parts[i] = pyStr(it)
		}
		return strings.Join(parts, sep), nil
	case "list":
		items, err := iterate(v)
		return append([]any{}, items...), err
	case "reverse":
		if s, ok := v.(string); ok {
			rs := []rune(s)
			for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
				rs[i], rs[j] = rs[j], rs[i]
			}
			return string(rs), nil
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		for i, it := range items {
			out[len(items)-1-i] = it
		}
		return out, nil
	case "items":
		d, ok := v.(*jdict)
		if !ok {
			return nil, rtErr("filter items on %s", typeName(v))
		}
		return callMethod(boundMethod{d, "items"}, nil, nil)
	case "int":
		switch t := v.(type) {
		case int64:
			return t, nil
		case float64:
			return int64(t), nil
		case bool:
			if t {
				return int64(1), nil
			}
			return int64(0), nil
		case string:
			i, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
			if err != nil {
				return int64(0), nil
			}
			return i, nil
		}
		return int64(0), nil
	case "float":
		f, ok := toFloat(v)
		if !ok {
			if s, isS := v.(string); isS {
				if g, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
					return g, nil
				}
			}
			return 0.0, nil
		}
		return f, nil
	case "selectattr", "rejectattr", "select", "reject":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		attr := ""
		rest := args
		if name == "selectattr" || name == "rejectattr" {
			if len(args) == 0 {
				return nil, rtErr("filter %s needs an attribute", name)
			}
			attr = pyStr(args[0])
			rest = args[1:]
		}
		want := name == "selectattr" || name == "select"
		out := []any{}
		for _, it := range items {
			val := it
			if attr != "" {
				val = getItem(it, attr)
			}
			var ok bool
			if len(rest) == 0 {
				ok = truthy(val)
			} else {
				tn := pyStr(rest[0])
				env := &jenv{scopes: []map[string]any{{"v": val}}, out: &strings.Builder{}}
				targs := make([]jexpr, 0, len(rest)-1)
				for _, a := range rest[1:] {
					targs = append(targs, eLit{a})
				}
				r, err := env.evalTest(eTest{x: eName{"v"}, name: tn, args: targs, pos: pos})
				if err != nil {
					return nil, err
				}
				ok = r.(bool)
			}
			if ok == want {
				out = append(out, it)
			}
		}
		return out, nil
	case "map":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		attr, ok := kw["attribute"].(string)
		if !ok {
			if len(args) == 0 {
				return nil, rtErr("filter map needs attribute= or a filter name")
			}
			fname := pyStr(args[0])
			out := make([]any, len(items))
			for i, it := range items {
				r, err := applyFilter(fname, pos, it, args[1:], nil)
				if err != nil {
					return nil, err
				}
				out[i] = r
			}
			return out, nil
		}
		out := make([]any, len(items))
		for i, it := range items {
			out[i] = getItem(it, attr)
			if _, u := out[i].(undefinedV); u {
				if d, has := kw["default"]; has {
					out[i] = d
				}
			}
		}
		return out, nil
	case "replace":
		s := pyStr(v)
		a, err := argStr(args, 0, "replace")
		if err != nil {
			return nil, err
		}
		b, err := argStr(args, 1, "replace")
		if err != nil {
			return nil, err
		}
		return strings.ReplaceAll(s, a, b), nil
	case "abs":
		switch t := v.(type) {
		case int64:
			if t < 0 {
				return -t, nil
			}
			return t, nil
		case float64:
			return math.Abs(t), nil
		}
		return nil, rtErr("filter abs on %s", typeName(v))
	case "unique", "sort", "dictsort":
		if name == "sort" {
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			out := append([]any{}, items...)
			var serr error
			sort.SliceStable(out, func(i, j int) bool {
				lt, err := jcompare("<", out[i], out[j])
				if err != nil {
					serr = err
				}
				return lt
			})
			return out, serr
		}
	}
	return nil, unsup("filter %q (offset %d)", name, pos)
}

// pyJSON writes v like Python's json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=...)
// (transformers' tojson override). indent < 0: compact with ", " and ": " separators.
func pyJSON(b *strings.Builder, v any, indent int, sortKeys bool, depth int) error {
	if depth > 64 {
		return rtErr("tojson: nesting deeper than 64")
	}
	nl := func(d int) {
		if indent >= 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	itemSep := ", "
	if indent >= 0 {
		itemSep = ","
	}
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(t, 10))
	case float64:
		switch {
		case math.IsNaN(t):
			b.WriteString("NaN")
		case math.IsInf(t, 1):
			b.WriteString("Infinity")
		case math.IsInf(t, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloat(t))
		}
	case string:
		b.WriteByte('"')
		for _, r := range t {
			switch r {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if r < 0x20 {
					fmt.Fprintf(b, `\u%04x`, r)
				} else {
					b.WriteRune(r)
				}
			}
		}
		b.WriteByte('"')
	case []any:
		if len(t) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, x := range t {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(depth + 1)
			if err := pyJSON(b, x, indent, sortKeys, depth+1); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte(']')
	case *jdict, *jnamespace:
		d, ok := t.(*jdict)
		if !ok {
			d = t.(*jnamespace).d
		}
		if len(d.keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.keys
		if sortKeys {
			keys = append([]string{}, keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(depth + 1)
			if err := pyJSON(b, k, indent, sortKeys, depth+1); err != nil {
				return err
			}
			b.WriteString(": ")
			if err := pyJSON(b, d.m[k], indent, sortKeys, depth+1); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte('}')
	default:
		return rtErr("tojson: object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// globals are the functions transformers' chat environment provides.
func globals() map[string]any {
	return map[string]any{
		"raise_exception": jfunc(func(args []any, _ map[string]any) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg = pyStr(args[0])
			}
			return nil, fmt.Errorf("%s: chat_template: raise_exception: %s: %w: %w", fileCfg, msg, errRaise, ErrTemplate)
		}),
		"namespace": jfunc(func(args []any, kw map[string]any) (any, error) {
			ns := &jnamespace{d: newDict()}
			for _, a := range args {
				if d, ok := a.(*jdict); ok {
					for _, k := range d.keys {
						ns.d.set(k, d.m[k])
					}
				}
			}
			keys := make([]string, 0, len(kw))
			for k := range kw {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				ns.d.set(k, kw[k])
			}
			return ns, nil
		}),
		"range": jfunc(func(args []any, _ map[string]any) (any, error) {
			var a, b, s int64 = 0, 0, 1
			ints := make([]int64, len(args))
			for i, x := range args {
				v, ok := x.(int64)
				if !ok {
					return nil, rtErr("range: argument must be an integer, not %s", typeName(x))
				}
				ints[i] = v
			}
			switch len(ints) {
			case 1:
				b = ints[0]
			case 2:
				a, b = ints[0], ints[1]
			case 3:
				a, b, s = ints[0], ints[1], ints[2]
			default:
				return nil, rtErr("range: want 1 to 3 arguments")
			}
			if s == 0 {
				return nil, rtErr("range: step must not be zero")
			}
			var out []any
			for i := a; (s > 0 && i < b) || (s < 0 && i > b); i += s {
				if len(out) >= maxRange {
					return nil, rtErr("range longer than %d", maxRange)
				}
				out = append(out, i)
			}
			if out == nil {
				out = []any{}
			}
			return out, nil
		}),
		"strftime_now": jfunc(func(args []any, _ map[string]any) (any, error) {
			f, err := argStr(args, 0, "strftime_now")
			if err != nil {
				return nil, err
			}
			return strftime(time.Now(), f), nil
		}),
		"dict": jfunc(func(args []any, kw map[string]any) (any, error) {
			d := newDict()
			keys := make([]string, 0, len(kw))
			for k := range kw {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				d.set(k, kw[k])
			}
			return d, nil
		}),
	}
}

func strftime(t time.Time, f string) string {
	r := strings.NewReplacer("%Y", t.Format("2006"), "%m", t.Format("01"), "%d", t.Format("02"),
		"%B", t.Format("January"), "%b", t.Format("Jan"), "%H", t.Format("15"), "%M", t.Format("04"),
		"%S", t.Format("05"), "%A", t.Format("Monday"), "%a", t.Format("Mon"), "%%", "%")
	return r.Replace(f)
}
