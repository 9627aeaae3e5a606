"""Qwen2 goldens for the engine: random-weight Qwen2ForCausalLM checkpoints
(small configs) and their HF transformers logits, in the format of
engine/testdata/hf/README.md (the Llama goldens' format, written by the same
write_logit_golden of tools/train/goldens.py).

Run on the GPU machine's CPU (float32, eager attention), from the repository root:
    python3 tools/goldens/qwen2.py engine/testdata/hf
"""
import os, random, sys, zlib

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "train"), "tools/train"]
from goldens import write_logit_golden  # noqa: E402

CASES = {
    # GQA (8 query heads over 2 KV heads, head_dim 16), untied, rope_theta 1e6, F32 weights
    "rand-qwen2": dict(cfg=dict(vocab_size=400, hidden_size=128, intermediate_size=224, num_hidden_layers=2,
                                num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False,
                                rope_theta=1000000.0, max_position_embeddings=1024),
                       dtype="float32", lens=[1, 9, 40, 120]),
    # MQA (1 KV head), tied embeddings, 3 layers, F16 weights (exact on the GPU)
    "rand-qwen2-tied": dict(cfg=dict(vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                                     num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True,
                                     rope_theta=10000.0, max_position_embeddings=512),
                            dtype="float16", lens=[1, 9, 40]),
}


def main(out_root):
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, spec in CASES.items():
        torch.manual_seed(zlib.crc32(name.encode()))
        cfg = Qwen2Config(rms_norm_eps=1e-6, initializer_range=0.08, bos_token_id=1, eos_token_id=2,
                          use_sliding_window=False, attn_implementation="eager", **spec["cfg"])
        model = Qwen2ForCausalLM(cfg).float().eval()
        nbias = 0
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif n.endswith(".bias"):  # q/k/v biases: HF initialises them to 0; make them matter
                    p.copy_(0.5 * torch.randn_like(p))
                    nbias += 1
                # round to the storage dtype so the fp32 reference sees exactly the stored weights
                p.copy_(p.to(getattr(torch, spec["dtype"])).float())
        assert nbias == 3 * cfg.num_hidden_layers, nbias
        out = os.path.join(out_root, name)
        model.to(getattr(torch, spec["dtype"])).save_pretrained(out, safe_serialization=True)
        # reload in fp32 (a fresh load computes the rotary inv_freq in full precision)
        model = Qwen2ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
        rng = random.Random(name)
        V = cfg.vocab_size
        seqs = [[rng.randrange(V) for _ in range(L)] for L in spec["lens"]]
        prompt = [rng.randrange(V) for _ in range(6)]
        write_logit_golden(model, out, seqs, prompt, V, {"dtype": spec["dtype"], "architecture": "Qwen2ForCausalLM"})
        print(f"golden {name}: {sum(p.numel() for p in model.parameters())} params, "
              f"torch {torch.__version__}", flush=True)
    import transformers
    print("transformers", transformers.__version__)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "engine/testdata/hf")
