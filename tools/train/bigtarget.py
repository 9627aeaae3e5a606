"""A larger target of the shipped family (issue #17 point 7), trained and given Medusa heads on
the GPU machine, never committed: same corpus, same tokenizer (models/specgate-target's), same
recipe (tools/train/train.py, size "big": 12 layers, hidden 1024, GQA 16/4, ~144M parameters),
then Medusa heads by tools/train/medusa.py (shared lm_head, 1 ResBlock per head).

usage: PYTHONUNBUFFERED=1 python3 tools/train/bigtarget.py --corpus corpus.tar.xz --work /tmp/big \
          [--train-seconds 150] [--heads-seconds 60]
Writes WORK/model (HF directory with tokenizer files) and WORK/medusa/export/s1 (heads).
"""
import argparse, json, os, random, shutil, subprocess, sys, time
import numpy as np
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
RS = "\n\x1e\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--family", default="models/specgate-target", help="tokenizer and special tokens from here")
    ap.add_argument("--train-seconds", type=float, default=150)
    ap.add_argument("--heads-seconds", type=float, default=60)
    ap.add_argument("--gen-seconds", type=float, default=40)
    ap.add_argument("--variants", default="s1")
    ap.add_argument("--train-steps", type=int, default=4000)
    ap.add_argument("--prompts", type=int, default=100000)
    ap.add_argument("--val-prompts", type=int, default=2048)
    ap.add_argument("--gen", type=int, default=128)
    a = ap.parse_args()
    t0 = time.time()
    W = a.work
    raw = os.path.join(W, "raw")
    os.makedirs(raw, exist_ok=True)
    subprocess.check_call(["tar", "xJf", os.path.abspath(a.corpus), "-C", raw])
    docs = [d for n in ("go", "english", "chat") for d in open(os.path.join(raw, n + ".txt"), encoding="utf-8").read().split(RS)]
    random.Random(11).shuffle(docs)
    tok = Tokenizer.from_file(os.path.join(a.family, "tokenizer.json"))
    cfg = json.load(open(os.path.join(a.family, "config.json")))
    bos, eot = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>")
    n_val = max(50, len(docs) // 100)
    enc = tok.encode_batch(docs, add_special_tokens=False)

    def stream(es):
        out = []
        for e in es:
            out.append(bos); out.extend(e.ids); out.append(eot)
        return np.array(out, dtype=np.uint16)
    data = os.path.join(W, "data")
    os.makedirs(data, exist_ok=True)
    stream(enc[n_val:]).tofile(os.path.join(data, "train.bin"))
    stream(enc[:n_val]).tofile(os.path.join(data, "val.bin"))
    tokdir = os.path.join(W, "tok")
    os.makedirs(tokdir, exist_ok=True)
    json.dump({"vocab_size": tok.get_vocab_size(), "bos": cfg["bos_token_id"], "eos": cfg["eos_token_id"],
               "pad": cfg["pad_token_id"]}, open(os.path.join(tokdir, "meta.json"), "w"))
    print(f"tokenized {sum(len(e.ids) for e in enc)/1e6:.1f}M tokens {time.time()-t0:.0f}s", flush=True)
    subprocess.check_call([sys.executable, os.path.join(HERE, "train.py"), "--data", data, "--tok", tokdir,
                           "--out", os.path.join(W, "train"), "--size", "big", "--max-seconds", str(a.train_seconds),
                           "--max-steps", str(a.train_steps)])
    model = os.path.join(W, "model")
    shutil.copytree(os.path.join(W, "train", "model"), model)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.family, f), model)
    shutil.copy(os.path.join(W, "train", "train_summary.json"), model)
    print(f"big target ready {time.time()-t0:.0f}s", flush=True)
    subprocess.check_call([sys.executable, os.path.join(HERE, "medusa.py"), "--corpus", a.corpus, "--target", model,
                           "--work", os.path.join(W, "medusa"), "--base-name", "specgate-big (not committed)",
                           "--variants", a.variants, "--prompts", str(a.prompts), "--gen-batch", "2048", "--gen", str(a.gen),
                           "--gen-seconds", str(a.gen_seconds), "--max-seconds", str(a.heads_seconds),
                           "--val-prompts", str(a.val_prompts)])
    print(f"done {time.time()-t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
