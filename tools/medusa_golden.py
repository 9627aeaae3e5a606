"""Golden files for the Go Medusa loader (medusa/golden_test.go).

Builds Medusa heads with the module structure of the Medusa reference implementation
(FasterDecoding/Medusa, medusa/model/medusa_model.py): an nn.ModuleList of heads, each an
nn.Sequential of `[ResBlock(hidden)] * medusa_num_layers` (one block object repeated, as the
reference does) followed by nn.Linear(hidden, vocab, bias=False) -- or, in the legacy layout,
no Linear: the base model's lm_head is applied to the blocks' output. Weights are random.
Saves what the reference's training script saves (the ModuleList's state dict, in safetensors:
medusa_lm_head.safetensors, keys "{head}.{layer}.linear.weight|bias" and "{head}.{L}.weight"),
a config.json with medusa_num_heads / medusa_num_layers, random hidden rows, and the heads'
logits computed by the PyTorch modules in float64.

usage: python3 tools/medusa_golden.py medusa/testdata/golden
Cases:
  base/    a tiny random LlamaForCausalLM (tied embeddings), fp16, the target for the cases
  own/     3 heads x 2 layers (the block repeated), own vocab projection, float32 weights
  shared/  2 heads x 1 layer, no projection (base lm_head), float16 weights, keys prefixed
           "medusa_head." (a whole-model state dict's naming)
  pt/      own/'s heads saved with torch.save as medusa_lm_head.pt (the reference's other format)
  frspec/  2 heads x 2 distinct blocks, own projections over the N = 48 most frequent tokens of a
           token_frequency.json (FR-Spec; ties by lower id, rows in id order: specgate's
           head_vocab), float16 weights; golden.safetensors also holds "ids" (the token of every
           projection row, as float32), picked here independently of the Go loader.
  int8/    FR-Spec heads as frspec/ (3 heads x 2 distinct blocks, 40 rows) with every 2-D weight
           quantized here by PyTorch to I8 with a per-row F32 scale "<name>_scale" (symmetric,
           scale = max|row| / 127, q = round(w / scale); one all-zero projection row: scale 0);
           biases F16; logits of the dequantized weights in float64 (what specgate's loader reads:
           medusa/heads.go, medusa.QuantizeInt8).
  `--only frspec` / `--only int8` writes just that case (the others stay byte-identical when all
  are written).
"""
import json, os, sys
import torch
import torch.nn as nn
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

H, V = 64, 320


class ResBlock(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        torch.nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.act(self.linear(x))


def heads(K, L, own):
    return nn.ModuleList([
        nn.Sequential(*([ResBlock(H)] * L), *([nn.Linear(H, V, bias=False)] if own else []))
        for _ in range(K)])


def randomize(m, g):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.15 if p.dim() == 2 else 0.5))


