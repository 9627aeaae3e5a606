"""Distil draft models from the target on the target's own continuations (sequence-level KD).

A draft pays only when it predicts what the target says next *in the text the target writes*:
at inference the draft's context is the prompt plus the target's own output. tools/train/distill.py
matched the target on corpus text; this script trains on the target's greedy (and sampled)
continuations of corpus prompts written by tools/train/medusa.py --save-gen, mixed with corpus
windows, minimising KL(p_target || q_draft) at every position.

Students (trained side by side on the same batches):
  d2  the shipped draft's shape (2 layers, hidden 192), warm-started from --draft
  d1  1 layer, hidden 192 (cheaper: one layer less), warm-started from --draft's embeddings,
      layer 0 and final norm
Measured on held-out continuations (prompts from held-out documents): greedy top-1 agreement with
the target and the expected tokens per target step of a greedy chain of k drafts
(tau_k = 1 + E[min(run of agreeing positions from a start position, k)]).

usage: PYTHONUNBUFFERED=1 python3 tools/train/distill_gen.py --gen /tmp/gen.pt --corpus corpus.tar.xz \
         --target models/specgate-target --draft models/specgate-draft --work /tmp/d [--max-seconds 180]
Writes WORK/<student>/ (fp16 model, tokenizer files, distill.csv, distill_summary.json, distill.png).
"""
import argparse, csv, json, math, os, shutil, sys, time
import torch
import torch.nn.functional as F
from corpus import corpus_streams
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

