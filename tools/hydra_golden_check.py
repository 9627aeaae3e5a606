"""Recomputes the Hydra golden logits (tools/hydra_golden.py) in pure Python from the stored files:
a second, torch-free reading of the format, to check the goldens themselves.
usage: python3 tools/hydra_golden_check.py medusa/testdata/golden"""
import json, struct, math, sys, os
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8+n]); base = 8+n; out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        s, e = v['data_offsets']; raw = b[base+s:base+e]
        fmt = {'F16': 'e', 'F32': 'f', 'I8': 'b', 'I32': 'i'}[v['dtype']]
        vals = list(struct.unpack('<%d%s' % (len(raw)//struct.calcsize(fmt), fmt), raw))
        shape = v['shape']
        if len(shape) == 2: vals = [vals[i*shape[1]:(i+1)*shape[1]] for i in range(shape[0])]
        out[k] = vals
    return out
def W(sd, k):
    w = sd[k]
    if k + '_scale' in sd: w = [[q*s for q in row] for row, s in zip(w, sd[k+'_scale'])]
    return w
def mv(w, x): return [sum(a*b for a, b in zip(r, x)) for r in w]
silu = lambda z: z/(1+math.exp(-z))
g = sys.argv[1]; base = load(os.path.join(g, 'base/model.safetensors')); E = base['model.embed_tokens.weight']
for name in ('hydra', 'hydra-compact', 'hydra-shared'):
    d = os.path.join(g, name); cfg = json.load(open(os.path.join(d, 'config.json'))); sd = load(os.path.join(d, 'hydra_lm_head.safetensors'))
    inp = load(os.path.join(d, 'inputs.safetensors')); lo = load(os.path.join(d, 'logits.safetensors'))
    counts = json.load(open(os.path.join(d, 'token_frequency.json')))['counts']; R = cfg['specgate']['head_vocab']
    ids = sorted(sorted(range(len(counts)), key=lambda t: (-counts[t], t))[:R])
    assert ids == lo['ids'], name
    K, L, H = cfg['hydra_num_heads'], cfg['hydra_num_layers'], cfg['hidden_size']
    P = W(sd, 'hydra_embed_proj.weight') if 'hydra_embed_proj.weight' in sd else None
    c = (lambda x: mv(P, E[x])) if P else (lambda x: E[x])
    worst = 0
    for n, (h, toks) in enumerate(zip(inp['hidden'], inp['tokens'])):
        for i in range(K):
            u = list(h)
            for j in range(i+1): u += c(toks[j])
            pre = [a+b for a, b in zip(mv(W(sd, f'hydra_mlp.{i}.0.linear.weight'), u), sd[f'hydra_mlp.{i}.0.linear.bias'])]
            if f'hydra_mlp.{i}.0.res_connection.weight' in sd:
                base_ = [a+b for a, b in zip(mv(W(sd, f'hydra_mlp.{i}.0.res_connection.weight'), u), sd[f'hydra_mlp.{i}.0.res_connection.bias'])]
            else: base_ = u[:H]
            y = [a+silu(p) for a, p in zip(base_, pre)]
            for j in range(1, L):
                y = [a+silu(p+b) for a, p, b in zip(y, mv(W(sd, f'hydra_mlp.{i}.{j}.linear.weight'), y), sd[f'hydra_mlp.{i}.{j}.linear.bias'])]
            if f'hydra_lm_head.{i}.weight' in sd:
                lg = [a+b for a, b in zip(mv(W(sd, f'hydra_lm_head.{i}.weight'), y), sd[f'hydra_lm_head.{i}.bias'])]
            else: lg = mv([E[t] for t in ids], y)
            worst = max(worst, max(abs(a-b) for a, b in zip(lg, lo[f'logits.{i}'][n])))
    print(name, 'keys', len(sd), 'max |dlogit| vs pure python', worst)
