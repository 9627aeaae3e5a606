"""Train Medusa heads for the shipped target (Medusa-1 recipe, self-distillation).

The base model (models/specgate-target) stays frozen. Prompts are cut from our corpus
(tools/data/prepare.py: Go source, English, chat; 2% of the documents held out; prompts drawn
50% Go / 30% English / 20% chat by bytes, half of them one line, like the bench prompts); the base
model continues every prompt greedily, and the heads learn to predict the base model's *own*
continuation: head k (k = 0..K-1) reads the final-normed hidden row at position t (the row whose
lm_head output is the token at t+1) and predicts the token at t+k+2. Loss: cross-entropy per
head, weighted 0.8^k as in the Medusa paper.

Two head variants are trained side by side on the same batches, both in the Medusa reference
module structure (nn.ModuleList of nn.Sequential(ResBlock * medusa_num_layers [, Linear])):
  shared: ResBlocks only; the vocabulary projection is the base model's lm_head (tied
          embeddings), frozen. This is what we ship (a few MB).
  own:    ResBlocks + a per-head Linear(hidden, vocab) initialised from lm_head, trainable (the
          current reference layout; 5 x 8192 x 384 more parameters). Measured for comparison only.

usage: PYTHONUNBUFFERED=1 python3 tools/train/medusa.py --corpus corpus.tar.xz \
          --target models/specgate-target --work /tmp/m [--heads 5] [--max-seconds 150]
Writes WORK/export/specgate-target-medusa/ (config.json, medusa_lm_head.safetensors,
token_frequency.json, loss.csv, loss.png, train_summary.json) and WORK/export/heldout_prompts.txt.
"""
import argparse, bisect, csv, json, math, os, random, subprocess, time
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

RS = "\n\x1e\n"


class ResBlock(nn.Module):
    """Medusa's residual block: x + SiLU(Linear(x)), weight zero-initialised (identity at start)."""

    def __init__(self, hidden):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.act(self.linear(x))


def make_heads(K, L, hidden, vocab, lm_head_weight, own):
    mods = []
    for _ in range(K):
        layers = [ResBlock(hidden)] * L  # the reference repeats one block L times
        if own:
            lin = nn.Linear(hidden, vocab, bias=False)
            lin.weight.data[:] = lm_head_weight
            layers.append(lin)
        mods.append(nn.Sequential(*layers))
    return nn.ModuleList(mods)


