#!/usr/bin/env python3
"""Build the training corpus for the shipped specgate model family.

Everything comes from text any Debian machine with Go can get by package name:
  - Go source from the Go toolchain ($(go env GOROOT)/src, *.go, testdata skipped)
  - fortunes (packages fortunes, fortunes-min)
  - GCIDE dictionary definitions (package dict-gcide)
  - WordNet glosses and example sentences (package wordnet-base)
plus synthetic chat dialogs built from WordNet/GCIDE definitions, rendered with our
chat template so the chat model learns the turn format.

Output: OUT/{go,english,chat}.txt, documents separated by the record separator
line "\\x1e". Deterministic: files are sorted and the sampler is seeded.

usage: tools/data/prepare.py OUT_DIR [--go-mb 36] [--english-mb 24]
"""
import argparse, gzip, html, os, random, re, subprocess, sys

RS = "\n\x1e\n"


def go_docs(limit):
    root = subprocess.check_output(["go", "env", "GOROOT"], text=True).strip()
    files = []
    for d, dirs, fs in os.walk(os.path.join(root, "src")):
        dirs[:] = sorted(x for x in dirs if x not in ("testdata", "vendor"))
        for f in sorted(fs):
            if f.endswith(".go"):
                files.append(os.path.join(d, f))
    random.Random(1).shuffle(files)
    out, total = [], 0
    for p in files:
        try:
            s = open(p, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        if len(s) > 200_000:
            continue
        out.append(s)
        total += len(s)
        if total >= limit:
            break
    print(f"go: {len(out)} files, {total/1e6:.1f} MB", file=sys.stderr)
    return out


def fortunes():
    base = "/usr/share/games/fortunes"
    out = []
    for f in sorted(os.listdir(base)):
        p = os.path.join(base, f)
        if "." in f or not os.path.isfile(p):
            continue
        try:
            s = open(p, encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        for cookie in s.split("\n%\n"):
            cookie = cookie.strip()
            if 20 < len(cookie) < 4000:
                out.append(cookie)
    print(f"fortunes: {len(out)}", file=sys.stderr)
    return out


TAG = re.compile(r"<[^>]+>")


def gcide():
    raw = gzip.open("/usr/share/dictd/gcide.dict.dz").read().decode("utf-8", "replace")
    out, defs = [], []
    for entry in raw.split("\n\n"):
        lines = entry.strip().split("\n")
        if len(lines) < 2:
            continue
        head = lines[0].strip()
        body = " ".join(l.strip() for l in lines[1:])
        body = html.unescape(TAG.sub("", body))
        body = re.sub(r"\s+", " ", body).strip()
        if len(body) < 30:
            continue
        out.append(f"{head}\n{body}")
        word = head.split()[0].strip(",;") if head else ""
        m = re.search(r"Defn: ([^.;]{10,200})[.;]", body)
        if word.isalpha() and m:
            defs.append((word.lower(), m.group(1).strip()))
    print(f"gcide: {len(out)} entries, {len(defs)} short definitions", file=sys.stderr)
    return out, defs


def wordnet():
    base = "/usr/share/wordnet"
    glosses, examples = [], []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in open(os.path.join(base, "data." + pos), encoding="utf-8", errors="replace"):
            if line.startswith("  ") or "|" not in line:
                continue
            meta, gloss = line.split("|", 1)
            words = meta.split()
            lemma = words[4].replace("_", " ") if len(words) > 4 else ""
            parts = [p.strip() for p in gloss.strip().split(";")]
            definition = parts[0]
            exs = [p.strip('" ') for p in parts[1:] if p.startswith('"')]
            if lemma and definition:
                glosses.append((lemma, pos, definition))
            examples.extend(e for e in exs if len(e) > 15)
    print(f"wordnet: {len(glosses)} glosses, {len(examples)} examples", file=sys.stderr)
    return glosses, examples


QUESTIONS = [
    "What does the word \"{w}\" mean?",
    "Define {w}.",
    "What is the meaning of {w}?",
    "Can you explain what \"{w}\" means?",
    "What is {a} {w}?",
    "Give me a short definition of {w}.",
]


def article(w):
    return "an" if w[:1] in "aeiou" else "a"


def chat_docs(glosses, defs, examples, rng, n):
    out = []
    pool = [(w, d) for (w, _, d) in glosses] + defs
    rng.shuffle(pool)
    systems = ["You are a helpful assistant.", "You are a concise dictionary assistant.", ""]
    for w, d in pool[:n]:
        q = rng.choice(QUESTIONS).format(w=w, a=article(w))
        ans = d[0].upper() + d[1:]
        if not ans.endswith("."):
            ans += "."
        ans = f"{w.capitalize()}: {ans}" if rng.random() < 0.5 else ans
        sys_p = rng.choice(systems)
        s = ""
        if sys_p:
            s += f"<|im_start|>system\n{sys_p}<|im_end|>\n"
        s += f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{ans}<|im_end|>\n"
        out.append(s)
    print(f"chat: {len(out)} dialogs", file=sys.stderr)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--go-mb", type=float, default=36)
    ap.add_argument("--english-mb", type=float, default=24)
    ap.add_argument("--chat", type=int, default=60000)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(7)
    go = go_docs(int(a.go_mb * 1e6))
    fort = fortunes()
    gc, defs = gcide()
    glosses, examples = wordnet()
    wn_docs = [f"{l} ({p}): {d}." for (l, p, d) in glosses]
    # group short lines into documents of ~2 KB so the model sees context
    def pack(items, size=2000):
        docs, cur, n = [], [], 0
        for it in items:
            cur.append(it)
            n += len(it)
            if n >= size:
                docs.append("\n".join(cur)); cur, n = [], 0
        if cur:
            docs.append("\n".join(cur))
        return docs
    rng.shuffle(wn_docs); rng.shuffle(examples)
    english = fort + gc + pack(wn_docs) + pack(examples)
    rng.shuffle(english)
    lim, tot, eng = int(a.english_mb * 1e6), 0, []
    for d in english:
        eng.append(d); tot += len(d)
        if tot >= lim:
            break
    print(f"english: {len(eng)} docs, {tot/1e6:.1f} MB", file=sys.stderr)
    chat = chat_docs(glosses, defs, examples, rng, a.chat)
    for name, docs in (("go", go), ("english", eng), ("chat", chat)):
        with open(os.path.join(a.out, name + ".txt"), "w", encoding="utf-8") as f:
            f.write(RS.join(docs))


if __name__ == "__main__":
    main()
