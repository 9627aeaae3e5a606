"""The whole recipe for the specgate model family, in one run on the GPU machine.

usage: PYTHONUNBUFFERED=1 python3 tools/train/run_all.py --corpus .corpus/pack/corpus.tar.xz --work /tmp/w
  1. unpacks the corpus made by tools/data/prepare.py
  2. trains the tokenizers (ours + two test fixtures) and writes tokenizer goldens
  3. tokenizes the corpus into uint16 train/val streams (1% of documents held out)
  4. trains target and draft concurrently (train.py), while the CPU makes the
     random-config, chat-template and BERT goldens
  5. exports models/specgate-{target,draft} with tokenizer files, and the shipped models' goldens
Everything lands under WORK/export with the repository's layout.
"""
import argparse, json, os, random, shutil, subprocess, sys, tarfile, time
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tok as T  # noqa: E402

RS = "\n\x1e\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--max-seconds", type=float, default=300)
    a = ap.parse_args()
    t0 = time.time()
    W = a.work
    raw = os.path.join(W, "raw")
    os.makedirs(raw, exist_ok=True)
    subprocess.check_call(["tar", "xJf", os.path.abspath(a.corpus), "-C", raw])
    docs = {n: open(os.path.join(raw, n + ".txt"), encoding="utf-8").read().split(RS) for n in ("go", "english", "chat")}
    print({k: len(v) for k, v in docs.items()}, f"{time.time()-t0:.0f}s", flush=True)
    rng = random.Random(11)
    alldocs = [(d, n) for n, v in docs.items() for d in v]
    rng.shuffle(alldocs)

    # 2. tokenizers
    sample = [d for d, _ in alldocs[: len(alldocs) // 2]]
    tok = T.train_specgate(sample)
    exp = os.path.join(W, "export")
    tokdir = os.path.join(W, "tok")
    cfg = {"bos_token": T.BOS, "eos_token": T.IM_END, "pad_token": T.PAD, "unk_token": None,
           "add_bos_token": True, "add_eos_token": False, "model_max_length": 1024,
           "clean_up_tokenization_spaces": False, "chat_template": T.CHAT_TEMPLATE,
           "tokenizer_class": "PreTrainedTokenizerFast"}
    T.save_with_config(tok, tokdir, cfg)
    meta = {"vocab_size": tok.get_vocab_size(), "bos": tok.token_to_id(T.BOS),
            "eos": [tok.token_to_id(T.IM_END), tok.token_to_id(T.EOT)], "pad": tok.token_to_id(T.PAD)}
    json.dump(meta, open(os.path.join(tokdir, "meta.json"), "w"))
    print("tokenizer", meta, f"{time.time()-t0:.0f}s", flush=True)

    # 3. tokenize
    n_val = max(50, len(alldocs) // 100)
    enc = tok.encode_batch([d for d, _ in alldocs], add_special_tokens=False)
    bos, eot = meta["bos"], tok.token_to_id(T.EOT)
    def stream(encs):
        out = []
        for e in encs:
            out.append(bos); out.extend(e.ids); out.append(eot)
        return np.array(out, dtype=np.uint16)
    data = os.path.join(W, "data")
    os.makedirs(data, exist_ok=True)
    stream(enc[n_val:]).tofile(os.path.join(data, "train.bin"))
    stream(enc[:n_val]).tofile(os.path.join(data, "val.bin"))
    print(f"tokenized {sum(len(e.ids) for e in enc)/1e6:.1f}M tokens {time.time()-t0:.0f}s", flush=True)

    # 4. train both models concurrently
    procs = {}
    for size in ("target", "draft"):
        procs[size] = subprocess.Popen([sys.executable, os.path.join(HERE, "train.py"), "--data", data, "--tok", tokdir,
                                        "--out", os.path.join(W, size), "--size", size,
                                        "--max-seconds", str(a.max_seconds)])
    # meanwhile: goldens on the CPU
    import torch
    torch.set_num_threads(6)
    import goldens as G
    G.random_models(os.path.join(exp, "engine/testdata/hf"))
    english = [d for d in docs["english"] if 10 < len(d) < 400]
    strings_common = G.golden_strings(english, docs["go"], ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|end_of_text|>"])
    tdir = os.path.join(exp, "tokenizer/testdata")
    T.save_with_config(tok, os.path.join(tdir, "specgate"), cfg)
    G.tokenizer_golden(tok, os.path.join(tdir, "specgate"), strings_common)
    g2 = T.train_gpt2style(sample[:20000])
    T.save_with_config(g2, os.path.join(tdir, "gpt2style"), {"bos_token": None, "eos_token": "<|endoftext|>",
                                                            "add_bos_token": False, "tokenizer_class": "PreTrainedTokenizerFast"})
    G.tokenizer_golden(g2, os.path.join(tdir, "gpt2style"),
                       G.golden_strings(english, docs["go"], ["<|endoftext|>"], seed=6))
    sp = T.train_sentencepiece(sample[:20000])
    T.save_with_config(sp, os.path.join(tdir, "sentencepiece"), {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                                                "add_bos_token": True, "tokenizer_class": "LlamaTokenizerFast"})
    G.tokenizer_golden(sp, os.path.join(tdir, "sentencepiece"),
                       G.golden_strings(english, docs["go"], ["<s>", "</s>", "<unk>"], seed=7))
    os.makedirs(os.path.join(tdir, "chat"), exist_ok=True)
    G.chat_goldens(os.path.join(tdir, "chat/golden.jsonl"), T.CHAT_TEMPLATE)
    G.bert_golden(english[:30000], os.path.join(exp, "cache/bert/testdata/minibert"))
    print(f"cpu goldens done {time.time()-t0:.0f}s", flush=True)
    for size, p in procs.items():
        rc = p.wait()
        if rc != 0:
            sys.exit(f"training {size} failed rc={rc}")

    # 5. export
    for size in ("target", "draft"):
        dst = os.path.join(exp, "models", "specgate-" + size)
        shutil.copytree(os.path.join(W, size, "model"), dst)
        T.save_with_config(tok, dst, cfg)
        for f in ("loss.csv", "train_summary.json"):
            shutil.copy(os.path.join(W, size, f), dst)
        G.shipped_model(dst, tok, os.path.join(exp, "engine/testdata/hf/specgate-" + size), "models/specgate-" + size)
        try:
            plot(os.path.join(dst, "loss.csv"), os.path.join(dst, "loss.png"), "specgate-" + size)
        except Exception as e:  # matplotlib may be absent; the dev machine plots it then
            print("plot skipped:", e, flush=True)
    print(f"all done {time.time()-t0:.0f}s", flush=True)


def plot(csv_path, png, title):
    import csv
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(open(csv_path)))
    tr = [(int(r["tokens"]) / 1e6, float(r["train_loss"])) for r in rows]
    va = [(int(r["tokens"]) / 1e6, float(r["val_loss"])) for r in rows if r["val_loss"]]
    plt.figure(figsize=(6, 4))
    plt.plot(*zip(*tr), label="train")
    plt.plot(*zip(*va), "o-", label="validation")
    plt.xlabel("tokens seen (M)"); plt.ylabel("cross-entropy (nats)"); plt.title(title)
    plt.legend(); plt.grid(alpha=0.3); plt.tight_layout(); plt.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
