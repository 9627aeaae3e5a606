"""Train Medusa heads for a target (Medusa-1 recipe, self-distillation), several variants at once.

The base model stays frozen. Prompts are cut from our corpus (tools/data/prepare.py: Go source,
English, chat; 2% of the documents held out; prompts drawn 50% Go / 30% English / 20% chat by bytes,
half of them one line, like the bench prompts). The base model continues every prompt for up to
--gen tokens: greedily, and for --sample-frac of the prompts by sampling at --sample-temp (more
varied contexts). Only the token ids are kept: every training step runs the frozen base over its
batch (final-normed hidden rows and logits), so the data can be far larger than GPU memory would
hold as hidden states. Head k (k = 0..K-1) reads the hidden row at position t and learns the base
model's own greedy choice at t+k+2 given the sequence: argmax of the base logits at row t+k+1
(for greedy continuations that is the token itself; for sampled ones it is what verification
would accept after that prefix). Loss per head weighted 0.8^k as in the Medusa paper.

Variants (--variants, trained side by side on the same batches, each with its own AdamW):
  s<L>     L distinct ResBlocks per head, vocabulary projection = the base lm_head (frozen,
           shared): what we ship (a few MB). Hard labels (cross-entropy).
  s<L>kd   the same with 0.5 CE + 0.5 KL(base distribution at t+k+1 || head) (soft labels).
  o<L>     L ResBlocks + an own trainable Linear(hidden, vocab) per head initialised from the
           lm_head (the reference's current layout; 5 x V x H more parameters): for comparison.
  f<L>     L ResBlocks + an own trainable Linear(hidden, N) per head over the N = --head-vocab most
           frequent tokens of the training continuations (FR-Spec; ties by lower id, rows in id
           order), initialised from those lm_head rows; labels outside them are skipped in the loss
           and count as misses in the held-out accuracy. Exported with the projection as
           {head}.{L}.weight [N][hidden] and config specgate.head_vocab = N (package medusa reads
           the rows as the N most frequent tokens of token_frequency.json).
The reference builds a head as [ResBlock(H)] * L (one block repeated); we train L distinct blocks
(keys {head}.{layer}.linear.*, which the reference's state-dict layout holds either way).

Hydra variants (Ankner et al. 2024; directory format: HYDRA-FORMAT.md of the session, issue #17):
head i at position t reads h_t and c(x_{t+1}), ..., c(x_{t+i+1}) -- the sequence's actual tokens
(x_{t+1} is the pending token at inference, the rest the tree path below it) -- and learns the same
label as Medusa head i (argmax of the base logits at row t+i+1). Teacher-forced ranks of that label
are the ranks given the right prefix, so expected tau and the greedy tree come from them exactly as
for Medusa (a path is right iff every node's rank matches given the right prefix).
  hc<r>l<L><p>[N]  compact layout: hydra_embed_proj [r, H] (c(x) = P E[x], E = the target's input
                   embeddings, frozen), block 0 of head i: y = h + SiLU(W [h, c(x_1..x_{i+1})] + b),
                   then L-1 ResBlocks; projection p = f: own Linear(H, N) with bias over the N most
                   frequent tokens (N defaults to --head-vocab), initialised from those lm_head rows;
                   p = s: the target's lm_head restricted to those rows, frozen (share_lm_head: true).
  hrl<L><p>[N]     the reference layout (zankner/Hydra HydraMLP): c(x) = E[x] (r = H), block 0 also
                   has res_connection = Linear(H + (i+1)H, H), initialised to [I 0] with zero bias (the
                   reference initialises it randomly; identity on h trains faster from a frozen base).
Exported as hydra_lm_head.safetensors (fp16) + config.json (architectures HydraModel) +
head_token_frequency.json; the size line prints the bytes of the int8 file tools/medusaquant would
write (I8 weights + F32 row scales, F16 biases).

Held-out: every prompt of --exclude-prompts (medusa/testdata/heldout_prompts.txt, the prompts the
Go side measures tau on) is kept out: no training prompt equals one, and no training document
contains one of >= 16 characters unless that line is boilerplate found in more than
--exclude-max-docs documents (the Go license header: dropping those dropped nearly all Go files).

usage: PYTHONUNBUFFERED=1 python3 tools/train/medusa.py --corpus corpus.tar.xz \
          --target models/specgate-target --work /tmp/m [--variants s1,s2,s2kd,o1] [--max-seconds 200]
Writes WORK/export/<variant>/ for every shared variant (config.json with a tree tuned on held-out
continuations, medusa_lm_head.safetensors fp16, token_frequency.json, loss.csv, loss.png,
train_summary.json), WORK/summary.json, and with --save-gen the generated token ids (for
tools/train/distill_gen.py).
"""
import argparse, bisect, csv, json, math, os, random, re, shutil, subprocess, tarfile, time
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

RS = "\n\x1e\n"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class ResBlock(nn.Module):
    """Medusa's residual block: x + SiLU(Linear(x)), weight zero-initialised (identity at start)."""

    def __init__(self, hidden):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.act(self.linear(x))