def write(out, name, m, K, L, dtype, prefix, base_lm, g, extra_cfg=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    m = m.to(dtype)
    sd = {prefix + k: v.detach().contiguous().clone() for k, v in m.state_dict().items()}
    save_file(sd, os.path.join(d, "medusa_lm_head.safetensors"))
    cfg = {"medusa_num_heads": K, "medusa_num_layers": L, "base_model_name_or_path": "../base"}
    cfg.update(extra_cfg or {})
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    hidden = torch.randn(6, H, generator=g) * 1.5
    hidden[0] = 0  # a zero row
    m64 = m.to(torch.float64)
    with torch.no_grad():
        outs = []
        for i in range(K):
            x = m64[i](hidden.to(torch.float64))
            if base_lm is not None:
                x = x @ base_lm.to(torch.float64).T
            outs.append(x)
    save_file({"hidden": hidden.float().contiguous(), "logits": torch.stack(outs).float().contiguous()},
              os.path.join(d, "golden.safetensors"))
    return m


def main():
    out = sys.argv[1]
    g = torch.Generator().manual_seed(1717)
    torch.manual_seed(1717)
    cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    base = LlamaForCausalLM(cfg).to(torch.float16)
    base.save_pretrained(os.path.join(out, "base"), safe_serialization=True)
    lm = base.lm_head.weight.detach().clone()

    own = heads(3, 2, True)
    randomize(own, g)
    own = write(out, "own", own, 3, 2, torch.float32, "", None, g)
    pd = os.path.join(out, "pt")
    os.makedirs(pd, exist_ok=True)
    torch.save(own.to(torch.float32).state_dict(), os.path.join(pd, "medusa_lm_head.pt"))
    json.dump({"medusa_num_heads": 3, "medusa_num_layers": 2}, open(os.path.join(pd, "config.json"), "w"))

    sh = heads(2, 1, False)
    randomize(sh, g)
    write(out, "shared", sh, 2, 1, torch.float16, "medusa_head.", lm, g)
    print("golden files written to", out)


def frspec(out):
    """FR-Spec heads: distinct blocks (not the reference's repeated one) and an own projection
    holding only N rows, the N most frequent tokens of token_frequency.json."""
    g = torch.Generator().manual_seed(4242)
    N, K, L = 48, 2, 2
    # counts with many ties (so the tie rule matters) and some zeros
    counts = [int(x) for x in torch.randint(0, 12, (V,), generator=g)]
    ids = sorted(sorted(range(V), key=lambda i: (-counts[i], i))[:N])
    m = nn.ModuleList([nn.Sequential(*[ResBlock(H) for _ in range(L)], nn.Linear(H, N, bias=False)) for _ in range(K)])
    randomize(m, g)
    d = os.path.join(out, "frspec")
    os.makedirs(d, exist_ok=True)
    m = m.to(torch.float16)
    save_file({k: v.detach().contiguous().clone() for k, v in m.state_dict().items()},
              os.path.join(d, "medusa_lm_head.safetensors"))
    json.dump({"medusa_num_heads": K, "medusa_num_layers": L, "base_model_name_or_path": "../base",
               "specgate": {"token_frequency": "token_frequency.json", "head_vocab": N}},
              open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"counts": counts}, open(os.path.join(d, "token_frequency.json"), "w"))
    hidden = torch.randn(5, H, generator=g) * 1.5
    m64 = m.to(torch.float64)
    with torch.no_grad():
        logits = torch.stack([m64[i](hidden.to(torch.float64)) for i in range(K)])
    save_file({"hidden": hidden.float().contiguous(), "logits": logits.float().contiguous(),
               "ids": torch.tensor(ids, dtype=torch.float32)}, os.path.join(d, "golden.safetensors"))
    print("frspec golden written to", d)


def int8(out):
    """Int8 FR-Spec heads: PyTorch quantizes (per row, symmetric) and computes the reference
    logits from the dequantized weights."""
    g = torch.Generator().manual_seed(8118)
    N, K, L = 40, 3, 2
    counts = [int(x) for x in torch.randint(0, 9, (V,), generator=g)]
    m = nn.ModuleList([nn.Sequential(*[ResBlock(H) for _ in range(L)], nn.Linear(H, N, bias=False)) for _ in range(K)])
    randomize(m, g)
    with torch.no_grad():
        m[1][L].weight[7].zero_()  # an all-zero row: scale 0
    d = os.path.join(out, "int8")
    os.makedirs(d, exist_ok=True)
    sd, deq = {}, {}
    for k, v in m.state_dict().items():
        v = v.detach().float()
        if v.dim() == 2:
            amax = v.abs().amax(1)
            scale = amax / 127
            q = torch.where(scale[:, None] > 0, torch.round(v / scale.clamp(min=1e-30)[:, None]), torch.zeros_like(v))
            q = q.clamp(-127, 127).to(torch.int8)
            sd[k] = q.contiguous()
            sd[k + "_scale"] = scale.float().contiguous()
            deq[k] = q.to(torch.float64) * scale.to(torch.float64)[:, None]
        else:
            sd[k] = v.to(torch.float16).contiguous()
            deq[k] = sd[k].to(torch.float64)
    save_file(sd, os.path.join(d, "medusa_lm_head.safetensors"))
    json.dump({"medusa_num_heads": K, "medusa_num_layers": L, "base_model_name_or_path": "../base",
               "specgate": {"token_frequency": "token_frequency.json", "head_vocab": N}},
              open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"counts": counts}, open(os.path.join(d, "token_frequency.json"), "w"))
    m64 = m.to(torch.float64)
    m64.load_state_dict(deq)
    hidden = torch.randn(5, H, generator=g) * 1.5
    with torch.no_grad():
        logits = torch.stack([m64[i](hidden.to(torch.float64)) for i in range(K)])
    ids = sorted(sorted(range(V), key=lambda i: (-counts[i], i))[:N])
    save_file({"hidden": hidden.float().contiguous(), "logits": logits.float().contiguous(),
               "ids": torch.tensor(ids, dtype=torch.float32)}, os.path.join(d, "golden.safetensors"))
    print("int8 golden written to", d)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2:] == ["--only", "frspec"]:
        frspec(sys.argv[1])
    elif len(sys.argv) > 2 and sys.argv[2:] == ["--only", "int8"]:
        int8(sys.argv[1])
    else:
        main()
        frspec(sys.argv[1])
        int8(sys.argv[1])
