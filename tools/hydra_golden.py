"""Golden files for the Go Hydra loader (HYDRA-FORMAT.md, "Golden"; issue #17).

Hydra heads (Ankner et al. 2024): head i reads the target's hidden row h and the tokens of the path
it extends, x_1 (the pending token) .. x_{i+1}, and predicts x_{i+2}. This script builds random
heads in specgate's Hydra directory format, computes their logits in float64 with the PyTorch
modules below (written from the format's text and the paper, independently of anything in Go: this
IS the reference), and writes:

  DIR/config.json                 HydraModel config (hydra_num_heads, hydra_num_layers, specgate.*)
  DIR/hydra_lm_head.safetensors   the heads' weights (fp16, or int8 + "<name>_scale" F32)
  DIR/token_frequency.json        counts; the projection rows are the head_vocab most frequent
                                  tokens (ties by lower id), in id order
  DIR/inputs.safetensors          "hidden" [N, H] F32 (row 0 all zero), "tokens" [N, K] I32
                                  (x_1 .. x_K of each row's path)
  DIR/logits.safetensors          "logits.{i}" [N, R] F32: head i given hidden and x_1..x_{i+1},
                                  computed in float64 from the stored (dequantized) weights;
                                  "ids" [R] I32: the token id of each projection row

The target is the tiny golden target `medusa/testdata/golden/base` (H = 64, vocab 320, tied
embeddings, fp16), read here from its model.safetensors: E = model.embed_tokens.weight (also the
lm_head). H = 384 (the shipped target) would make K = 3, L = 2 heads 1-6 MB per directory.

Cases (K = 3 heads, L = 2 blocks, head_vocab R = 40):
  hydra/          the reference layout (zankner/Hydra's HydraMLP): block 0 of head i is
                  Linear(H + (i+1)H, H) plus a res_connection Linear of the same shape, both with
                  bias; c(x) = E[x] (no embed_proj); own projections [R, H] with bias; fp16.
  hydra-compact/  compact layout: hydra_embed_proj [32, H] (c(x) = P E[x]), no res_connection
                  (block 0 adds h itself); own projections with bias; int8: every 2-D weight
                  (hydra_embed_proj included) I8 with a per-row F32 scale (symmetric, scale =
                  max|row| / 127, q = round(w / scale); one all-zero projection row: scale 0),
                  biases F16.
  hydra-shared/   compact layout, r = 32, fp16, share_lm_head: no hydra_lm_head.* keys; the
                  projection is the target's lm_head (= E) restricted to the R rows.

usage: python3 tools/hydra_golden.py medusa/testdata/golden
"""
import json, os, sys
import torch
from safetensors.torch import load_file, save_file

K, L, R = 3, 2, 40
SILU = torch.nn.functional.silu


def rand(g, *shape, std=1.0):
    return torch.randn(*shape, generator=g, dtype=torch.float64) * std


def make_weights(g, H, r, ref, own_proj):
    """Random weights, named as the directory format names them (float64 masters)."""
    w = {}
    if not ref:
        # c(x) = P E[x]: scaled so that c is O(1) for E's ~0.02 entries, so that a wrong token or a
        # wrong order of the path shows in the logits far above the 1e-4 tolerance.
        w["hydra_embed_proj.weight"] = rand(g, r, H, std=6.0)
    for i in range(K):
        cols = H + (i + 1) * r
        lin = rand(g, H, cols, std=0.15)
        if ref:
            lin[:, H:] *= 30  # E[x] entries are ~0.02: make the token part count
        w[f"hydra_mlp.{i}.0.linear.weight"] = lin
        w[f"hydra_mlp.{i}.0.linear.bias"] = rand(g, H, std=0.5)
        if ref:
            res = rand(g, H, cols, std=0.15)
            res[:, H:] *= 30
            w[f"hydra_mlp.{i}.0.res_connection.weight"] = res
            w[f"hydra_mlp.{i}.0.res_connection.bias"] = rand(g, H, std=0.5)
        for j in range(1, L):
            w[f"hydra_mlp.{i}.{j}.linear.weight"] = rand(g, H, H, std=0.15)
            w[f"hydra_mlp.{i}.{j}.linear.bias"] = rand(g, H, std=0.5)
        if own_proj:
            w[f"hydra_lm_head.{i}.weight"] = rand(g, R, H, std=0.15)
            w[f"hydra_lm_head.{i}.bias"] = rand(g, R, std=0.5)
    return w


def store(w, int8):
    """What goes into the file, and the float64 values the file holds (the reference reads those)."""
    sd, deq = {}, {}
    for k, v in w.items():
        if int8 and v.dim() == 2:
            v32 = v.float()
            scale = v32.abs().amax(1) / 127
            q = torch.where(scale[:, None] > 0, torch.round(v32 / scale.clamp(min=1e-30)[:, None]), torch.zeros_like(v32))
            q = q.clamp(-127, 127).to(torch.int8).contiguous()
            sd[k], sd[k + "_scale"] = q, scale.float().contiguous()
            deq[k] = q.to(torch.float64) * scale.to(torch.float64)[:, None]
        else:
            sd[k] = v.to(torch.float16).contiguous()
            deq[k] = sd[k].to(torch.float64)
    return sd, deq