class Block0(nn.Module):
    """Hydra head i's first block over u = [h, c(x_1), ..., c(x_{i+1})] (length H + (i+1) r):
    y = R(u) + SiLU(W u + b); R = res_connection (reference layout) or h itself (compact)."""

    def __init__(self, hidden, cols, ref):
        super().__init__()
        self.hidden = hidden
        self.linear = nn.Linear(cols, hidden)
        nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()
        if ref:
            self.res_connection = nn.Linear(cols, hidden)
            with torch.no_grad():
                self.res_connection.weight.zero_()
                self.res_connection.weight[:, :hidden] = torch.eye(hidden)
                self.res_connection.bias.zero_()
        else:
            self.res_connection = None

    def forward(self, u):
        base = self.res_connection(u) if self.res_connection is not None else u[:, : self.hidden]
        return base + self.act(self.linear(u))


class HydraHeads(nn.Module):
    """K Hydra heads; state-dict keys are the directory format's (hydra_embed_proj.weight,
    hydra_mlp.{i}.{j}.linear.*, hydra_mlp.{i}.0.res_connection.*, hydra_lm_head.{i}.*)."""

    def __init__(self, K, L, hidden, r, ref, rows_weight, own, embed, embed_scale):
        super().__init__()
        self.K, self.hidden, self.ref, self.own = K, hidden, ref, own
        self.r = hidden if ref else r
        self.embed = embed  # the target's input embeddings [V, H], frozen (a plain attribute: not saved)
        if not ref:
            self.hydra_embed_proj = nn.Linear(hidden, r, bias=False)
            # c = P E[x] with entries of about the hidden rows' RMS: embed_scale = RMS(h) / RMS(E)
            # (Block0's W starts at zero, so P must not: its gradient flows through W)
            nn.init.normal_(self.hydra_embed_proj.weight, std=embed_scale / math.sqrt(hidden))
        self.hydra_mlp = nn.ModuleList([
            nn.ModuleList([Block0(hidden, hidden + (i + 1) * self.r, ref)] + [ResBlock(hidden) for _ in range(L - 1)])
            for i in range(K)])
        if own:
            self.hydra_lm_head = nn.ModuleList([nn.Linear(hidden, rows_weight.size(0)) for _ in range(K)])
            with torch.no_grad():
                for lin in self.hydra_lm_head:
                    lin.weight[:] = rows_weight
                    lin.bias.zero_()
        else:
            self.rows = rows_weight  # frozen, not saved: the target's lm_head rows

    def head(self, i, h, toks):
        """h [N, H], toks [N, i+1] (x_1..x_{i+1}) -> logits [N, rows]."""
        e = self.embed[toks]  # [N, i+1, H]
        c = e if self.ref else self.hydra_embed_proj(e)
        u = torch.cat([h, c.reshape(c.size(0), -1).to(h.dtype)], 1)  # h, c(x_1), c(x_2), ...
        blocks = self.hydra_mlp[i]
        y = blocks[0](u)
        for b in blocks[1:]:
            y = b(y)
        return self.hydra_lm_head[i](y) if self.own else F.linear(y, self.rows)


HYDRA_RE = re.compile(r"^h(?:c(\d+)|(r))l(\d+)([sf])(\d*)$")


def parse_hydra(v):
    """None for a Medusa variant, else dict(ref, r, L, own, rows)."""
    m = HYDRA_RE.match(v)
    if not m:
        return None
    return dict(ref=m.group(2) == "r", r=int(m.group(1)) if m.group(1) else None, L=int(m.group(3)),
                own=m.group(4) == "f", rows=int(m.group(5)) if m.group(5) else None)


def int8_bytes(sd):
    """Bytes of the weights in the int8 form (2-D: I8 + F32 scale per row; 1-D: F16)."""
    n = 0
    for t in sd.values():
        n += t.numel() + 4 * t.size(0) if t.dim() == 2 else 2 * t.numel()
    return n


def parse_variant(v):
    own = v.startswith("o") or v.startswith("f")
    kd = v.endswith("kd")
    L = int(v[1:-2] if kd else v[1:])
    return own, L, kd


def make_heads(K, L, hidden, vocab, lm_head_weight, own):
    """own: an own projection of lm_head_weight's rows (all of them, or the FR-Spec subset)."""
    mods = []
    for _ in range(K):
        layers = [ResBlock(hidden) for _ in range(L)]
        if own:
            lin = nn.Linear(hidden, lm_head_weight.size(0), bias=False)
            lin.weight.data[:] = lm_head_weight
            layers.append(lin)
        mods.append(nn.Sequential(*layers))
    return nn.ModuleList(mods)


