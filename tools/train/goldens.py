"""Reference outputs from HF transformers / tokenizers for the Go tests.

All model references run on the CPU in float32 with eager attention, which is the
most exact reference available. Formats are documented in engine/testdata/hf/README.md.
"""
import json, os, random, zlib
import numpy as np
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False


def greedy(model, prompt, n=64):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            ids.append(int(torch.argmax(logits)))  # first max = lowest id on ties
    return ids[len(prompt):]


def write_logit_golden(model, out_dir, sequences, greedy_prompt, vocab, extra=None):
    os.makedirs(out_dir, exist_ok=True)
    chunks = []
    with torch.no_grad():
        for s in sequences:
            chunks.append(model(input_ids=torch.tensor([s])).logits[0].float().numpy().astype("<f4"))
    np.concatenate([c.reshape(-1) for c in chunks]).tofile(os.path.join(out_dir, "logits.f32"))
    g = {"sequences": sequences, "logits_file": "logits.f32", "vocab_size": vocab,
         "greedy_prompt": greedy_prompt, "greedy": greedy(model, greedy_prompt)}
    if extra:
        g.update(extra)
    json.dump(g, open(os.path.join(out_dir, "golden.json"), "w"))


RANDOM_CASES = {
    # 32 query heads over 4 kv heads, head_dim 8 (q width 256 != hidden 128), untied, F32, one file
    "rand-gqa": dict(cfg=dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                              num_attention_heads=32, num_key_value_heads=4, head_dim=8,
                              tie_word_embeddings=False, rope_theta=10000.0), dtype="float32", shard=None),
    # MQA (1 kv head), tied embeddings, weights stored as BF16
    "rand-tied": dict(cfg=dict(vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True,
                               rope_theta=10000.0), dtype="bfloat16", shard=None),
    # llama3 rope scaling, head_dim 32 with 8 heads over hidden 128, F16 weights
    "rand-llama3": dict(cfg=dict(vocab_size=384, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                 num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                                 tie_word_embeddings=False, rope_theta=500000.0, max_position_embeddings=2048,
                                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0,
                                               "original_max_position_embeddings": 64}),
                        dtype="float16", shard=None),
    # linear rope scaling, sharded checkpoint with an index file, F32
    "rand-linear": dict(cfg=dict(vocab_size=256, hidden_size=96, intermediate_size=192, num_hidden_layers=3,
                                 num_attention_heads=6, num_key_value_heads=3, tie_word_embeddings=False,
                                 rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0}),
                        dtype="float32", shard="200KB"),
}


def random_models(out_root):
    for name, spec in RANDOM_CASES.items():
        torch.manual_seed(zlib.crc32(name.encode()))
        cfg = LlamaConfig(rms_norm_eps=1e-5, initializer_range=0.08, bos_token_id=1, eos_token_id=2,
                          attn_implementation="eager", **spec["cfg"])
        model = LlamaForCausalLM(cfg).float().eval()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                # round to the storage dtype so the fp32 reference sees exactly the stored weights
                p.copy_(p.to(getattr(torch, spec["dtype"])).float())
        out = os.path.join(out_root, name)
        save_kw = {"safe_serialization": True}
        if spec["shard"]:
            save_kw["max_shard_size"] = spec["shard"]
        model.to(getattr(torch, spec["dtype"])).save_pretrained(out, **save_kw)
        # Reload rather than model.float(): .to(dtype) also rounded the rotary inv_freq
        # buffer, which a fresh fp32 load (what users run) computes in full precision.
        model = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
        rng = random.Random(name)
        V = cfg.vocab_size
        lens = [1, 9, 40] + ([150] if name == "rand-llama3" else [])
        seqs = [[rng.randrange(V) for _ in range(L)] for L in lens]
        prompt = [rng.randrange(V) for _ in range(6)]
        write_logit_golden(model, out, seqs, prompt, V, {"dtype": spec["dtype"]})
        print(f"golden {name}: {sum(p.numel() for p in model.parameters())} params", flush=True)


