#!/usr/bin/env python3
"""llama.cpp vs specgate on the same weights, prompts and machine.

    python3 tools/bench/side_by_side.py [--rounds 3] [--threads 1,2]
        [--modes "chain k=2,chain k=4,chain adaptive"] [--out .bin/side-by-side]

Builds specgate, exports models/specgate-target and models/specgate-draft
as GGUF (f16) with `specgate export gguf`, writes bench spec's prompts as
token ids with specgate's greedy continuation of each
(tools/bench/promptids), installs node-llama-cpp (scripts/node-peers.sh),
then, round by round and per thread count, runs llama.cpp plain and
draft-model decoding (tools/bench/llamacpp_spec.mjs) and `specgate bench
spec` (plain and the given modes; same 20 prompts x 64 tokens, greedy) one
after the other, so both see the same machine load. Prints a markdown table:
median tokens/s over the rounds, speedup over the same engine's plain
decoding at the same thread count, and for llama.cpp how many of its outputs
equal specgate's plain output token for token. Python standard library only.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=ROOT, check=True, text=True, **kw)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def parse_bench_spec(text):
    """Rows of FormatBench's markdown table: name -> (tau, tokens/s)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 9 or cells[0] in ("mode", "") or cells[0].startswith("---"):
            continue
        try:
            rows[cells[0]] = (float(cells[2]), float(cells[7]))
        except ValueError:
            continue
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--modes", default="chain k=2,chain k=4,chain adaptive", help="bench spec modes besides plain")
    ap.add_argument("--drafts", default="2:2:0,4:4:0,0:16:0.6",
                    help="llama.cpp draft modes MIN:MAX:CONF (DraftSequenceTokenPredictor minTokens, maxTokens, minConfidence)")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", default=".bin/side-by-side")
    a = ap.parse_args()
    out = os.path.join(ROOT, a.out)
    os.makedirs(out, exist_ok=True)
    sg = os.path.join(out, "specgate")
    sh(["go", "build", "-o", sg, "./cmd/specgate"])
    tg, dg, pj = (os.path.join(out, f) for f in ("target.gguf", "draft.gguf", "prompts.json"))
    sh([sg, "export", "gguf", "models/specgate-target", tg])
    sh([sg, "export", "gguf", "models/specgate-draft", dg])
    with open(pj, "w") as f:
        sh(["go", "run", "./tools/bench/promptids", "-prompts", str(a.prompts), "-tokens", str(a.tokens)], stdout=f)
    sh(["bash", "scripts/node-peers.sh"])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True, capture_output=True).stdout.strip()
    threads = [int(t) for t in a.threads.split(",")]
    llama = {}  # (threads, mode) -> list of row dicts
    ours = {}   # (threads, mode) -> list of (tau, tok/s)
    loads = [loadavg()]
    open(os.path.join(out, "raw.jsonl"), "w").close()
    t0 = time.time()
    for r in range(a.rounds):
        for th in threads:
            res = sh(["node", "tools/bench/llamacpp_spec.mjs", tg, dg, pj, "--threads", str(th), "--runs", "1",
                      "--drafts", a.drafts], capture_output=True)
            with open(os.path.join(out, "raw.jsonl"), "a") as raw:
                for line in res.stdout.splitlines():
                    row = json.loads(line)
                    llama.setdefault((th, row["mode"]), []).append(row)
                    raw.write(json.dumps(dict(row, round=r + 1)) + "\n")
            res = sh([sg, "bench", "spec", "--threads", str(th), "--prompts", str(a.prompts), "--tokens", str(a.tokens),
                      "--runs", "1", "--modes", a.modes], capture_output=True)
            with open(os.path.join(out, "raw.jsonl"), "a") as raw:
                for name, v in parse_bench_spec(res.stdout).items():
                    ours.setdefault((th, name), []).append(v)
                    raw.write(json.dumps({"engine": "specgate", "threads": th, "mode": name, "tau": v[0],
                                          "tokensPerSec": v[1], "round": r + 1}) + "\n")
            loads.append(loadavg())
            print(f"round {r + 1}/{a.rounds}, {th} thread(s) done ({time.time() - t0:.0f} s, load {loads[-1]})", file=sys.stderr, flush=True)

    print(f"specgate {commit}; {a.prompts} prompts x {a.tokens} new tokens, greedy; median of {a.rounds} interleaved rounds; "
          f"load average during the runs: {', '.join(loads)}\n")
    print("| engine | threads | mode | tokens/s | speedup vs its plain | τ / drafted | outputs = specgate plain |")
    print("|---|---|---|---|---|---|---|")
    for th in threads:
        base = statistics.median(x["tokensPerSec"] for x in llama[(th, "plain")])
        for (t, mode), rows in llama.items():
            if t != th:
                continue
            tps = statistics.median(x["tokensPerSec"] for x in rows)
            drafted = statistics.median(x["validated"] + x["refuted"] for x in rows)
            acc = statistics.median(x["validated"] for x in rows)
            eq = min(x["equalToSpecgatePlain"] for x in rows)
            extra = f"{drafted:.0f} drafted, {acc:.0f} validated" if mode != "plain" else "-"
            print(f"| llama.cpp | {th} | {mode} | {tps:.1f} | {tps / base:.2f}× | {extra} | {eq}/{rows[0]['prompts']} |")
        obase = statistics.median(v[1] for v in ours.get((th, "plain"), [(0, float("nan"))]))
        for (t, mode), vals in ours.items():
            if t != th:
                continue
            tps = statistics.median(v[1] for v in vals)
            tau = statistics.median(v[0] for v in vals)
            print(f"| specgate | {th} | {mode} | {tps:.1f} | {tps / obase:.2f}× | τ {tau:.2f} | (checked by bench spec) |")


if __name__ == "__main__":
    main()
