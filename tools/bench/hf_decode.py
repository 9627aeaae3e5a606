#!/usr/bin/env python3
"""Batch-1 greedy decode tokens/s of HF transformers on a Llama shape with
random fp16 weights: (1) eager attention with the dynamic cache, one
model() call per token; (2) static cache + torch.compile through generate().

Same shape and protocol as `specgate bench-decode --shape tinyllama-1.1b
--random-weights`: prompt of 32 random tokens, 8 warm-up steps, 256 timed
steps. Prints one line per variant, then a summary line.

usage: python3 tools/bench/hf_decode.py [--tokens 256] [--prompt 32] [--skip-compile]
"""
import argparse
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                           max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0),
}


def sync():
    torch.cuda.synchronize()


def eager(model, prompt, warmup, tokens):
    with torch.inference_mode():
        out = model(input_ids=prompt, use_cache=True)
        pkv = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(warmup):
            out = model(input_ids=nxt, past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        sync()
        t0 = time.perf_counter()
        for _ in range(tokens):
            out = model(input_ids=nxt, past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            nxt.item()  # the host needs the token each step, as a server does
        sync()
        return tokens / (time.perf_counter() - t0)


def compiled(model, prompt, warmup, tokens):
    """Static cache + torch.compile through generate(). transformers compiles
    the decode step itself when the cache is static (its auto-compile); if
    that is unavailable we compile forward ourselves (no CUDA graphs, which
    clash with generate's in-place cache updates)."""
    model.generation_config.cache_implementation = "static"
    how = "generate auto-compile (static cache)"
    if not hasattr(model, "_valid_auto_compile_criteria"):
        model.forward = torch.compile(model.forward, mode="max-autotune-no-cudagraphs")
        how = "torch.compile(forward, max-autotune-no-cudagraphs)"

    def gen(n):
        with torch.inference_mode():
            sync()
            t0 = time.perf_counter()
            model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=0, eos_token_id=None)
            sync()
            return time.perf_counter() - t0

    for _ in range(3):  # compile (prefill and decode graphs) and warm up
        gen(warmup + 2)
    short = min(gen(1) for _ in range(3))
    full = min(gen(tokens + 1) for _ in range(2))
    return tokens / (full - short), how


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="tinyllama-1.1b", choices=sorted(SHAPES))
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--skip-compile", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(**SHAPES[a.shape], torch_dtype="float16")
    cfg._attn_implementation = "eager"
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).half().eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, a.prompt), device="cuda")
    print(f"hf_decode: torch {torch.__version__}, transformers "
          f"{__import__('transformers').__version__}, {torch.cuda.get_device_name()}, shape {a.shape}, fp16", flush=True)
    res = {}
    res["eager"] = eager(model, prompt, a.warmup, a.tokens)
    print(f"hf eager (dynamic cache): {res['eager']:.1f} tokens/s", flush=True)
    if not a.skip_compile:
        try:
            res["compile"], how = compiled(model, prompt, a.warmup, a.tokens)
            print(f"hf static cache + torch.compile [{how}]: {res['compile']:.1f} tokens/s", flush=True)
        except Exception as e:  # report and go on: the eager number still stands
            print(f"hf static cache + torch.compile failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    print("hf_decode summary: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in res.items()))


if __name__ == "__main__":
    main()