def shipped_model(model_dir, tok, out_dir, rel_model_dir):
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    texts = ["func main() {\n\tfmt.Println(\"hello, world\")\n}\n",
             "The quick brown fox jumps over the lazy dog.",
             None]
    seqs = [tok.encode(t, add_special_tokens=True).ids for t in texts[:2]]
    chat = tok.encode("<|im_start|>user\nWhat does the word \"ocean\" mean?<|im_end|>\n<|im_start|>assistant\n",
                      add_special_tokens=True).ids
    seqs.append(chat)
    prompt = tok.encode("package main\n\nimport (\n", add_special_tokens=True).ids
    write_logit_golden(model, out_dir, seqs, prompt, model.config.vocab_size)
    with open(os.path.join(out_dir, "model_dir"), "w") as f:
        f.write(rel_model_dir + "\n")


# ---------- tokenizer goldens ----------
CHINESE = ["你好，世界", "我爱编程", "今天天气很好。", "机器学习和深度学习", "北京是中国的首都",
           "这个函数返回一个错误", "请问现在几点了？", "数据库连接失败", "春眠不觉晓，处处闻啼鸟。",
           "程序员的日常：写代码、测试、部署", "中文 English 混合 text", "一二三四五六七八九十"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇩🇪🇯🇵", "❤️", "🚀 launch", "go 🐹 gopher", "✅ done ❌ failed",
         "🧑‍💻 coding", "😂😂😂", "🏳️‍🌈", "a😀b😀c"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\n\n\n", " \t ", "\u00a0", "\u3000", "   \n  ", "\t\t\n"]
WORDS = ["hello", "world", "I'm", "don't", "WE'LL", "they've", "123", "4567890", "3.14159", "x=y+1",
         "naïve", "café", "Straße", "ﬁle", "Ünïcödé", "e\u0301", "ё", "Привет", "γειά", "مرحبا",
         "नमस्ते", "안녕하세요", "こんにちは", "ＡＢＣ", "①②", "'s", "'S", "...", "--", "$$$", "#!", "<tag>"]


def golden_strings(english, go_docs, specials, seed=5):
    rng = random.Random(seed)
    out = ["", " ", "a", "\n", "  leading", "trailing  ", "Hello world", "Hello  world",
           "hello\n\nworld", "tab\tseparated\tvalues", "CamelCaseIdentifier", "snake_case_name"]
    for s in rng.sample(english, 160):
        s = s.strip()
        if len(s) > 240:
            s = s[:240]
        out.append(s)
    for d in rng.sample(go_docs, 60):
        lines = d.split("\n")
        i = rng.randrange(max(1, len(lines) - 8))
        out.append("\n".join(lines[i:i + rng.randint(1, 8)]))
    for _ in range(60):
        out.append(rng.choice(CHINESE) + rng.choice(["", " ", "，", "\n"]) + rng.choice(CHINESE + WORDS))
    for _ in range(50):
        out.append(" ".join(rng.choice(EMOJI + WORDS) for _ in range(rng.randint(1, 4))))
    for _ in range(70):
        parts = []
        for _ in range(rng.randint(2, 6)):
            parts.append(rng.choice(WORDS))
            parts.append(rng.choice(SPACES))
        out.append("".join(parts))
    for _ in range(60):
        sp = rng.choice(specials)
        out.append(rng.choice(WORDS) + rng.choice(["", " ", "\n"]) + sp + rng.choice(["", " ", "\n"]) +
                   rng.choice(WORDS + CHINESE))
    blocks = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x600, 0x6ff), (0x900, 0x97f),
              (0x3040, 0x30ff), (0x4e00, 0x4fff), (0xac00, 0xad00), (0x1f300, 0x1f64f), (0x300, 0x36f)]
    for _ in range(60):
        cs = []
        for _ in range(rng.randint(1, 12)):
            lo, hi = rng.choice(blocks)
            cs.append(chr(rng.randint(lo, hi)))
        out.append("".join(cs))
    return out


def tokenizer_golden(tok, out_dir, strings):
    with open(os.path.join(out_dir, "golden.jsonl"), "w", encoding="utf-8") as f:
        for s in strings:
            ids = tok.encode(s, add_special_tokens=False).ids
            ids_sp = tok.encode(s, add_special_tokens=True).ids
            f.write(json.dumps({"text": s, "ids": ids, "ids_special": ids_sp,
                                "decoded": tok.decode(ids, skip_special_tokens=False)}, ensure_ascii=False) + "\n")
    print(f"tokenizer golden {out_dir}: {len(strings)} strings", flush=True)


