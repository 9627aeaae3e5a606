#!/usr/bin/env python3
"""HF transformers static batching, the peer of `specgate bench serve --peer hf`:
for each batch size B, B prompts of --prompt-tokens random ids generate
--max-tokens tokens each in one generate() call (sampling at --temperature,
no early stop), on a Llama shape with random fp16 weights (the same shape and
vocabulary as bench serve's in-process server; the weights are not the same
values, which does not change the speed). One short warm-up call per batch
size, then --reps timed calls; prints aggregate tokens/s (B x max-tokens / time)
and the per-token step time.

usage: python3 tools/bench/hf_serve.py [--concurrency 1,8,32,64] [--max-tokens 128] [--vocab 8192]
"""
import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4,
                           max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="tinyllama-1.1b", choices=sorted(SHAPES))
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--attn", default="sdpa", help="attention implementation (sdpa or eager)")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(**SHAPES[a.shape], vocab_size=a.vocab, torch_dtype="float16")
    cfg._attn_implementation = a.attn
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).half().eval()
    print(f"hf_serve: torch {torch.__version__}, transformers {__import__('transformers').__version__}, "
          f"{torch.cuda.get_device_name()}, shape {a.shape}, vocab {a.vocab}, fp16, attention {a.attn}, "
          f"static batches, generate() sampling at temperature {a.temperature}", flush=True)
    for b in [int(x) for x in a.concurrency.split(",")]:
        prompt = torch.randint(0, a.vocab, (b, a.prompt_tokens), device="cuda")

        def run(n):
            with torch.inference_mode():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                     min_new_tokens=n, do_sample=True, temperature=a.temperature,
                                     top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=None)
                torch.cuda.synchronize()
                assert out.shape == (b, a.prompt_tokens + n), out.shape
                return time.perf_counter() - t0

        run(8)  # warm-up (short)
        t = min(run(a.max_tokens) for _ in range(a.reps))
        print(f"hf static batch {b:3d}: {b * a.max_tokens} tokens in {t:.2f} s: {b * a.max_tokens / t:8.1f} tok/s aggregate, "
              f"{t / a.max_tokens * 1e3:.2f} ms per step (prefill included)", flush=True)


if __name__ == "__main__":
    main()
