"""Independent reference for int8 weight-only quantization (issue #15 point 5).

Quantizes a Llama checkpoint with numpy (its own implementation, not ours):
per output row s = max|w| / 127 (float32), q = round half away from zero of w / s
(float32 division), q in [-127, 127]; every projection (q/k/v/o, gate/up/down) and the
LM head (tied: an int8 copy of the embedding table for the projection only). Then runs
HF transformers (float32, eager, CPU) on the dequantized weights s*q and writes, like
tools/train/goldens.py:

  OUT/golden.json   {"sequences", "logits_file", "vocab_size", "greedy_prompt", "greedy",
                     "quant_sha256": {tensor name: sha256 of q bytes + little-endian scale bytes}}
  OUT/logits.f32    float32 logits of each sequence, concatenated
  OUT/model_dir     the model directory, relative to the repository root

With --checkpoint DIR (a `specgate quantize` output) it also reads that checkpoint with
the safetensors library and checks every int8 tensor and scale against its own.

Run: python3 tools/quant/int8_golden.py --model models/specgate-target \
        --sequences engine/testdata/hf/specgate-target/golden.json --out engine/testdata/int8/specgate-target
"""
import argparse, hashlib, json, os
import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import LlamaForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False

PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize(w):
    w = np.asarray(w, dtype=np.float32)
    amax = np.max(np.abs(w), axis=1)
    s = (amax / np.float32(127)).astype(np.float32)
    safe = np.where(s == 0, np.float32(1), s).astype(np.float32)
    x = (w / safe[:, None]).astype(np.float32).astype(np.float64)
    q = (np.sign(x) * np.floor(np.abs(x) + 0.5)).clip(-127, 127).astype(np.int8)
    q[s == 0] = 0
    return q, s


def digest(q, s):
    return hashlib.sha256(q.tobytes() + s.astype("<f4").tobytes()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--sequences", required=True, help="a golden.json whose sequences and greedy_prompt to use")
    ap.add_argument("--out", required=True)
    ap.add_argument("--checkpoint", help="a specgate quantize output directory to check")
    a = ap.parse_args()
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="eager").eval()
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    tied = model.config.tie_word_embeddings
    names = [k for k in sd if k.endswith(".weight") and any(p in k for p in PROJ)]
    names.append("lm_head.weight")
    quant, hashes = {}, {}
    for n in names:
        src = sd["model.embed_tokens.weight"] if (n == "lm_head.weight" and tied) else sd[n]
        q, s = quantize(src)
        quant[n] = (q, s)
        hashes[n] = digest(q, s)
    if a.checkpoint:
        ck = load_file(os.path.join(a.checkpoint, "model.safetensors"))
        n_ok = 0
        for n, (q, s) in quant.items():
            if n == "lm_head.weight" and tied:
                assert n not in ck, "tied checkpoint holds an lm_head"
                continue
            cq, cs = ck[n], ck[n + "_scale"]
            assert cq.dtype == np.int8 and cs.dtype == np.float32, (n, cq.dtype, cs.dtype)
            assert np.array_equal(cq, q), (n, int(np.sum(cq != q)))
            assert np.array_equal(cs.view(np.uint32), s.view(np.uint32)), (n, float(np.max(np.abs(cs - s))))
            n_ok += 1
        for k, v in ck.items():
            if not k.endswith("_scale") and k not in quant:
                assert v.dtype != np.int8, k
                assert np.array_equal(v.astype(np.float32), sd[k]), k
        print(f"checkpoint {a.checkpoint}: {n_ok} int8 tensors and their scales identical to numpy's; other tensors unchanged")
    with torch.no_grad():
        for n, (q, s) in quant.items():
            deq = torch.from_numpy(q.astype(np.float32) * s[:, None])
            if n == "lm_head.weight":
                if tied:
                    model.lm_head.weight = torch.nn.Parameter(deq)  # untie: the embedding stays as stored
                else:
                    model.lm_head.weight.copy_(deq)
            else:
                model.get_parameter(n).copy_(deq)
    g = json.load(open(a.sequences))
    seqs, gp = g["sequences"], g["greedy_prompt"]
    os.makedirs(a.out, exist_ok=True)
    chunks = []
    with torch.no_grad():
        for sq in seqs:
            chunks.append(model(input_ids=torch.tensor([sq])).logits[0].float().numpy().astype("<f4"))
        ids = list(gp)
        for _ in range(64):
            ids.append(int(torch.argmax(model(input_ids=torch.tensor([ids])).logits[0, -1])))
    np.concatenate([c.reshape(-1) for c in chunks]).tofile(os.path.join(a.out, "logits.f32"))
    out = {"sequences": seqs, "logits_file": "logits.f32", "vocab_size": model.config.vocab_size,
           "greedy_prompt": gp, "greedy": ids[len(gp):], "quant_sha256": hashes}
    json.dump(out, open(os.path.join(a.out, "golden.json"), "w"), indent=1)
    with open(os.path.join(a.out, "model_dir"), "w") as f:
        f.write(os.path.normpath(a.model) + "\n")  # relative to the repository root, as in engine/testdata/hf
    print(f"wrote {a.out}: {len(seqs)} sequences, {len(hashes)} quantized matrices, greedy {out['greedy'][:8]}...")


if __name__ == "__main__":
    main()