def unescape(s):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(n, "\\" + n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def read_prompts(path):
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("#") or "\t" not in line:
            continue
        out.append(unescape(line.split("\t", 1)[1]))
    return out


def greedy_tree(ranks, n_nodes):
    """ranks: list of per-position tuples (rank of the label under head k, -1 = beyond max rank).
    Counts every path prefix up to the first miss; the tree is the n most frequent paths
    (a child is never more frequent than its parent, ties by depth: parents first). Returns
    (paths, tau list: expected tokens per step for tree sizes 1..n)."""
    counts = {}
    for r in ranks:
        p = ()
        for x in r:
            if x < 0:
                break
            p = p + (x,)
            counts[p] = counts.get(p, 0) + 1
    order = sorted(counts.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))[:n_nodes]
    N = max(1, len(ranks))
    tau, acc, paths = [], 1.0, []
    for p, c in order:
        acc += c / N
        tau.append(acc)
        paths.append(list(p))
    return paths, tau


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--base-name", default="models/specgate-target")
    ap.add_argument("--exclude-prompts", default="")
    ap.add_argument("--exclude-max-docs", type=int, default=3,
                    help="drop the training documents holding a held-out prompt only when it is in at most this many")
    ap.add_argument("--variants", default="s1,s2,s2kd,o1")
    ap.add_argument("--heads", type=int, default=5)
    ap.add_argument("--gen", type=int, default=128, help="tokens generated per prompt")
    ap.add_argument("--prompts", type=int, default=300000)
    ap.add_argument("--val-prompts", type=int, default=4096)
    ap.add_argument("--gen-batch", type=int, default=8192)
    ap.add_argument("--sample-frac", type=float, default=0.25)
    ap.add_argument("--sample-temp", type=float, default=0.8)
    ap.add_argument("--batch", type=int, default=256, help="sequences per training step")
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--max-seconds", type=float, default=200, help="training-loop budget")
    ap.add_argument("--gen-seconds", type=float, default=100, help="generation budget")
    ap.add_argument("--save-gen", default="", help="torch.save the generated ids here (for distill_gen.py)")
    ap.add_argument("--tree-nodes", type=int, default=64)
    ap.add_argument("--max-rank", type=int, default=10)
    ap.add_argument("--head-vocab", type=int, default=2048, help="rows of the f<L> variants' own projection")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--val-seconds", type=float, default=25, help="held-out generation budget")
    ap.add_argument("--results", default="", help="also write summary.json, loss.csv and one export-<variant>.tar per exported variant here (the device call's $OUT)")
    ap.add_argument("--eval-rows", type=int, default=0,
                    help="also evaluate every variant whose projection has more rows restricted to this many most frequent tokens (a vocab limit at inference)")
    ap.add_argument("--smoke", action="store_true", help="tiny run of every stage (a crash shows in seconds)")
    a = ap.parse_args()
    if a.smoke:
        a.prompts, a.val_prompts, a.gen, a.gen_seconds, a.val_seconds = 3000, 256, 24, 3, 3
        a.steps, a.max_seconds, a.eval_every, a.batch, a.gen_batch = 40, 10, 20, 64, 1024
    t0 = time.time()
    dev = "cuda"
    torch.manual_seed(17)
    rng = random.Random(17)
    W = a.work
    raw = os.path.join(W, "raw")
    os.makedirs(raw, exist_ok=True)
    subprocess.check_call(["tar", "xJf", os.path.abspath(a.corpus), "-C", raw])
    docs = []
    for n in ("go", "english", "chat"):
        docs += [(n, d) for d in open(os.path.join(raw, n + ".txt"), encoding="utf-8").read().split(RS) if d.strip()]
    shutil.rmtree(raw)
    rng.shuffle(docs)
    n_val = max(200, len(docs) // 50)
    val_docs, train_docs = docs[:n_val], docs[n_val:]
    excl = set()
    if a.exclude_prompts:
        excl_list = read_prompts(a.exclude_prompts)
        excl = set(excl_list)
        # drop every training document that contains a long held-out prompt
        offs, cat, o = [], [], 0
        for _, d in train_docs:
            offs.append(o)
            cat.append(d)
            o += len(d) + 1
        big = "\x00".join(cat)
        bad, boiler = set(), 0
        for p in excl_list:
            if len(p) < 16:
                continue
            hits = set()
            i = big.find(p)
            while i >= 0:
                hits.add(bisect.bisect_right(offs, i) - 1)
                i = big.find(p, i + 1)
            # a line found in many documents is boilerplate (the Go license header is in nearly
            # every Go file): dropping those documents dropped 1647 of 1796 Go files in the run of
            # 2026-11-23 21:50. Such prompts are kept out only as training prompts (below).
            if len(hits) > a.exclude_max_docs:
                boiler += 1
                continue
            bad |= hits
        train_docs = [d for j, d in enumerate(train_docs) if j not in bad]
        print(f"held-out prompts {len(excl_list)}: dropped {len(bad)} training documents containing one "
              f"({boiler} boilerplate prompts in more than {a.exclude_max_docs} documents: not dropped)", flush=True)
    tok = Tokenizer.from_file(os.path.join(a.target, "tokenizer.json"))
    bos = tok.token_to_id("<|begin_of_text|>")
    eos = {tok.token_to_id("<|end_of_text|>"), tok.token_to_id("<|im_end|>")}
    print(f"docs train {len(train_docs)} held-out {len(val_docs)} {time.time()-t0:.0f}s", flush=True)

    MIX = {"go": 0.5, "english": 0.3, "chat": 0.2}  # the bench prompts are half Go lines

    def by_kind(dset):
        out = {}
        for kind, d in dset:
            ds, cum = out.setdefault(kind, ([], []))
            ds.append(d)
            cum.append((cum[-1] if cum else 0) + len(d))
        return out

    def make_prompts(dset, n, r):
        kinds = by_kind(dset)
        names = [k for k in MIX if k in kinds]
        texts = []
        for _ in range(n):
            kind = r.choices(names, weights=[MIX[k] for k in names])[0]
            ds, cum = kinds[kind]
            pos = r.randrange(cum[-1])
            di = bisect.bisect_right(cum, pos)
            d = ds[di]
            off = pos - (cum[di - 1] if di else 0)
            st = d.rfind("\n", 0, off) + 1
            t = d[st:st + 400]
            if r.random() < 0.5 and "\n" in t.strip("\n"):
                t = t.strip("\n").split("\n")[0]
            texts.append((kind, t))
        enc = tok.encode_batch([t for _, t in texts], add_special_tokens=False)
        out, skipped = [], 0
        for (kind, t), e in zip(texts, enc):
            ids = e.ids
            if len(ids) < 2:
                continue
            L = min(len(ids), r.choice([2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48]))
            cut = e.offsets[L - 1][1]
            if excl and t[:cut] in excl:
                skipped += 1
                continue
            out.append((kind, [bos] + ids[:L], cut, t))
        if skipped:
            print(f"skipped {skipped} prompts equal to held-out prompts", flush=True)
        return out

    target = LlamaForCausalLM.from_pretrained(a.target, dtype=torch.float32).to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    H, V = target.config.hidden_size, target.config.vocab_size
    lm_w = target.lm_head.weight.detach()

    @torch.no_grad()
    def continue_batch(batch_ids, G, temp):
        x = torch.tensor(batch_ids, device=dev)
        out = target(input_ids=x, use_cache=True, logits_to_keep=1)

        def pick(lg):
            if temp <= 0:
                return lg.argmax(-1)
            return torch.multinomial(F.softmax(lg.float() / temp, -1), 1)[:, 0]
        pkv, nxt = out.past_key_values, pick(out.logits[:, -1])
        toks = [x, nxt[:, None]]
        for _ in range(G - 1):
            out = target(input_ids=nxt[:, None], past_key_values=pkv, use_cache=True)
            pkv, nxt = out.past_key_values, pick(out.logits[:, -1])
            toks.append(nxt[:, None])
        return torch.cat(toks, 1)

    def build(dset, n, r, budget, sample_frac):
        prompts = make_prompts(dset, n, r)
        by_len = {}
        for p in prompts:
            by_len.setdefault(len(p[1]), []).append(p)
        groups = []
        for L, ps in sorted(by_len.items()):
            for i in range(0, len(ps), a.gen_batch):
                groups.append((L, ps[i:i + a.gen_batch]))
        r.shuffle(groups)
        seqs, plen, kept, samp = [], [], [], []
        t1 = time.time()
        for gi, (L, ps) in enumerate(groups):
            if time.time() - t1 > budget:
                print(f"generation budget reached: {len(kept)} of {len(prompts)} prompts", flush=True)
                break
            temp = a.sample_temp if r.random() < sample_frac else 0.0
            s = continue_batch([p[1] for p in ps], a.gen, temp)
            seqs.append(s); plen.append(torch.full((len(ps),), L, device=dev))
            samp.append(torch.full((len(ps),), temp > 0, device=dev))
            kept += ps
        T = max(s.size(1) for s in seqs)
        S = torch.zeros(len(kept), T, dtype=torch.int64, device=dev)
        n_ = torch.zeros(len(kept), dtype=torch.int64, device=dev)
        i = 0
        for s in seqs:
            b, t = s.shape
            S[i:i + b, :t] = s; n_[i:i + b] = t
            i += b
        P = torch.cat(plen)
        pos = torch.arange(T, device=dev)[None, :]
        gen_eos = torch.zeros_like(S, dtype=torch.bool)
        for e in eos:
            gen_eos |= (S == e)
        gen_eos &= pos >= P[:, None]
        first = torch.where(gen_eos.any(1), gen_eos.float().argmax(1), n_ - 1)
        E = first + 1  # exclusive: the valid tokens end at the first generated EOS (included)
        Sm = torch.cat(samp)
        print(f"built {len(kept)} sequences ({int(Sm.sum())} sampled), {int((E - P).sum())} generated tokens "
              f"in {time.time()-t1:.0f}s", flush=True)
        return S, P, E, Sm, kept

    vrng, trng = random.Random(6), random.Random(5)
    Sv, Pv, Ev, Smv, vkept = build(val_docs, a.val_prompts, vrng, a.val_seconds, 0.0)  # held-out: greedy only
    St, Pt, Et, Smt, _ = build(train_docs, a.prompts, trng, a.gen_seconds, a.sample_frac)
    if a.save_gen:
        torch.save({"St": St.to(torch.int16).cpu(), "Pt": Pt.cpu(), "Et": Et.cpu(), "Sv": Sv.to(torch.int16).cpu(),
                    "Pv": Pv.cpu(), "Ev": Ev.cpu()}, a.save_gen + ".tmp")
        os.replace(a.save_gen + ".tmp", a.save_gen)
        print(f"saved generated ids to {a.save_gen}", flush=True)
    print(f"data ready {time.time()-t0:.0f}s; GPU memory {torch.cuda.memory_allocated()/1e9:.1f} GB", flush=True)

    pos = torch.arange(St.size(1), device=dev)[None, :]
    genmask = (pos >= Pt[:, None]) & (pos < Et[:, None]) & ~Smt[:, None]
    counts = torch.bincount(St[genmask], minlength=V).tolist()
    # FR-Spec rows: the head_vocab most frequent tokens (ties by lower id), in id order: what
    # medusa.frequentTokens picks from token_frequency.json.
    NV = min(a.head_vocab, V)
    by_freq = sorted(range(V), key=lambda i: (-counts[i], i))
    fr_sets = {}  # N -> (row ids in id order, row_of: token -> row or -1, coverage)

    def fr_rows(n):
        n = min(n, V)
        if n not in fr_sets:
            ids = sorted(by_freq[:n])
            ids_t = torch.tensor(ids, device=dev)
            ro = torch.full((V,), -1, dtype=torch.int64, device=dev)
            ro[ids_t] = torch.arange(n, device=dev)
            cov = sum(counts[i] for i in ids) / max(1, sum(counts))
            fr_sets[n] = (ids_t, ro, cov)
            print(f"FR-Spec rows: the {n} most frequent tokens cover {cov:.4f} of the greedy training continuations", flush=True)
        return fr_sets[n]
    fr_ids_t, row_of, cover = fr_rows(NV)

    K = a.heads
    names = [v.strip() for v in a.variants.split(",") if v.strip()]
    emb_w = target.model.embed_tokens.weight.detach()
    with torch.no_grad():
        hs = target.model(input_ids=St[:64, :64]).last_hidden_state
        rms_h = hs.pow(2).mean().sqrt().item()
        rms_e = emb_w.pow(2).mean().sqrt().item()
        del hs
    variants, hyd, vrows, sizes = {}, {}, {}, {}
    for v in names:
        hy = parse_hydra(v)
        if hy:
            hyd[v] = hy
            ids_t, ro, _ = fr_rows(hy["rows"] or NV)
            vrows[v] = ro
            variants[v] = HydraHeads(K, hy["L"], H, hy["r"], hy["ref"], lm_w[ids_t].clone(), hy["own"], emb_w, rms_h / rms_e).to(dev)
            sizes[v] = int8_bytes(variants[v].state_dict())
            print(f"variant {v}: Hydra {'reference' if hy['ref'] else 'compact r=%d' % hy['r']} layout, L={hy['L']}, "
                  f"{'own' if hy['own'] else 'shared lm_head'} projection of {ids_t.numel()} rows: "
                  f"{sum(p.numel() for p in variants[v].parameters())} trainable parameters, "
                  f"int8 file {sizes[v]} bytes", flush=True)
            continue
        own, L, kd = parse_variant(v)
        fr = v.startswith("f")
        vrows[v] = row_of if fr else None
        variants[v] = make_heads(K, L, H, V, lm_w[fr_ids_t] if fr else lm_w, own).to(dev)
        sizes[v] = int8_bytes(variants[v].state_dict())
    print(f"hidden-row RMS {rms_h:.3f}, embedding RMS {rms_e:.4f}", flush=True)
    opts = {k: torch.optim.AdamW(m.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0) for k, m in variants.items()}
    weights = [0.8 ** k for k in range(K)]

    @torch.no_grad()
    def base_rows(S):
        hid = target.model(input_ids=S).last_hidden_state
        return hid, F.linear(hid, lm_w)

    def head_masks(P, E, T):
        t = torch.arange(T, device=dev)[None, :]
        return [((t >= (P[:, None] - 1)) & (t + k + 2 < E[:, None]))[:, : T - k - 2] for k in range(K)]

    def head_out(m, own, k, x):
        y = m[k](x)
        return y if own else F.linear(y, lm_w)

    def losses_of(v, S, hid, blog, lab, mks, train, want_rank=False, keep=None):
        """Per-head losses (detached when train: each head's weighted loss is back-propagated at
        once, so only one head's graph is alive at a time) and, with want_rank, the label's rank."""
        hy = hyd.get(v)
        if hy:
            own, kd = hy["own"], False
        else:
            own, L, kd = parse_variant(v)
        ro = vrows[v]
        fr = ro is not None
        m = variants[v]
        out, ranks = [], []
        for k in range(K):
            mk = mks[k]
            T = hid.size(1)
            h = hid[:, : T - k - 2][mk]
            y = lab[:, k + 1: T - 1][mk]
            if fr:
                y = ro[y]  # -1: the label is not among the head's rows (skipped; a miss)
            if hy:
                # the path tokens x_{t+1} .. x_{t+k+1}, same row order as the boolean mask's
                bi, ti = mk.nonzero(as_tuple=True)
                toks = torch.stack([S[bi, ti + j] for j in range(1, k + 2)], 1)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                lg = m.head(k, h, toks) if hy else head_out(m, own, k, h)
            lg = lg.float()
            # mean over the labels a head can express (all of them unless FR-Spec rows); never NaN
            loss = F.cross_entropy(lg, y, ignore_index=-1, reduction="sum") / (y >= 0).sum().clamp(min=1)
            if kd:
                tp = F.log_softmax(blog[:, k + 1: T - 1][mk], -1)
                loss = 0.5 * loss + 0.5 * F.kl_div(F.log_softmax(lg, -1), tp, log_target=True, reduction="batchmean")
            if train:
                (weights[k] * loss).backward()
                loss = loss.detach()
            out.append(loss)
            if want_rank:
                if keep is not None:
                    # a vocab limit: only the rows of keep compete; a label outside them is a miss
                    lg = lg.masked_fill(~keep[None, :], float("-inf"))
                    y = torch.where((y >= 0) & keep[y.clamp(min=0)], y, torch.full_like(y, -1))
                ly = lg.gather(1, y.clamp(min=0)[:, None])
                rk = (lg > ly).sum(1)
                if fr:
                    rk = torch.where(y < 0, torch.full_like(rk, 10 ** 6), rk)
                ranks.append(rk)
        return out, ranks

    @torch.no_grad()
    def evaluate(v, with_tree=False, limit=None, keep=None):
        m = variants[v]
        m.eval()
        K_ = K
        tot = [0.0] * K_; a1 = [0.0] * K_; a5 = [0.0] * K_; a10 = [0.0] * K_; n = [0] * K_
        rank_rows = []
        for i in range(0, Sv.size(0) if limit is None else min(limit, Sv.size(0)), 256):
            S, P, E = Sv[i:i + 256], Pv[i:i + 256], Ev[i:i + 256]
            hid, blog = base_rows(S)
            lab = blog.argmax(-1)
            mks = head_masks(P, E, S.size(1))
            ls, rk = losses_of(v, S, hid, blog, lab, mks, False, want_rank=True, keep=keep)
            for k in range(K_):
                c = int(rk[k].numel())
                tot[k] += ls[k].item() * c; a1[k] += (rk[k] < 1).sum().item(); a5[k] += (rk[k] < 5).sum().item(); a10[k] += (rk[k] < 10).sum().item(); n[k] += c
            if with_tree:
                # per position (rows where head 0 is defined), the rank tuple over heads (-1: beyond max rank or undefined)
                T = S.size(1)
                full = torch.full((S.size(0), T, K_), -1, dtype=torch.int64, device=dev)
                for k in range(K_):
                    r = torch.where(rk[k] < a.max_rank, rk[k], torch.full_like(rk[k], -1))
                    sub = full[:, : T - k - 2, k]
                    sub[mks[k]] = r
                    full[:, : T - k - 2, k] = sub
                sel = full[:, : T - 2][mks[0]]
                rank_rows += [tuple(x) for x in sel.tolist()]
        m.train()
        res = [dict(loss=tot[k] / max(1, n[k]), acc1=a1[k] / max(1, n[k]), acc5=a5[k] / max(1, n[k]), acc10=a10[k] / max(1, n[k]), positions=n[k]) for k in range(K_)]
        return res, rank_rows

    W_out = os.path.join(W, "export")
    os.makedirs(W_out, exist_ok=True)
    f = open(os.path.join(W, "loss.csv"), "w", newline="")
    w = csv.writer(f)
    w.writerow(["step", "variant"] + [f"train_loss_head{k}" for k in range(K)] +
               [f"val_acc1_head{k}" for k in range(K)] + ["elapsed_s"])
    before = {v: evaluate(v, limit=1024)[0] for v in variants}
    for v in variants:
        print(f"before [{v}]: " + " ".join(f"h{k} acc@1 {r['acc1']:.3f} @5 {r['acc5']:.3f}" for k, r in enumerate(before[v])), flush=True)
    gen = torch.Generator(device=dev); gen.manual_seed(23)
    total, step, t1 = a.steps, 0, time.time()
    ema = {v: [None] * K for v in variants}
    while step < total:
        cur = a.lr * min(1.0, (step + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / total)))
        ix = torch.randint(0, St.size(0), (a.batch,), device=dev, generator=gen)
        S, P, E = St[ix], Pt[ix], Et[ix]
        Tm = int(E.max())
        S = S[:, :Tm]
        hid, blog = base_rows(S)
        lab = blog.argmax(-1)
        mks = head_masks(P, E, Tm)
        for v, m in variants.items():
            for g_ in opts[v].param_groups:
                g_["lr"] = cur
            opts[v].zero_grad(set_to_none=True)
            ls, _ = losses_of(v, S, hid, blog, lab, mks, True)
            opts[v].step()
            if step % 10 == 0:
                for k in range(K):
                    lv = ls[k].item()
                    ema[v][k] = lv if ema[v][k] is None else 0.8 * ema[v][k] + 0.2 * lv
        del hid, blog, lab
        step += 1
        el = time.time() - t1
        if step % 10 == 0:
            ev = {v: evaluate(v, limit=1024)[0] for v in variants} if step % a.eval_every == 0 else None
            for v in variants:
                w.writerow([step, v] + [f"{x:.4f}" for x in ema[v]] +
                           ([f"{r['acc1']:.4f}" for r in ev[v]] if ev else [""] * K) + [f"{el:.1f}"])
            f.flush()
            if ev and a.results:  # partial results survive a killed run
                os.makedirs(a.results, exist_ok=True)
                shutil.copy(os.path.join(W, "loss.csv"), os.path.join(a.results, "loss.csv"))
            if ev or step % 100 == 0:
                print(f"step {step}/{total} {el:.0f}s " + " | ".join(
                    f"[{v}] loss " + " ".join(f"{x:.3f}" for x in ema[v]) +
                    ((" acc@1 " + " ".join(f"{r['acc1']:.3f}" for r in ev[v])) if ev else "") for v in variants), flush=True)
            if el > a.max_seconds * 0.25 and total == a.steps:
                est = int(step * a.max_seconds / el)
                if est < total:
                    total = max(step + 20, est)
                    print(f"time budget: schedule shortened to {total} steps", flush=True)
    f.close()
    res_dir = a.results
    if res_dir:
        os.makedirs(res_dir, exist_ok=True)
        shutil.copy(os.path.join(W, "loss.csv"), os.path.join(res_dir, "loss.csv"))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = list(csv.DictReader(open(os.path.join(W, "loss.csv"))))
        fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
        for vi, v in enumerate(variants):
            style = ["-", "--", ":", "-."][vi % 4]
            rv = [r for r in rows if r["variant"] == v]
            for k in range(K):
                pts = [(int(r["step"]), float(r[f"train_loss_head{k}"])) for r in rv if r[f"train_loss_head{k}"]]
                if pts:
                    ax[0].plot(*zip(*pts), style, color=f"C{k}", label=f"head {k} ({v})" if vi == 0 or k == 0 else None)
                acc = [(int(r["step"]), float(r[f"val_acc1_head{k}"])) for r in rv if r[f"val_acc1_head{k}"]]
                if acc:
                    ax[1].plot(*zip(*acc), style + "o", color=f"C{k}", label=f"head {k} ({v})" if vi == 0 or k == 0 else None)
        ax[0].set_xlabel("step"); ax[0].set_ylabel("train loss (nats)"); ax[0].legend(fontsize=6); ax[0].grid(alpha=.3)
        ax[1].set_xlabel("step"); ax[1].set_ylabel("held-out accuracy@1"); ax[1].legend(fontsize=6); ax[1].grid(alpha=.3)
        fig.suptitle(("Hydra/Medusa" if hyd else "Medusa") + " heads on " + a.base_name + " (" + ", ".join(variants) + ")")
        fig.tight_layout()
        fig.savefig(os.path.join(W, "loss.png"), dpi=80)
    except Exception as e:
        print("plot skipped:", e)
    summary = {"heads": K, "variants": names, "steps": step, "batch_sequences": a.batch, "lr": a.lr,
               "train_sequences": int(St.size(0)), "train_sampled_sequences": int(Smt.sum()),
               "train_generated_tokens": int(((pos >= Pt[:, None]) & (pos < Et[:, None])).sum()),
               "heldout_sequences": int(Sv.size(0)), "gen_tokens_per_prompt": a.gen,
               "sample_temp": a.sample_temp, "seconds_train": time.time() - t1,
               "before": before, "after": {}, "expected_tau": {}, "expected_tau_every_path_top_rank": {},
               "max_rank": a.max_rank, "head_vocab": NV, "head_vocab_coverage": cover,
               "head_vocab_coverage_by_rows": {str(n): c for n, (_, _, c) in fr_sets.items()},
               "int8_bytes": sizes, "gpu": torch.cuda.get_device_name()}

    def dump_summary():
        summary["seconds_total"] = time.time() - t0
        json.dump(summary, open(os.path.join(W, "summary.json"), "w"), indent=2)
        if res_dir:
            shutil.copy(os.path.join(W, "summary.json"), os.path.join(res_dir, "summary.json"))

    def export(v, res, paths, tau):
        hy = hyd.get(v)
        if hy:
            own, L, fr = hy["own"], hy["L"], True
            n_rows = min(hy["rows"] or NV, V)
        else:
            own, L, kd = parse_variant(v)
            fr = v.startswith("f")
            n_rows = NV
            if own and not fr:
                return
        od = os.path.join(W_out, v)
        os.makedirs(od, exist_ok=True)
        sd = {k: t.detach().to(torch.float16).contiguous().clone() for k, t in variants[v].state_dict().items()}
        sg = {"share_lm_head": not (own if hy else fr)}
        if fr:
            sg["head_vocab"] = n_rows
        if hy:
            save_file(sd, os.path.join(od, "hydra_lm_head.safetensors"), metadata={"format": "pt"})
            sg["token_frequency"] = "head_token_frequency.json"
            if not hy["ref"]:
                sg["embed_dim"] = hy["r"]
            sg.update({"tree": paths, "nodes": min(16, len(paths))})
            cfg = {"architectures": ["HydraModel"], "base_model_name_or_path": a.base_name, "hidden_size": H,
                   "vocab_size": V, "hydra_num_heads": K, "hydra_num_layers": L, "hydra_head_arch": "mlp",
                   "grounded_heads": True, "torch_dtype": "float16", "specgate": sg}
            tf = "head_token_frequency.json"
        else:
            save_file(sd, os.path.join(od, "medusa_lm_head.safetensors"), metadata={"format": "pt"})
            sg["token_frequency"] = "token_frequency.json"
            sg.update({"tree": paths, "nodes": min(16, len(paths))})
            cfg = {"architectures": ["MedusaModel"], "medusa_num_heads": K, "medusa_num_layers": L,
                   "base_model_name_or_path": a.base_name, "hidden_size": H, "vocab_size": V, "torch_dtype": "float16",
                   "specgate": sg}
            tf = "token_frequency.json"
        json.dump(cfg, open(os.path.join(od, "config.json"), "w"), indent=2)
        json.dump({"source": f"greedy continuations of the training prompts by {a.base_name}", "counts": counts},
                  open(os.path.join(od, tf), "w"))
        s2 = {k: x for k, x in summary.items() if k not in ("before", "after", "expected_tau", "expected_tau_every_path_top_rank", "int8_bytes")}
        s2.update({"variant": v, "before": before[v], "after": res, "int8_bytes": sizes[v],
                   "expected_tau": {str(n): tau[n - 1] for n in range(1, len(tau) + 1)},
                   "expected_tau_every_path_top_rank": summary["expected_tau_every_path_top_rank"][v],
                   "seconds_total": time.time() - t0})
        json.dump(s2, open(os.path.join(od, "train_summary.json"), "w"), indent=2)
        rows = list(csv.reader(open(os.path.join(W, "loss.csv"))))
        with open(os.path.join(od, "loss.csv"), "w", newline="") as g:
            cw = csv.writer(g)
            cw.writerow(rows[0])
            for r in rows[1:]:
                if r[1] == v:
                    cw.writerow(r)
        if os.path.exists(os.path.join(W, "loss.png")):
            shutil.copy(os.path.join(W, "loss.png"), os.path.join(od, "loss.png"))
        # a returned file may hold 16 MiB: only shippable sizes travel back as weights
        if res_dir and sizes[v] <= 4_000_000:
            with tarfile.open(os.path.join(res_dir, f"export-{v}.tar"), "w") as tf_:
                tf_.add(od, arcname=v)
            print(f"exported {v} to {res_dir}/export-{v}.tar", flush=True)

    for v in variants:
        res, rows = evaluate(v, with_tree=True)
        paths, tau = greedy_tree(rows, a.tree_nodes)
        _, tau_all = greedy_tree(rows, 10 ** 9)
        ceiling = tau_all[-1] if tau_all else 1.0
        summary["after"][v] = res
        summary["expected_tau"][v] = {str(n): tau[n - 1] for n in range(1, len(tau) + 1)}
        summary["expected_tau_every_path_top_rank"][v] = ceiling
        print(f"after [{v}]: " + " ".join(f"h{k} acc@1 {r['acc1']:.3f} @5 {r['acc5']:.3f}" for k, r in enumerate(res)), flush=True)
        print(f"  expected tau (held-out greedy continuations, {len(rows)} positions) by tree size: " +
              " ".join(f"{n}:{tau[n-1]:.3f}" for n in (1, 4, 8, 16, 32, 64) if n <= len(tau)) +
              f"; every path of top-{a.max_rank} ranks ({len(tau_all)} nodes): {ceiling:.3f}; int8 {sizes[v]} bytes", flush=True)
        dump_summary()
        export(v, res, paths, tau)
    for v in variants:
        ro = vrows[v]
        n_rows = 0 if ro is None else int((ro >= 0).sum())
        if not a.eval_rows or ro is None or n_rows <= a.eval_rows:
            continue
        try:
            ids_small = fr_rows(a.eval_rows)[0]
            keep = torch.zeros(n_rows, dtype=torch.bool, device=dev)
            keep[ro[ids_small]] = True  # the variant's rows that hold one of the eval_rows most frequent tokens
            res, rows = evaluate(v, with_tree=True, keep=keep)
            paths, tau = greedy_tree(rows, a.tree_nodes)
            _, tau_all = greedy_tree(rows, 10 ** 9)
            summary.setdefault("eval_rows", {})[v] = {
                "rows": a.eval_rows, "after": res, "expected_tau": {str(n): tau[n - 1] for n in range(1, len(tau) + 1)},
                "expected_tau_every_path_top_rank": tau_all[-1] if tau_all else 1.0, "tree": paths}
            print(f"after [{v}] limited to the {a.eval_rows} most frequent tokens: " +
                  " ".join(f"h{k} acc@1 {r['acc1']:.3f} @5 {r['acc5']:.3f}" for k, r in enumerate(res)), flush=True)
            print(f"  expected tau by tree size: " + " ".join(f"{n}:{tau[n-1]:.3f}" for n in (1, 4, 8, 16, 32, 64) if n <= len(tau)) +
                  f"; every path of top-{a.max_rank} ranks: {summary['eval_rows'][v]['expected_tau_every_path_top_rank']:.3f}", flush=True)
            dump_summary()
        except Exception as e:  # the exports above stand
            print(f"eval with {a.eval_rows} rows failed for {v}: {e!r}", flush=True)
    with open(os.path.join(W_out, "heldout_prompts.txt"), "w", encoding="utf-8") as hf:
        hf.write("# Held-out prompts: the text of the first 2..48 tokens from a line start of documents that\n"
                 "# tools/train/medusa.py held out from head training.\n")
        seen = 0
        for kind, ids, cut, text in vkept:
            body = text[:cut]
            if not body.strip() or "\n" in body.rstrip("\n") and kind != "chat":
                body = body.split("\n")[0]
            body = body.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            if not body.strip():
                continue
            hf.write(("code" if kind == "go" else "text") + "\t" + body + "\n")
            seen += 1
            if seen >= 400:
                break
    print(f"done {time.time()-t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
