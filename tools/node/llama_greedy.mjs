// Greedy continuation by llama.cpp (node-llama-cpp's prebuilt CPU build) of a
// GGUF file, for engine/gguf's test. Reads JSON from stdin:
//   {"model": PATH, "text": PROMPT, "ids": [PROMPT TOKEN IDS], "n": N}
// and prints JSON: {"tokenized": llama.cpp's ids for text (BOS per the
// file's add_bos_token), "generated": N greedy ids continuing "ids",
// "top": per generated token the 5 most probable [id, p] pairs, "bos": id,
// "eos": id}. One thread: on a 2-core machine more is slower.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const input = JSON.parse(await new Promise((resolve, reject) => {
    let s = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (d) => { s += d; });
    process.stdin.on("end", () => resolve(s));
    process.stdin.on("error", reject);
}));

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: input.model, gpuLayers: 0});
let tokenized = Array.from(model.tokenize(input.text, true));
if (model.tokens.shouldPrependBosToken && model.tokens.bos != null && tokenized[0] !== model.tokens.bos)
    tokenized = [model.tokens.bos, ...tokenized];
const ctx = await model.createContext({contextSize: 512, threads: 1, batchSize: 512, sequences: 1});
const seq = ctx.getSequence();
const generated = [], top = [];
if (input.n > 0) {
    const it = seq.evaluateWithMetadata(input.ids, {probabilities: true}, {temperature: 0, yieldEogToken: true});
    for await (const r of it) {
        generated.push(r.token);
        top.push([...r.probabilities.entries()].slice(0, 5));
        if (generated.length >= input.n) break;
    }
}
process.stdout.write(JSON.stringify({tokenized, generated, top, bos: model.tokens.bos, eos: model.tokens.eos}) + "\n");
await ctx.dispose();
await model.dispose();
await llama.dispose();
