"""The corpus as token streams, shared by the distillation scripts (distill.py, distill_gen.py).

corpus_streams unpacks the tools/data/prepare.py corpus (an xz tar of go/english/chat.txt,
documents separated by the record separator line), shuffles the documents (seed 11), holds out
the first 1% (at least 50) and returns both parts as one int64 tensor each on dev, every document
wrapped in BOS ... end-of-text of the target's tokenizer.
"""
import os, random, subprocess
import torch
from tokenizers import Tokenizer

RS = "\n\x1e\n"


def corpus_streams(corpus, work, tokenizer_dir, dev):
    """Returns (train, val, tok, bos, eot): train/val are 1-D int64 tensors on dev."""
    raw = os.path.join(work, "raw")
    os.makedirs(raw, exist_ok=True)
    subprocess.check_call(["tar", "xJf", os.path.abspath(corpus), "-C", raw])
    docs = [d for n in ("go", "english", "chat") for d in open(os.path.join(raw, n + ".txt"), encoding="utf-8").read().split(RS)]
    random.Random(11).shuffle(docs)
    tok = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    bos, eot = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>")
    enc = tok.encode_batch(docs, add_special_tokens=False)
    n_val = max(50, len(docs) // 100)

    def stream(es):
        out = []
        for e in es:
            out.append(bos); out.extend(e.ids); out.append(eot)
        return torch.tensor(out, dtype=torch.int64, device=dev)
    return stream(enc[n_val:]), stream(enc[:n_val]), tok, bos, eot
