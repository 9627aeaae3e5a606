"""Independent reference for int4 group-wise weight-only quantization (issue #15 point 5;
the CUDA backend's int4 path, model.QuantizeI4).

Quantizes a Llama checkpoint with numpy (its own implementation, not ours): per group of
32 consecutive columns of a row, with m the value of largest magnitude (the first of equals),
s = float16(m / -8) (llama.cpp Q4_0's scale rule; float32 division, then rounded to binary16
as numpy does: nearest even; +0 for a group of zeros), q = round half away from zero of
w / float32(s) (float32 division), clamped to [-8, 7]; packed two per byte (column 2j in the
low nibble, 2j+1 in the high one, each as q + 8); every projection (q/k/v/o, gate/up/down)
and the LM head (tied: an int4 copy of the embedding table for the projection only). Then runs HF
transformers (float32, eager, CPU) on the dequantized weights s*q and writes, like
tools/quant/int8_golden.py:

  OUT/golden.json   {"sequences", "logits_file", "vocab_size", "greedy_prompt", "greedy",
                     "quant_sha256": {tensor name: sha256 of the packed bytes + the binary16 scales, little-endian}}
  OUT/logits.f32    float32 logits of each sequence, concatenated
  OUT/model_dir     the model directory, relative to the repository root

Run: python3 tools/quant/int4_golden.py --model models/specgate-target \
        --sequences engine/testdata/hf/specgate-target/golden.json --out engine/testdata/int4/specgate-target
"""
import argparse, hashlib, json, os
import numpy as np
import torch
from transformers import LlamaForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False

PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


G = 32


def quantize(w):
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    assert cols % G == 0, (rows, cols)
    g = w.reshape(rows, cols // G, G)
    idx = np.argmax(np.abs(g), axis=2)  # first of equals
    m = np.take_along_axis(g, idx[:, :, None], axis=2)[:, :, 0]
    s32 = (m / np.float32(-8)).astype(np.float32)
    s32[m == 0] = np.float32(0)  # a group of zeros: +0
    s16 = s32.astype(np.float16)
    s = s16.astype(np.float32)
    safe = np.where(s == 0, np.float32(1), s).astype(np.float32)
    x = (g / safe[:, :, None]).astype(np.float32).astype(np.float64)
    q = (np.sign(x) * np.floor(np.abs(x) + 0.5)).clip(-8, 7).astype(np.int8)
    q[s == 0] = 0
    q = q.reshape(rows, cols)
    packed = (q[:, 0::2] + 8).astype(np.uint8) | ((q[:, 1::2] + 8).astype(np.uint8) << 4)
    return q, s16, packed


def digest(packed, s16):
    return hashlib.sha256(packed.tobytes() + s16.astype("<f2").tobytes()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--sequences", required=True, help="a golden.json whose sequences and greedy_prompt to use")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="eager").eval()
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    tied = model.config.tie_word_embeddings
    names = [k for k in sd if k.endswith(".weight") and any(p in k for p in PROJ)]
    names.append("lm_head.weight")
    quant, hashes = {}, {}
    for n in names:
        src = sd["model.embed_tokens.weight"] if (n == "lm_head.weight" and tied) else sd[n]
        q, s16, packed = quantize(src)
        quant[n] = (q, s16)
        hashes[n] = digest(packed, s16)
    with torch.no_grad():
        for n, (q, s16) in quant.items():
            rows, cols = q.shape
            deq = (q.astype(np.float32).reshape(rows, cols // G, G) * s16.astype(np.float32)[:, :, None]).reshape(rows, cols)
            deq = torch.from_numpy(deq)
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
