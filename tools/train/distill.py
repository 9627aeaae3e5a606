"""Distil the shipped draft from the shipped target (knowledge distillation).

Speculative decoding pays only when the draft predicts what the *target* would say, not
what the corpus says: this fine-tunes the draft (warm start from models/specgate-draft) to
minimise KL(p_target || q_draft) over the same corpus, and measures greedy top-1 agreement
with the target on held-out text before and after (the number that sets acceptance).

usage: PYTHONUNBUFFERED=1 python3 tools/train/distill.py --corpus .corpus/pack/corpus.tar.xz \
         --target models/specgate-target --draft models/specgate-draft --work /tmp/d [--steps 3000]
Writes WORK/model (fp16 save_pretrained), WORK/distill.csv, WORK/distill_summary.json, WORK/distill.png.
"""
import argparse, csv, json, math, os, time
import torch
import torch.nn.functional as F
from corpus import corpus_streams
from transformers import GenerationConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--max-seconds", type=float, default=240)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    a = ap.parse_args()
    t0 = time.time()
    dev = "cuda"
    torch.manual_seed(5)
    train, val, tok, bos, eot = corpus_streams(a.corpus, a.work, a.target, dev)
    print(f"tokens train {len(train)/1e6:.1f}M val {len(val)/1e6:.2f}M {time.time()-t0:.0f}s", flush=True)
    teacher = LlamaForCausalLM.from_pretrained(a.target, dtype=torch.bfloat16).to(dev).eval()
    student = LlamaForCausalLM.from_pretrained(a.draft, dtype=torch.float32).to(dev)
    gen = torch.Generator(device=dev); gen.manual_seed(3)

    def batch(src, g):
        ix = torch.randint(0, len(src) - a.seq - 1, (a.batch,), device=dev, generator=g)
        return src[ix[:, None] + torch.arange(a.seq, device=dev)[None, :]]

    @torch.no_grad()
    def evaluate(n=20):
        student.eval()
        g = torch.Generator(device=dev); g.manual_seed(99)
        ce = kd = agree = 0.0
        for _ in range(n):
            x = batch(val, g)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                tl = teacher(input_ids=x).logits.float()
                sl = student(input_ids=x).logits.float()
            ce += F.cross_entropy(sl[:, :-1].reshape(-1, sl.size(-1)), x[:, 1:].reshape(-1)).item()
            kd += F.kl_div(F.log_softmax(sl, -1), F.log_softmax(tl, -1), log_target=True, reduction="batchmean").item() / a.seq
            agree += (sl.argmax(-1) == tl.argmax(-1)).float().mean().item()
        student.train()
        return ce / n, kd / n, agree / n

    before = evaluate()
    print(f"before: val CE {before[0]:.4f} KL {before[1]:.4f} top-1 agreement {before[2]:.4f}", flush=True)
    opt = torch.optim.AdamW(student.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    os.makedirs(a.work, exist_ok=True)
    f = open(os.path.join(a.work, "distill.csv"), "w", newline="")
    w = csv.writer(f)
    w.writerow(["step", "tokens", "train_kl", "val_ce", "val_kl", "val_agreement", "elapsed_s"])
    w.writerow([0, 0, "", f"{before[0]:.4f}", f"{before[1]:.4f}", f"{before[2]:.4f}", "0"])
    total, step, ema = a.steps, 0, None
    t1 = time.time()
    student.train()
    while step < total:
        cur = a.lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / total)))
        for g_ in opt.param_groups:
            g_["lr"] = cur
        x = batch(train, gen)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            tl = teacher(input_ids=x).logits
        with torch.autocast("cuda", dtype=torch.bfloat16):
            sl = student(input_ids=x).logits
        loss = F.kl_div(F.log_softmax(sl.float(), -1).reshape(-1, sl.size(-1)),
                        F.log_softmax(tl.float(), -1).reshape(-1, tl.size(-1)), log_target=True, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        step += 1
        lv = loss.item() if step % 25 == 0 else None
        if lv is not None:
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            el = time.time() - t1
            if step % 250 == 0:
                ev = evaluate()
                w.writerow([step, step * a.batch * a.seq, f"{lv:.4f}", f"{ev[0]:.4f}", f"{ev[1]:.4f}", f"{ev[2]:.4f}", f"{el:.1f}"])
                print(f"step {step}/{total} train KL {ema:.4f} val CE {ev[0]:.4f} KL {ev[1]:.4f} agree {ev[2]:.4f} {el:.0f}s", flush=True)
            else:
                w.writerow([step, step * a.batch * a.seq, f"{lv:.4f}", "", "", "", f"{el:.1f}"])
            f.flush()
            if el > a.max_seconds * 0.4 and total == a.steps:
                est = int(step * a.max_seconds / el)
                if est < total:
                    total = max(step + 50, est)
                    print(f"time budget: schedule shortened to {total} steps", flush=True)
    after = evaluate(40)
    w.writerow([step, step * a.batch * a.seq, f"{ema:.4f}", f"{after[0]:.4f}", f"{after[1]:.4f}", f"{after[2]:.4f}", f"{time.time()-t1:.1f}"])
    f.close()
    print(f"after: val CE {after[0]:.4f} KL {after[1]:.4f} top-1 agreement {after[2]:.4f} ({step} steps, {time.time()-t1:.0f}s)", flush=True)
    out = os.path.join(a.work, "model")
    student.eval().to(torch.float16).save_pretrained(out, safe_serialization=True)
    GenerationConfig.from_pretrained(a.draft).save_pretrained(out)
    json.dump({"steps": step, "tokens_seen": step * a.batch * a.seq, "lr": a.lr, "batch": a.batch, "seq": a.seq,
               "seconds": time.time() - t1, "before": dict(zip(["val_ce", "val_kl", "val_agreement"], before)),
               "after": dict(zip(["val_ce", "val_kl", "val_agreement"], after)), "final_train_kl": ema,
               "gpu": torch.cuda.get_device_name()}, open(os.path.join(a.work, "distill_summary.json"), "w"), indent=2)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = list(csv.DictReader(open(os.path.join(a.work, "distill.csv"))))
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        tr = [(int(r["tokens"]) / 1e6, float(r["train_kl"])) for r in rows if r["train_kl"]]
        va = [(int(r["tokens"]) / 1e6, float(r["val_kl"])) for r in rows if r["val_kl"]]
        ag = [(int(r["tokens"]) / 1e6, float(r["val_agreement"])) for r in rows if r["val_agreement"]]
        ax[0].plot(*zip(*tr), label="train KL(target‖draft)"); ax[0].plot(*zip(*va), "o-", label="validation KL")
        ax[0].set_xlabel("tokens seen (M)"); ax[0].set_ylabel("nats/token"); ax[0].legend(); ax[0].grid(alpha=.3)
        ax[1].plot(*zip(*ag), "o-", color="C2"); ax[1].set_xlabel("tokens seen (M)")
        ax[1].set_ylabel("greedy top-1 agreement with target"); ax[1].grid(alpha=.3)
        fig.suptitle("specgate-draft distillation from specgate-target"); fig.tight_layout()
        fig.savefig(os.path.join(a.work, "distill.png"), dpi=110)
    except Exception as e:
        print("plot skipped:", e)


if __name__ == "__main__":
    main()
