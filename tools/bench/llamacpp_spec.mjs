// llama.cpp (node-llama-cpp's prebuilt linux-x64 CPU build) plain and
// draft-model speculative greedy decoding of GGUF files, timed on the
// prompts of `specgate bench spec`, for the side-by-side table in
// docs/speculative.md (tools/bench/side_by_side.sh drives it).
//
//   node tools/bench/llamacpp_spec.mjs TARGET.gguf DRAFT.gguf PROMPTS.json \
//        [--threads 1,2] [--runs 3] [--drafts 2:2:0,4:4:0,0:16:0.6]
//
// PROMPTS.json is what `go run ./tools/bench/promptids` writes: token ids
// of the prompts (BOS included) and specgate's greedy continuation of each.
// Every run decodes every prompt from an empty KV cache (prompt evaluation
// included in the time, as bench spec times a request) until its token
// count or an end-of-generation token, at temperature 0. Modes and thread
// counts are interleaved run by run; the median run is reported. Draft
// modes (--drafts, comma-separated MIN:MAX:CONF) set DraftSequenceTokenPredictor's
// minTokens, maxTokens and minConfidence: with minTokens = maxTokens = k and
// confidence 0 the target waits for k drafted tokens every step (a fixed
// chain of k, as specgate's "chain k"); 0:16:0.6 is the library's default,
// where the draft model runs ahead asynchronously (on its own thread, so
// "threads 1" then uses two cores) and the target takes whatever drafts are
// ready. For each
// mode it also reports how many outputs equal specgate's token for token
// and, with a draft, the predictor's validated / refuted counts.
// node-llama-cpp is loaded from tools/node/node_modules (scripts/node-peers.sh
// installs it) or $SPECGATE_NODE_PEERS/node_modules.
import {readFileSync} from "node:fs";
import {dirname, join, resolve} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const peers = process.env.SPECGATE_NODE_PEERS || join(here, "..", "node");
const {getLlama, LlamaLogLevel, DraftSequenceTokenPredictor} = await import(
    pathToFileURL(resolve(peers, "node_modules", "node-llama-cpp", "dist", "index.js")).href);

function usage(msg) {
    process.stderr.write(`llamacpp_spec: ${msg}\nusage: node llamacpp_spec.mjs TARGET.gguf DRAFT.gguf PROMPTS.json [--threads 1,2] [--runs 3] [--draft-max 2,4] [--min-confidence 0,0.6]\n`);
    process.exit(2);
}

const pos = [], opt = {threads: "1,2", runs: "3", drafts: "2:2:0,4:4:0,0:16:0.6"};
for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i];
    if (a.startsWith("--")) {
        const k = a.slice(2);
        if (!(k in opt) || i + 1 >= process.argv.length) usage(`unknown flag or missing value: ${a}`);
        opt[k] = process.argv[++i];
    } else pos.push(a);
}
if (pos.length !== 3) usage("want TARGET.gguf DRAFT.gguf PROMPTS.json");
const ints = (s, name) => s.split(",").map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n < 1) usage(`--${name}: ${x} is not a positive integer`);
    return n;
});
const threadList = ints(opt.threads, "threads");
const runs = ints(opt.runs, "runs")[0];
const drafts = opt.drafts.split(",").filter((x) => x !== "").map((x) => {
    const [mn, mx, c] = x.split(":").map(Number);
    if (!Number.isInteger(mn) || !Number.isInteger(mx) || mn < 0 || mx < 1 || mn > mx || !(c >= 0 && c <= 1))
        usage(`--drafts: ${x} is not MIN:MAX:CONF with 0 <= MIN <= MAX, MAX >= 1, CONF in [0, 1]`);
    return {minTokens: mn, maxTokens: mx, minConfidence: c};
});

const input = JSON.parse(readFileSync(pos[2], "utf8"));
const prompts = input.prompts, reference = input.plain, maxNew = input.tokens;
if (!Array.isArray(prompts) || prompts.length === 0 || !(maxNew > 0)) usage(`${pos[2]}: want {prompts: [[ids]], plain: [[ids]], tokens: N}`);

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const target = await llama.loadModel({modelPath: pos[0], gpuLayers: 0});
const draft = await llama.loadModel({modelPath: pos[1], gpuLayers: 0});
const ctxSize = Math.max(...prompts.map((p) => p.length)) + maxNew + 32;

// One target context (and, for draft modes, one draft context) per mode and
// thread count, created once: each run clears the sequences.
const modes = [{name: "plain"}, ...drafts.map((d) => ({
    name: `draft min=${d.minTokens} max=${d.maxTokens} conf=${d.minConfidence}`, draft: d}))];
const slots = [];
for (const threads of threadList) {
    for (const m of modes) {
        const tctx = await target.createContext({contextSize: ctxSize, threads, batchSize: ctxSize, sequences: 1});
        let predictor = null, dctx = null;
        if (m.draft) {
            dctx = await draft.createContext({contextSize: ctxSize, threads, batchSize: ctxSize, sequences: 1});
            predictor = new DraftSequenceTokenPredictor(dctx.getSequence(), m.draft);
        }
        const seq = predictor ? tctx.getSequence({tokenPredictor: predictor}) : tctx.getSequence();
        slots.push({threads, mode: m.name, seq, tctx, dctx, times: [], outs: null, validated: 0, refuted: 0});
    }
}

async function decodeAll(s, ps) {
    const outs = [];
    const t0 = process.hrtime.bigint();
    for (const p of ps) {
        await s.seq.clearHistory();
        const gen = [];
        for await (const tok of s.seq.evaluate(p, {temperature: 0})) {
            gen.push(tok);
            if (gen.length >= maxNew) break;
        }
        outs.push(gen);
    }
    return {outs, sec: Number(process.hrtime.bigint() - t0) / 1e9};
}

for (let r = 0; r <= runs; r++) { // run 0 warms up on the first 2 prompts
    for (const s of slots) {
        const before = s.seq.tokenPredictions;
        const {outs, sec} = await decodeAll(s, r === 0 ? prompts.slice(0, 2) : prompts);
        const after = s.seq.tokenPredictions;
        if (r === 0) continue;
        s.times.push(sec);
        s.outs = outs;
        s.validated += after.validated - before.validated;
        s.refuted += after.refuted - before.refuted;
        s.tokens = outs.reduce((a, o) => a + o.length, 0);
    }
}

const median = (v) => {
    const s = [...v].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const rows = [];
for (const s of slots) {
    const plain = slots.find((x) => x.threads === s.threads && x.mode === "plain");
    const med = median(s.times);
    const eqRef = reference ? s.outs.filter((o, i) => same(o, reference[i])).length : null;
    const eqPlain = s.outs.filter((o, i) => same(o, plain.outs[i])).length;
    rows.push({
        engine: "llama.cpp", threads: s.threads, mode: s.mode, runs: s.times.length,
        tokens: s.tokens, seconds: med, tokensPerSec: s.tokens / med, speedup: median(plain.times) / med,
        perRun: s.times.map((t) => +(s.tokens / t).toFixed(1)),
        validated: s.validated / runs, refuted: s.refuted / runs,
        equalToSpecgatePlain: eqRef, equalToOwnPlain: eqPlain, prompts: prompts.length,
    });
}
for (const r of rows) process.stdout.write(JSON.stringify(r) + "\n");

for (const s of slots) {
    await s.tctx.dispose();
    if (s.dctx) await s.dctx.dispose();
}
await draft.dispose();
await target.dispose();
await llama.dispose();