def head_logits(heads, i, h, lm_w, own):
    x = heads[i](h)
    return x if own else F.linear(x, lm_w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--heads", type=int, default=5)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--gen", type=int, default=128, help="greedy tokens generated per prompt")
    ap.add_argument("--prompts", type=int, default=49152)
    ap.add_argument("--gen-batch", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=256, help="sequences per training step")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--max-seconds", type=float, default=120, help="training-loop budget")
    ap.add_argument("--gen-seconds", type=float, default=75, help="generation budget")
    a = ap.parse_args()
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
    rng.shuffle(docs)
    n_val = max(200, len(docs) // 50)
    val_docs, train_docs = docs[:n_val], docs[n_val:]
    tok = Tokenizer.from_file(os.path.join(a.target, "tokenizer.json"))
    bos = tok.token_to_id("<|begin_of_text|>")
    eos = {tok.token_to_id("<|end_of_text|>"), tok.token_to_id("<|im_end|>")}
    print(f"docs train {len(train_docs)} held-out {len(val_docs)} {time.time()-t0:.0f}s", flush=True)

    MIX = {"go": 0.5, "english": 0.3, "chat": 0.2}  # the bench prompts are half Go lines

    def by_kind(dset):
        out = {}
        for kind, d in dset:
            docs, cum = out.setdefault(kind, ([], []))
            docs.append(d)
            cum.append((cum[-1] if cum else 0) + len(d))
        return out

    def make_prompts(dset, n, r):
        """n prompts: kind drawn by MIX, then a byte-uniform position in that kind's documents,
        back to its line start; half are cut at the line's end (like the bench prompts, one line
        of Go or one sentence), all to 2..48 tokens."""
        kinds = by_kind(dset)
        names = [k for k in MIX if k in kinds]
        texts = []
        for _ in range(n):
            kind = r.choices(names, weights=[MIX[k] for k in names])[0]
            docs, cum = kinds[kind]
            pos = r.randrange(cum[-1])
            di = bisect.bisect_right(cum, pos)
            d = docs[di]
            off = pos - (cum[di - 1] if di else 0)
            st = d.rfind("\n", 0, off) + 1
            t = d[st:st + 400]
            if r.random() < 0.5 and "\n" in t.strip("\n"):
                t = t.strip("\n").split("\n")[0]
            texts.append((kind, t))
        enc = tok.encode_batch([t for _, t in texts], add_special_tokens=False)
        out = []
        for (kind, t), e in zip(texts, enc):
            ids = e.ids
            if len(ids) < 2:
                continue
            L = min(len(ids), r.choice([2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48]))
            out.append((kind, [bos] + ids[:L], e.offsets[L - 1][1], t))
        return out

    target = LlamaForCausalLM.from_pretrained(a.target, dtype=torch.float32).to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    H, V = target.config.hidden_size, target.config.vocab_size
    lm_w = target.lm_head.weight.detach()

    @torch.no_grad()
    def continue_greedy(batch_ids, G):
        """batch_ids: list of equal-length prompts. Returns [B, P+G] token tensor and the
        final-normed hidden rows [B, P+G, H] (bf16) of the whole sequence."""
        x = torch.tensor(batch_ids, device=dev)
        out = target(input_ids=x, use_cache=True, logits_to_keep=1)
        pkv, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
        toks = [x, nxt[:, None]]
        for _ in range(G - 1):
            out = target(input_ids=nxt[:, None], past_key_values=pkv, use_cache=True)
            pkv, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
            toks.append(nxt[:, None])
        seq = torch.cat(toks, 1)
        hid = target.model(input_ids=seq).last_hidden_state.to(torch.bfloat16)
        return seq, hid

    def build(dset, n, r, budget):
        prompts = make_prompts(dset, n, r)
        by_len = {}
        for p in prompts:
            by_len.setdefault(len(p[1]), []).append(p)
        seqs, hids, plen = [], [], []
        t1 = time.time()
        groups = []
        for L, ps in sorted(by_len.items()):
            for i in range(0, len(ps), a.gen_batch):
                groups.append((L, ps[i:i + a.gen_batch]))
        r.shuffle(groups)
        kept = []
        for L, ps in groups:
            if time.time() - t1 > budget:
                print(f"generation budget reached: {len(kept)} of {len(prompts)} prompts", flush=True)
                break
            s, h = continue_greedy([p[1] for p in ps], a.gen)
            seqs.append(s); hids.append(h); plen.append(torch.full((len(ps),), L, device=dev))
            kept += ps
        # pad to one length (prompt lengths differ): right-pad, remember valid length
        T = max(s.size(1) for s in seqs)
        S = torch.zeros(len(kept), T, dtype=torch.int64, device=dev)
        Hd = torch.zeros(len(kept), T, H, dtype=torch.bfloat16, device=dev)
        n_ = torch.zeros(len(kept), dtype=torch.int64, device=dev)
        i = 0
        for s, h in zip(seqs, hids):
            b, t = s.shape
            S[i:i + b, :t] = s; Hd[i:i + b, :t] = h; n_[i:i + b] = t
            i += b
        P = torch.cat(plen)
        # valid length ends at the first EOS generated (the EOS itself is a valid label)
        pos = torch.arange(T, device=dev)[None, :]
        gen_eos = torch.zeros_like(S, dtype=torch.bool)
        for e in eos:
            gen_eos |= (S == e)
        gen_eos &= pos >= P[:, None]
        first = torch.where(gen_eos.any(1), gen_eos.float().argmax(1), n_ - 1)
        end = first + 1  # exclusive
        print(f"built {len(kept)} sequences, {int((end - P).sum())} generated tokens in {time.time()-t1:.0f}s", flush=True)
        return S, Hd, P, end, kept

    trng, vrng = random.Random(5), random.Random(6)
    Sv, Hv, Pv, Ev, vkept = build(val_docs, 4096, vrng, 20)
    St, Ht, Pt, Et, _ = build(train_docs, a.prompts, trng, a.gen_seconds)
    print(f"data ready {time.time()-t0:.0f}s; GPU memory {torch.cuda.memory_allocated()/1e9:.1f} GB", flush=True)

    # token frequency of the base model's own output (FR-Spec style vocabulary restriction)
    pos = torch.arange(St.size(1), device=dev)[None, :]
    genmask = (pos >= Pt[:, None]) & (pos < Et[:, None])
    counts = torch.bincount(St[genmask], minlength=V).tolist()

    K, Lr = a.heads, a.layers
    variants = {"shared": make_heads(K, Lr, H, V, lm_w, False).to(dev),
                "own": make_heads(K, Lr, H, V, lm_w, True).to(dev)}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0) for k, m in variants.items()}
    weights = [0.8 ** k for k in range(K)]

    def masks(P, E, T, k):
        """positions t that train head k: t >= P-1 (the pending token t+1 is generated) and the
        label t+k+2 < E (inside the greedy continuation, EOS included)."""
        t = torch.arange(T, device=dev)[None, :]
        return (t >= (P[:, None] - 1)) & (t + k + 2 < E[:, None])

    def step_loss(m, own, S, Hd, P, E, train):
        T = S.size(1)
        losses, accs = [], []
        for k in range(K):
            mk = masks(P, E, T, k)[:, : T - k - 2]
            h = Hd[:, : T - k - 2][mk]
            y = S[:, k + 2:][mk]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                lg = head_logits(m, k, h.float(), lm_w, own)
            lg = lg.float()
            losses.append(F.cross_entropy(lg, y))
            if not train:
                top = lg.topk(5, -1).indices
                accs.append(((top[:, :1] == y[:, None]).any(1).float().mean().item(),
                             (top == y[:, None]).any(1).float().mean().item(), int(y.numel())))
        return losses, accs

    @torch.no_grad()
    def evaluate(name):
        m, own = variants[name], name == "own"
        m.eval()
        tot = [0.0] * K; a1 = [0.0] * K; a5 = [0.0] * K; n = [0] * K
        for i in range(0, Sv.size(0), 512):
            ls, ac = step_loss(m, own, Sv[i:i + 512], Hv[i:i + 512], Pv[i:i + 512], Ev[i:i + 512], False)
            for k in range(K):
                c = ac[k][2]
                tot[k] += ls[k].item() * c; a1[k] += ac[k][0] * c; a5[k] += ac[k][1] * c; n[k] += c
        m.train()
        return [dict(loss=tot[k] / n[k], acc1=a1[k] / n[k], acc5=a5[k] / n[k], positions=n[k]) for k in range(K)]

    os.makedirs(os.path.join(W, "export", "specgate-target-medusa"), exist_ok=True)
    out_dir = os.path.join(W, "export", "specgate-target-medusa")
    f = open(os.path.join(out_dir, "loss.csv"), "w", newline="")
    w = csv.writer(f)
    w.writerow(["step", "variant"] + [f"train_loss_head{k}" for k in range(K)] +
               [f"val_acc1_head{k}" for k in range(K)] + ["elapsed_s"])
    before = {v: evaluate(v) for v in variants}
    for v in variants:
        print(f"before [{v}]: " + " ".join(f"h{k} acc@1 {r['acc1']:.3f} @5 {r['acc5']:.3f}" for k, r in enumerate(before[v])), flush=True)
    gen = torch.Generator(device=dev); gen.manual_seed(23)
    total, step, t1 = a.steps, 0, time.time()
    ema = {v: [None] * K for v in variants}
    while step < total:
        cur = a.lr * min(1.0, (step + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / total)))
        ix = torch.randint(0, St.size(0), (a.batch,), device=dev, generator=gen)
        S, Hd, P, E = St[ix], Ht[ix], Pt[ix], Et[ix]
        for v, m in variants.items():
            for g_ in opts[v].param_groups:
                g_["lr"] = cur
            ls, _ = step_loss(m, v == "own", S, Hd, P, E, True)
            loss = sum(wk * l for wk, l in zip(weights, ls))
            opts[v].zero_grad(set_to_none=True)
            loss.backward()
            opts[v].step()
            if step % 10 == 0:
                for k in range(K):
                    lv = ls[k].item()
                    ema[v][k] = lv if ema[v][k] is None else 0.8 * ema[v][k] + 0.2 * lv
        step += 1
        el = time.time() - t1
        if step % 10 == 0:
            ev = {v: evaluate(v) for v in variants} if step % 250 == 0 else None
            for v in variants:
                w.writerow([step, v] + [f"{x:.4f}" for x in ema[v]] +
                           ([f"{r['acc1']:.4f}" for r in ev[v]] if ev else [""] * K) + [f"{el:.1f}"])
            f.flush()
            if ev:
                for v in variants:
                    print(f"step {step}/{total} [{v}] loss " + " ".join(f"{x:.3f}" for x in ema[v]) + " | acc@1 " +
                          " ".join(f"{r['acc1']:.3f}" for r in ev[v]) + f" {el:.0f}s", flush=True)
            if el > a.max_seconds * 0.3 and total == a.steps:
                est = int(step * a.max_seconds / el)
                if est < total:
                    total = max(step + 20, est)
                    print(f"time budget: schedule shortened to {total} steps", flush=True)
    after = {v: evaluate(v) for v in variants}
    f.close()
    for v in variants:
        print(f"after [{v}]: " + " ".join(f"h{k} acc@1 {r['acc1']:.3f} @5 {r['acc5']:.3f}" for k, r in enumerate(after[v])), flush=True)

    # export the shared variant in the reference format: the state dict of the ModuleList
    # (keys "{head}.{layer}.linear.weight|bias"); no final Linear: the base lm_head is shared.
    sd = {k: v.detach().to(torch.float16).contiguous().clone() for k, v in variants["shared"].state_dict().items()}
    save_file(sd, os.path.join(out_dir, "medusa_lm_head.safetensors"), metadata={"format": "pt"})
    cfg = {
        "architectures": ["MedusaModel"],
        "medusa_num_heads": K,
        "medusa_num_layers": Lr,
        "base_model_name_or_path": "models/specgate-target",
        "hidden_size": H,
        "vocab_size": V,
        "torch_dtype": "float16",
        "specgate": {"share_lm_head": True, "token_frequency": "token_frequency.json"},
    }
    json.dump(cfg, open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    json.dump({"source": "greedy continuations of the training prompts by models/specgate-target",
               "counts": counts}, open(os.path.join(out_dir, "token_frequency.json"), "w"))
    summary = {"heads": K, "layers": Lr, "steps": step, "batch_sequences": a.batch, "lr": a.lr,
               "train_sequences": int(St.size(0)), "train_generated_tokens": int(genmask.sum()),
               "heldout_sequences": int(Sv.size(0)), "gen_tokens_per_prompt": a.gen,
               "seconds_train": time.time() - t1, "seconds_total": time.time() - t0,
               "before": before, "after": after, "gpu": torch.cuda.get_device_name()}
    json.dump(summary, open(os.path.join(out_dir, "train_summary.json"), "w"), indent=2)
    # held-out prompts (documents never used for training), in speculative/testdata/prompts.txt's format
    with open(os.path.join(W, "export", "heldout_prompts.txt"), "w", encoding="utf-8") as hf:
        hf.write("# Held-out prompts for Medusa tree tuning and tau: the text of the first 2..48 tokens from a\n"
                 "# line start of documents that tools/train/medusa.py held out from head training.\n")
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
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = list(csv.DictReader(open(os.path.join(out_dir, "loss.csv"))))
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        for v, style in (("shared", "-"), ("own", "--")):
            rv = [r for r in rows if r["variant"] == v]
            for k in range(K):
                pts = [(int(r["step"]), float(r[f"train_loss_head{k}"])) for r in rv if r[f"train_loss_head{k}"]]
                if pts:
                    ax[0].plot(*zip(*pts), style, color=f"C{k}", label=f"head {k} ({v})")
                acc = [(int(r["step"]), float(r[f"val_acc1_head{k}"])) for r in rv if r[f"val_acc1_head{k}"]]
                if acc:
                    ax[1].plot(*zip(*acc), style + "o", color=f"C{k}", label=f"head {k} ({v})")
        ax[0].set_xlabel("step"); ax[0].set_ylabel("train cross-entropy (nats)"); ax[0].legend(fontsize=7); ax[0].grid(alpha=.3)
        ax[1].set_xlabel("step"); ax[1].set_ylabel("held-out accuracy@1"); ax[1].legend(fontsize=7); ax[1].grid(alpha=.3)
        fig.suptitle("Medusa heads on specgate-target (solid: shared lm_head, shipped; dashed: own projection)")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "loss.png"), dpi=100)
    except Exception as e:
        print("plot skipped:", e)
    print(f"done {time.time()-t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