# ---------- chat templates ----------
TEMPLATES = {
    "chatml": ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
               "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
               "", "<|im_end|>"),
    "llama2": ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
               "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
               "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
               "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
               "{% if loop.index0 == 0 and system_message != false %}"
               "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
               "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
               "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
               "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}", "<s>", "</s>"),
    "llama3": ("{% set loop_messages = messages %}{% for message in loop_messages %}"
               "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
               "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
               "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
               "<|begin_of_text|>", "<|eot_id|>"),
    "zephyr": ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
               "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + "
               "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + "
               "message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n"
               "{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}", "<s>", "</s>"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is Go?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Hi there  "},
     {"role": "assistant", "content": " Hello! How can I help? "}, {"role": "user", "content": "Tell me a joke."}],
    [{"role": "user", "content": "你好 👋"}, {"role": "assistant", "content": "你好！"},
     {"role": "user", "content": "line1\nline2\n\tindented"}],
    [{"role": "user", "content": "first"}, {"role": "user", "content": "second (roles do not alternate)"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
     {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}],
]


def chat_goldens(out_path, ours_template):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models
    templates = dict(TEMPLATES)
    templates["specgate"] = (ours_template, "<|begin_of_text|>", "<|im_end|>")
    rows = []
    for fam, (tmpl, bos, eos) in templates.items():
        t = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                    bos_token=bos or None, eos_token=eos)
        t.chat_template = tmpl
        for conv in CONVERSATIONS:
            for agp in (False, True):
                row = {"family": fam, "template": tmpl, "bos_token": bos, "eos_token": eos, "messages": conv,
                       "add_generation_prompt": agp}
                try:
                    row["rendered"] = t.apply_chat_template(conv, tokenize=False, add_generation_prompt=agp)
                except Exception as e:  # the template raised (e.g. llama2 role alternation)
                    row["rendered"] = None
                    row["error"] = str(e)
                rows.append(row)
    with open(out_path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"chat goldens: {len(rows)} rows", flush=True)


# ---------- BERT (MiniLM layout) ----------
def bert_golden(texts_for_vocab, out_dir):
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel
    os.makedirs(out_dir, exist_ok=True)
    wp = BertWordPieceTokenizer(lowercase=True, strip_accents=None, clean_text=True, handle_chinese_chars=True)
    wp.train_from_iterator(texts_for_vocab, vocab_size=2000, min_frequency=2, show_progress=False)
    wp.enable_truncation(64)
    wp.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = BertConfig(vocab_size=wp.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=128, initializer_range=0.1,
                     hidden_act="gelu", layer_norm_eps=1e-12, attn_implementation="eager")
    torch.manual_seed(42)
    m = BertModel(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "LayerNorm.weight" in n:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "LayerNorm.bias" in n or n.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
    m.save_pretrained(out_dir, safe_serialization=True)
    texts = ["How do I reverse a list in Python?", "What is the capital of France?",
             "The café serves naïve crème brûlée.", "北京是中国的首都", "Don't stop me now!!!",
             "a", "UPPER lower MiXeD", "email me at test@example.com", "3.14159 is pi",
             "Tabs\tand\nnewlines", "This sentence is rather long " * 8]
    ids, pooled, normed = [], [], []
    with torch.no_grad():
        for t in texts:
            e = wp.encode(t)
            x = torch.tensor([e.ids])
            mask = torch.tensor([e.attention_mask])
            h = m(input_ids=x, attention_mask=mask, token_type_ids=torch.zeros_like(x)).last_hidden_state
            p = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            ids.append(e.ids)
            pooled.append(p[0].tolist())
            normed.append(torch.nn.functional.normalize(p, dim=-1)[0].tolist())
        # batched with padding must give the same pooled vectors
        wp.enable_padding()
        enc = wp.encode_batch(texts[:4])
        x = torch.tensor([e.ids for e in enc]); mask = torch.tensor([e.attention_mask for e in enc])
        h = m(input_ids=x, attention_mask=mask, token_type_ids=torch.zeros_like(x)).last_hidden_state
        bp = ((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)).tolist()
    json.dump({"texts": texts, "input_ids": ids, "pooled": pooled, "normalized": normed,
               "batched_pooled_first4": bp}, open(os.path.join(out_dir, "golden.json"), "w"))
    print("bert golden done", flush=True)