def reference_logits(deq, E, lm_rows, hidden, tokens, H, ref):
    """The Hydra forward, float64. Head i: u = [h, c(x_1), ..., c(x_{i+1})];
    block 0: y = R(u) + SiLU(W0 u + b0), R(u) = res_connection(u) (reference layout) or h (compact);
    block j >= 1: y = y + SiLU(Wj y + bj); logits = Wp y + bp (own) or lm_rows y (shared)."""
    emb = E[tokens.long()]  # [N, K, H]
    if ref:
        c = emb
    else:
        c = torch.einsum("rh,nkh->nkr", deq["hydra_embed_proj.weight"], emb)
    out = []
    for i in range(K):
        u = torch.cat([hidden] + [c[:, j] for j in range(i + 1)], dim=-1)
        pre = u @ deq[f"hydra_mlp.{i}.0.linear.weight"].T + deq[f"hydra_mlp.{i}.0.linear.bias"]
        if ref:
            base = u @ deq[f"hydra_mlp.{i}.0.res_connection.weight"].T + deq[f"hydra_mlp.{i}.0.res_connection.bias"]
        else:
            base = u[:, :H]
        y = base + SILU(pre)
        for j in range(1, L):
            y = y + SILU(y @ deq[f"hydra_mlp.{i}.{j}.linear.weight"].T + deq[f"hydra_mlp.{i}.{j}.linear.bias"])
        if f"hydra_lm_head.{i}.weight" in deq:
            lg = y @ deq[f"hydra_lm_head.{i}.weight"].T + deq[f"hydra_lm_head.{i}.bias"]
        else:
            lg = y @ lm_rows.T
        out.append(lg)
    return out


def case(out, name, seed, ref, int8, own_proj, r_compact=32):
    base = load_file(os.path.join(out, "base", "model.safetensors"))
    E = base["model.embed_tokens.weight"].to(torch.float64)  # tied: also the lm_head
    V, H = E.shape
    r = H if ref else r_compact
    g = torch.Generator().manual_seed(seed)
    counts = [int(x) for x in torch.randint(0, 10, (V,), generator=g)]  # many ties, some zeros
    ids = sorted(sorted(range(V), key=lambda t: (-counts[t], t))[:R])
    w = make_weights(g, H, r, ref, own_proj)
    if int8 and own_proj:
        w["hydra_lm_head.1.weight"][7].zero_()  # an all-zero row: scale 0
    sd, deq = store(w, int8)
    N = 6
    hidden = rand(g, N, H, std=1.5).float().to(torch.float64)
    hidden[0] = 0
    tokens = torch.randint(0, V, (N, K), generator=g, dtype=torch.int32)
    tokens[1] = tokens[1, 0]  # one path of one token repeated
    tokens[2, 0] = ids[0]  # path tokens inside and outside the projection rows
    lm_rows = E[torch.tensor(ids)]
    logits = reference_logits(deq, E, lm_rows, hidden, tokens, H, ref)
    # The golden must be able to fail: the path tokens must matter (reversed order, and x_1 alone).
    alt = reference_logits(deq, E, lm_rows, hidden, tokens.flip(1), H, ref)
    for i in range(1, K):
        d = (alt[i] - logits[i]).abs().max().item()
        assert d > 0.05, f"{name}: head {i} logits barely depend on the path order ({d})"
    alt0 = reference_logits(deq, E, lm_rows, hidden, (tokens + 1) % V, H, ref)
    d0 = (alt0[0] - logits[0]).abs().max().item()
    assert d0 > 0.05, f"{name}: head 0 logits barely depend on x_1 ({d0})"
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    save_file(sd, os.path.join(d, "hydra_lm_head.safetensors"))
    sg = {"head_vocab": R, "share_lm_head": not own_proj, "token_frequency": "token_frequency.json",
          "tree": [[0], [0, 0], [1], [0, 0, 0], [0, 1]], "nodes": 5}
    if not ref:
        sg["embed_dim"] = r
    if int8:
        sg["quantization"] = "int8 per-row (weights I8, <name>_scale F32), tools/hydra_golden.py"
    cfg = {"architectures": ["HydraModel"], "base_model_name_or_path": "../base",
           "hidden_size": H, "vocab_size": V, "hydra_num_heads": K, "hydra_num_layers": L,
           "hydra_head_arch": "mlp", "grounded_heads": True,
           "torch_dtype": "int8" if int8 else "float16", "specgate": sg}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"source": "random (tools/hydra_golden.py)", "counts": counts},
              open(os.path.join(d, "token_frequency.json"), "w"))
    save_file({"hidden": hidden.float().contiguous(), "tokens": tokens.contiguous()},
              os.path.join(d, "inputs.safetensors"))
    lo = {f"logits.{i}": logits[i].float().contiguous() for i in range(K)}
    lo["ids"] = torch.tensor(ids, dtype=torch.int32)
    save_file(lo, os.path.join(d, "logits.safetensors"))
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{name}: {size} bytes, max |logit| " +
          " ".join(f"{logits[i].abs().max().item():.2f}" for i in range(K)) +
          f"; path-order sensitivity head0 {d0:.3f}", flush=True)


def main():
    out = sys.argv[1]
    case(out, "hydra", 1701, ref=True, int8=False, own_proj=True)
    case(out, "hydra-compact", 1702, ref=False, int8=True, own_proj=True)
    case(out, "hydra-shared", 1703, ref=False, int8=False, own_proj=False)
    print("hydra golden files written to", out)


if __name__ == "__main__":
    main()
