#!/usr/bin/env python3
"""Reference pre-tokenizer splits from the Python `regex` module (independent of the Go code).

Writes splits.jsonl: {"pattern": name, "text": str, "splits": [str, ...]} for the GPT-2 and
Llama-3 patterns (with lookahead) over fixed tricky strings plus seeded random strings.
U+001C..U+001F are excluded because Python's \\s includes them and Unicode White_Space does not.
Run: python3 gen_splits.py > splits.jsonl
"""
import json, random, regex

PATS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}

FIXED = [
    "Hello world", "Hello, world!  How are you?\n\nI'm fine.", "don't DON'T we'LL they'Re",
    "  leading and trailing  ", "\t\ttabs\tand\r\nCRLF\r\n\r\n  end", "1234567 12 3.14159 ١٢٣٤",
    "func main() {\n\tfmt.Println(\"hi\")\n}\n", "x := a[1:2]  // comment\n    return nil\n",
    "你好，世界！ 这是测试。", "emoji 😀😃 👨‍👩‍👧 test", "mixed\u00a0nbsp\u3000ideographic space",
    "'s 's'S'ſ", "   ", "\n", " \n ", "a\n\n\nb", "?!  ...", "€100 and ¥200", "ǅungla Ⅻ ½",
    "e\u0301 combining", "  \n\n  x", "word's end'", "'", "''", "A'B'C",
]

def main():
    rnd = random.Random(7)
    alphabet = list("abcXYZ019 '\t\n\r.,!?-_(){}[]\"") + ["é", "中", "😀", "\u00a0", "\u2003", "٣", "Ⅷ", "ſ", "\u0301", "ß"]
    texts = list(FIXED)
    for _ in range(400):
        n = rnd.randint(1, 24)
        texts.append("".join(rnd.choice(alphabet) for _ in range(n)))
    for name, pat in PATS.items():
        rx = regex.compile(pat)
        for t in texts:
            print(json.dumps({"pattern": name, "text": t, "splits": rx.findall(t)}, ensure_ascii=False))

main()
