"""Train one Llama-architecture model of the specgate family on the prepared corpus.

usage: python3 train.py --data DIR --tok DIR --out DIR --size target|draft [--max-steps N] [--max-seconds S]
DIR/train.bin, DIR/val.bin are uint16 token streams made by run_all.py.
Logs step, train loss, val loss and tokens/s to OUT/loss.csv and stdout (progress).
"""
import argparse, csv, json, math, os, time
import numpy as np
import torch
import torch.nn.functional as F
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

SIZES = {
    # ~12.5M parameters (tied embeddings), GQA 6 query / 2 kv heads
    "target": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                   num_attention_heads=6, num_key_value_heads=2, lr=1.5e-3),
    # ~2.4M parameters, GQA 6 / 2
    "draft": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, lr=2.5e-3),
    # ~144M parameters: a target worth speculating on (issue #17 point 7; trained on the GPU
    # machine by tools/train/bigtarget.py, never committed)
    "big": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                num_attention_heads=16, num_key_value_heads=4, lr=8e-4),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tok", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", choices=SIZES, required=True)
    ap.add_argument("--max-steps", type=int, default=4000)
    ap.add_argument("--max-seconds", type=float, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    dev = "cuda"
    meta = json.load(open(os.path.join(a.tok, "meta.json")))
    s = dict(SIZES[a.size])
    lr = s.pop("lr")
    cfg = LlamaConfig(vocab_size=meta["vocab_size"], max_position_embeddings=1024, rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=meta["bos"],
                      eos_token_id=meta["eos"], pad_token_id=meta["pad"], initializer_range=0.02, **s)
    model = LlamaForCausalLM(cfg).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"[{a.size}] parameters: {nparams/1e6:.2f}M", flush=True)
    train = np.memmap(os.path.join(a.data, "train.bin"), dtype=np.uint16, mode="r")
    val = np.memmap(os.path.join(a.data, "val.bin"), dtype=np.uint16, mode="r")
    train_t = torch.from_numpy(np.array(train, dtype=np.int64)).to(dev)
    val_t = torch.from_numpy(np.array(val, dtype=np.int64)).to(dev)
    print(f"[{a.size}] train tokens {len(train)/1e6:.1f}M val tokens {len(val)/1e6:.2f}M", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), fused=True)
    warm = 150
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)

    def batch(src):
        ix = torch.randint(0, len(src) - a.seq - 1, (a.batch,), device=dev, generator=gen)
        off = torch.arange(a.seq + 1, device=dev)
        b = src[ix[:, None] + off[None, :]]
        return b[:, :-1], b[:, 1:]

    def loss_of(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

    @torch.no_grad()
    def evaluate(n=20):
        model.eval()
        g = torch.Generator(device=dev); g.manual_seed(99)
        tot = 0.0
        for _ in range(n):
            ix = torch.randint(0, len(val_t) - a.seq - 1, (a.batch,), device=dev, generator=g)
            b = val_t[ix[:, None] + torch.arange(a.seq + 1, device=dev)[None, :]]
            tot += loss_of(b[:, :-1], b[:, 1:]).item()
        model.train()
        return tot / n

    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "loss.csv"), "w", newline="")
    w = csv.writer(log)
    w.writerow(["step", "tokens", "train_loss", "val_loss", "lr", "elapsed_s"])
    t0 = time.time()
    step, ema = 0, None
    total = a.max_steps
    model.train()
    while step < total:
        frac = step / total
        cur = lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g_ in opt.param_groups:
            g_["lr"] = cur
        x, y = batch(train_t)
        loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            lv = loss.item()
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            vl = ""
            if step % 250 == 0:
                vl = evaluate()
            el = time.time() - t0
            w.writerow([step, step * a.batch * a.seq, f"{lv:.4f}", vl if vl == "" else f"{vl:.4f}", f"{cur:.2e}", f"{el:.1f}"])
            log.flush()
            if step % 100 == 0 or vl != "":
                print(f"[{a.size}] step {step}/{total} loss {ema:.3f} val {vl} lr {cur:.1e} {el:.0f}s "
                      f"{step*a.batch*a.seq/el/1e3:.0f}k tok/s", flush=True)
            # time budget: shrink the schedule so the cosine still ends at its floor
            if el > a.max_seconds * 0.5 and total == a.max_steps:
                est = int(step * a.max_seconds / el)
                if est < total:
                    total = max(step + 50, est)
                    print(f"[{a.size}] time budget: schedule shortened to {total} steps", flush=True)
    final_val = evaluate(40)
    final_train = ema
    el = time.time() - t0
    w.writerow([step, step * a.batch * a.seq, f"{final_train:.4f}", f"{final_val:.4f}", "0", f"{el:.1f}"])
    log.close()
    print(f"[{a.size}] done: steps {step} train {final_train:.4f} val {final_val:.4f} in {el:.0f}s", flush=True)
    model.eval()
    export = os.path.join(a.out, "model")
    model.to(torch.float16).save_pretrained(export, safe_serialization=True)
    gc = GenerationConfig(bos_token_id=meta["bos"], eos_token_id=meta["eos"], pad_token_id=meta["pad"],
                          do_sample=False, max_new_tokens=128)
    gc.save_pretrained(export)
    json.dump({"size": a.size, "parameters": nparams, "steps": step, "tokens_seen": step * a.batch * a.seq,
               "batch": a.batch, "seq": a.seq, "lr": lr, "final_train_loss": final_train,
               "final_val_loss": final_val, "seconds": el, "gpu": torch.cuda.get_device_name()},
              open(os.path.join(a.out, "train_summary.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