torch.backends.cuda.matmul.allow_tf32 = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--students", default="d2,d1")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--max-seconds", type=float, default=180)
    ap.add_argument("--wait-seconds", type=float, default=300)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--gen-batch", type=int, default=96, help="generated sequences per step")
    ap.add_argument("--corpus-batch", type=int, default=16, help="corpus windows of --seq tokens per step")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--goldens", action="store_true", help="write HF goldens of every student (tools/train/goldens.py)")
    a = ap.parse_args()
    t0 = time.time()
    dev = "cuda"
    torch.manual_seed(5)
    ctrain, cval, tok, bos, eot = corpus_streams(a.corpus, a.work, a.target, dev)
    print(f"corpus tokens train {len(ctrain)/1e6:.1f}M val {len(cval)/1e6:.2f}M {time.time()-t0:.0f}s", flush=True)
    teacher = LlamaForCausalLM.from_pretrained(a.target, dtype=torch.float32).to(dev).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    base = LlamaForCausalLM.from_pretrained(a.draft, dtype=torch.float32)
    students = {}
    for name in [s.strip() for s in a.students.split(",") if s.strip()]:
        layers = int(name[1:])
        if layers == base.config.num_hidden_layers:
            m = LlamaForCausalLM.from_pretrained(a.draft, dtype=torch.float32)
        else:
            cfg = LlamaConfig.from_pretrained(a.draft)
            cfg.num_hidden_layers = layers
            if getattr(cfg, "layer_types", None):
                cfg.layer_types = cfg.layer_types[:layers]
            m = LlamaForCausalLM(cfg)
            sd = {k: v for k, v in base.state_dict().items()
                  if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
            missing, unexpected = m.load_state_dict(sd, strict=False)
            missing = [k for k in missing if "rotary" not in k and k != "lm_head.weight"]
            if missing or unexpected:
                sys.exit(f"{name}: missing {missing} unexpected {unexpected}")
        students[name] = m.to(dev).float()
        print(f"student {name}: {layers} layers, {sum(p.numel() for p in m.parameters())/1e6:.2f}M parameters", flush=True)

    # wait for the generated continuations (written by medusa.py --save-gen)
    while not os.path.exists(a.gen):
        if time.time() - t0 > a.wait_seconds:
            sys.exit(f"no {a.gen} after {a.wait_seconds}s")
        time.sleep(2)
    g = torch.load(a.gen)
    St, Pt, Et = g["St"].to(dev).long(), g["Pt"].to(dev), g["Et"].to(dev)
    Sv, Pv, Ev = g["Sv"].to(dev).long(), g["Pv"].to(dev), g["Ev"].to(dev)
    print(f"generated sequences: train {St.size(0)}, held-out {Sv.size(0)} ({time.time()-t0:.0f}s)", flush=True)
    gen = torch.Generator(device=dev); gen.manual_seed(3)

    def corpus_batch(src, n, gg):
        ix = torch.randint(0, len(src) - a.seq - 1, (n,), device=dev, generator=gg)
        return src[ix[:, None] + torch.arange(a.seq, device=dev)[None, :]]

    @torch.no_grad()
    def evaluate(limit=None):
        """held-out continuations: agreement on generated positions, chain tau_k; corpus: KL, agreement."""
        res = {}
        for name, m in students.items():
            m.eval()
        n = Sv.size(0) if limit is None else min(limit, Sv.size(0))
        agree = {k: [0, 0] for k in students}
        tau = {k: {2: 0.0, 4: 0.0, 8: 0.0} for k in students}
        starts = 0
        for i in range(0, n, 256):
            S, P, E = Sv[i:i + 256], Pv[i:i + 256], Ev[i:i + 256]
            T = int(E.max())
            S = S[:, :T]
            tl = teacher(input_ids=S).logits
            ta = tl.argmax(-1)
            t = torch.arange(T, device=dev)[None, :]
            valid = (t >= P[:, None] - 1) & (t < E[:, None] - 1)  # predictions of generated tokens
            starts += int(valid.sum())
            for name, m in students.items():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    sl = m(input_ids=S).logits
                match = (sl.argmax(-1) == ta) & valid
                agree[name][0] += int(match.sum()); agree[name][1] += int(valid.sum())
                run = torch.zeros_like(match, dtype=torch.int64)
                nxt = torch.zeros(S.size(0), dtype=torch.int64, device=dev)
                for j in range(T - 1, -1, -1):
                    nxt = torch.where(match[:, j], nxt + 1, torch.zeros_like(nxt))
                    run[:, j] = nxt
                for k in tau[name]:
                    tau[name][k] += float(torch.clamp(run, max=k)[valid].sum())
        g2 = torch.Generator(device=dev); g2.manual_seed(99)
        ckl = {k: 0.0 for k in students}; cag = {k: 0.0 for k in students}
        nb = 8
        for _ in range(nb):
            x = corpus_batch(cval, 32, g2)
            tl = teacher(input_ids=x).logits.float()
            for name, m in students.items():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    sl = m(input_ids=x).logits.float()
                ckl[name] += F.kl_div(F.log_softmax(sl, -1), F.log_softmax(tl, -1), log_target=True, reduction="batchmean").item() / a.seq / nb
                cag[name] += (sl.argmax(-1) == tl.argmax(-1)).float().mean().item() / nb
        for name, m in students.items():
            m.train()
            res[name] = {"gen_agreement": agree[name][0] / max(1, agree[name][1]),
                         "tau_chain": {str(k): 1 + v / max(1, starts) for k, v in tau[name].items()},
                         "corpus_kl": ckl[name], "corpus_agreement": cag[name]}
        return res

    def fmt(r):
        return (f"agree(gen) {r['gen_agreement']:.4f} tau k=2 {r['tau_chain']['2']:.3f} k=4 {r['tau_chain']['4']:.3f} "
                f"k=8 {r['tau_chain']['8']:.3f} | corpus KL {r['corpus_kl']:.4f} agree {r['corpus_agreement']:.4f}")
    before = evaluate()
    for k, r in before.items():
        print(f"before [{k}]: {fmt(r)}", flush=True)
    opts = {k: torch.optim.AdamW(m.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0, fused=True) for k, m in students.items()}
    os.makedirs(a.work, exist_ok=True)
    f = open(os.path.join(a.work, "distill.csv"), "w", newline="")
    w = csv.writer(f)
    w.writerow(["step", "student", "train_kl_gen", "train_kl_corpus", "gen_agreement", "tau_k2", "tau_k4", "corpus_kl", "elapsed_s"])
    for k, r in before.items():
        w.writerow([0, k, "", "", f"{r['gen_agreement']:.4f}", f"{r['tau_chain']['2']:.4f}", f"{r['tau_chain']['4']:.4f}", f"{r['corpus_kl']:.4f}", "0"])
    total, step = a.steps, 0
    ema = {k: [None, None] for k in students}
    t1 = time.time()
    for m in students.values():
        m.train()
    while step < total:
        cur = a.lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / total)))
        ix = torch.randint(0, St.size(0), (a.gen_batch,), device=dev, generator=gen)
        S, P, E = St[ix], Pt[ix], Et[ix]
        T = int(E.max())
        S = S[:, :T]
        t = torch.arange(T, device=dev)[None, :]
        valid = t < E[:, None] - 1
        x = corpus_batch(ctrain, a.corpus_batch, gen)
        with torch.no_grad():
            tl = F.log_softmax(teacher(input_ids=S).logits.float()[valid], -1)
            tc = F.log_softmax(teacher(input_ids=x).logits.float().reshape(-1, tl.size(-1)), -1)
        for k, m in students.items():
            for g_ in opts[k].param_groups:
                g_["lr"] = cur
            with torch.autocast("cuda", dtype=torch.bfloat16):
                sl = m(input_ids=S).logits
                sc = m(input_ids=x).logits
            lg = F.kl_div(F.log_softmax(sl.float()[valid], -1), tl, log_target=True, reduction="batchmean")
            lc = F.kl_div(F.log_softmax(sc.float().reshape(-1, tc.size(-1)), -1), tc, log_target=True, reduction="batchmean")
            loss = lg + 0.5 * lc
            opts[k].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opts[k].step()
            if step % 25 == 0:
                e0, e1 = ema[k]
                ema[k] = [lg.item() if e0 is None else 0.9 * e0 + 0.1 * lg.item(), lc.item() if e1 is None else 0.9 * e1 + 0.1 * lc.item()]
        step += 1
        el = time.time() - t1
        if step % 25 == 0:
            ev = evaluate(limit=1024) if step % 500 == 0 else None
            for k in students:
                row = [step, k, f"{ema[k][0]:.4f}", f"{ema[k][1]:.4f}"]
                row += ([f"{ev[k]['gen_agreement']:.4f}", f"{ev[k]['tau_chain']['2']:.4f}", f"{ev[k]['tau_chain']['4']:.4f}", f"{ev[k]['corpus_kl']:.4f}"]
                        if ev else ["", "", "", ""]) + [f"{el:.1f}"]
                w.writerow(row)
            f.flush()
            if ev:
                for k in students:
                    print(f"step {step}/{total} [{k}] KL gen {ema[k][0]:.4f} corpus {ema[k][1]:.4f} | {fmt(ev[k])} {el:.0f}s", flush=True)
            if el > a.max_seconds * 0.3 and total == a.steps:
                est = int(step * a.max_seconds / el)
                if est < total:
                    total = max(step + 50, est)
                    print(f"time budget: schedule shortened to {total} steps", flush=True)
    after = evaluate()
    for k, r in after.items():
        w.writerow([step, k, f"{ema[k][0]:.4f}", f"{ema[k][1]:.4f}", f"{r['gen_agreement']:.4f}", f"{r['tau_chain']['2']:.4f}",
                    f"{r['tau_chain']['4']:.4f}", f"{r['corpus_kl']:.4f}", f"{time.time()-t1:.1f}"])
        print(f"after [{k}]: {fmt(r)} ({step} steps, {time.time()-t1:.0f}s)", flush=True)
    f.close()
    rows = list(csv.reader(open(os.path.join(a.work, "distill.csv"))))
    for k, m in students.items():
        out = os.path.join(a.work, k)
        m.eval().to(torch.float16).save_pretrained(out, safe_serialization=True)
        GenerationConfig.from_pretrained(a.draft).save_pretrained(out)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.draft, fn), out)
        json.dump({"student": k, "layers": m.config.num_hidden_layers, "parameters": sum(p.numel() for p in m.parameters()),
                   "steps": step, "lr": a.lr, "gen_batch": a.gen_batch, "corpus_batch": a.corpus_batch, "seq": a.seq,
                   "train_generated_sequences": int(St.size(0)), "heldout_generated_sequences": int(Sv.size(0)),
                   "seconds": time.time() - t1, "before_from_shipped_draft": before[k] if k in before else None, "after": after[k],
                   "gpu": torch.cuda.get_device_name()}, open(os.path.join(out, "distill_summary.json"), "w"), indent=2)
        with open(os.path.join(out, "distill.csv"), "w", newline="") as g2:
            cw = csv.writer(g2)
            cw.writerow(rows[0])
            for r in rows[1:]:
                if r[1] == k:
                    cw.writerow(r)
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            rk = [r for r in rows[1:] if r[1] == k]
            fig, ax = plt.subplots(1, 2, figsize=(10, 4))
            tr = [(int(r[0]), float(r[2])) for r in rk if r[2]]
            tc_ = [(int(r[0]), float(r[3])) for r in rk if r[3]]
            ag = [(int(r[0]), float(r[4])) for r in rk if r[4]]
            if tr:
                ax[0].plot(*zip(*tr), label="train KL, target continuations")
            if tc_:
                ax[0].plot(*zip(*tc_), label="train KL, corpus")
            ax[0].set_xlabel("step"); ax[0].set_ylabel("nats/token"); ax[0].legend(); ax[0].grid(alpha=.3)
            ax[1].plot(*zip(*ag), "o-", color="C2"); ax[1].set_xlabel("step")
            ax[1].set_ylabel("greedy agreement, held-out continuations"); ax[1].grid(alpha=.3)
            fig.suptitle(f"draft {k} distilled on specgate-target's continuations"); fig.tight_layout()
            fig.savefig(os.path.join(out, "distill.png"), dpi=110)
        except Exception as e:
            print("plot skipped:", e)
        if a.goldens:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import goldens as G
            torch.set_num_threads(8)
            G.shipped_model(out, tok, os.path.join(a.work, "golden-" + k), "models/specgate-draft")
            print(f"golden for {k} written", flush=True)
    print(f"done {time.time()-t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
