// Drives a running specgate with the official OpenAI Node SDK and LangChain's
// ChatOpenAI, for gateway's TestNodeSDK. Usage:
//   node sdk_check.mjs '{"local": BASE_URL, "upstream": BASE_URL, "model": M, "embed": E}'
// Prints one JSON line: [{"name", "ok", "detail"}...]. Every check's
// expectation is written here, against what the SDK parsed.
import OpenAI from "openai";
import {ChatOpenAI} from "@langchain/openai";

const cfg = JSON.parse(process.argv[2]);
const results = [];
async function check(name, fn) {
    try {
        const detail = await fn();
        results.push({name, ok: true, detail: detail ?? ""});
    } catch (e) {
        results.push({name, ok: false, detail: String(e && e.stack || e)});
    }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
const textOf = (r) => r.output.filter((o) => o.type === "message").flatMap((o) => o.content).filter((c) => c.type === "output_text").map((c) => c.text).join("");

for (const [where, base] of [["local", cfg.local], ["upstream", cfg.upstream]]) {
    const client = new OpenAI({baseURL: base + "/v1", apiKey: "unused", maxRetries: 0});
    const params = {model: cfg.model, input: "Define ocean.", instructions: "Answer in one sentence.", max_output_tokens: 24, temperature: 0};
    let plain;
    await check(`${where}: responses.create`, async () => {
        plain = await client.responses.create(params);
        assert(plain.object === "response", `object ${plain.object}`);
        assert(plain.id.startsWith("resp_"), `id ${plain.id}`);
        assert(["completed", "incomplete"].includes(plain.status), `status ${plain.status}`);
        assert(typeof plain.output_text === "string" && plain.output_text.length > 0, "empty output_text");
        assert(plain.output_text === textOf(plain), "output_text differs from output[].content");
        assert(plain.usage.input_tokens > 0 && plain.usage.output_tokens > 0 && plain.usage.total_tokens === plain.usage.input_tokens + plain.usage.output_tokens, `usage ${JSON.stringify(plain.usage)}`);
        assert(plain.instructions === params.instructions && plain.model === cfg.model, "echoed fields");
        return `${plain.status}, ${plain.usage.output_tokens} tokens: ${JSON.stringify(plain.output_text)}`;
    });
    await check(`${where}: responses.create stream`, async () => {
        // no-cache: a fresh generation, streamed token by token (the plain
        // request above stored the answer; greedy decoding repeats it).
        const stream = await client.responses.create({...params, stream: true}, {headers: {"Cache-Control": "no-cache"}});
        const types = [], deltas = [];
        let final, seq = -1;
        for await (const ev of stream) {
            types.push(ev.type);
            assert(ev.sequence_number === seq + 1, `sequence_number ${ev.sequence_number} after ${seq}`);
            seq = ev.sequence_number;
            if (ev.type === "response.output_text.delta") deltas.push(ev.delta);
            if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
        }
        assert(types[0] === "response.created" && types[1] === "response.in_progress", `first events ${types.slice(0, 2)}`);
        const last = types[types.length - 1];
        assert(last === "response.completed" || last === "response.incomplete", `last event ${last}`);
        for (const t of ["response.output_item.added", "response.content_part.added", "response.output_text.done", "response.content_part.done", "response.output_item.done"])
            assert(types.includes(t), `no ${t}`);
        // Through the upstream the back gateway answers from its cache (the
        // front does not forward Cache-Control): one replayed delta.
        assert(deltas.length >= (where === "local" ? 2 : 1), `${deltas.length} deltas: not streamed token by token`);
        assert(deltas.join("") === textOf(final), "deltas differ from the final response");
        assert(textOf(final) === plain.output_text, `stream ${JSON.stringify(textOf(final))} != plain ${JSON.stringify(plain.output_text)}`);
        assert(final.usage && final.usage.output_tokens > 0, "no usage in the final response");
        return `${types.length} events, ${deltas.length} deltas`;
    });
    await check(`${where}: responses.stream().finalResponse()`, async () => {
        const s = client.responses.stream(params);
        let n = 0;
        s.on("response.output_text.delta", () => { n++; });
        const final = await s.finalResponse();
        assert(final.output_text === plain.output_text, `final ${JSON.stringify(final.output_text)}`);
        return `${n} delta events`;
    });
    await check(`${where}: previous_response_id`, async () => {
        const next = await client.responses.create({model: cfg.model, input: "And a river?", previous_response_id: plain.id, max_output_tokens: 8, temperature: 0});
        assert(next.previous_response_id === plain.id, "previous_response_id not echoed");
        // The chain's earlier turn (input and answer) is part of the prompt now.
        assert(next.usage.input_tokens > plain.usage.input_tokens, `input_tokens ${next.usage.input_tokens} <= ${plain.usage.input_tokens}`);
        const again = await client.responses.retrieve(plain.id);
        assert(again.id === plain.id && textOf(again) === plain.output_text, "retrieve");
        try {
            await client.responses.create({model: cfg.model, input: "x", previous_response_id: "resp_nope"});
            throw new Error("unknown previous_response_id accepted");
        } catch (e) {
            assert(e instanceof OpenAI.BadRequestError && e.param === "previous_response_id", `got ${e}`);
        }
        return `input_tokens ${plain.usage.input_tokens} -> ${next.usage.input_tokens}`;
    });
}

const client = new OpenAI({baseURL: cfg.local + "/v1", apiKey: "unused", maxRetries: 0});
await check("embeddings dimensions", async () => {
    const input = ["a cat sat on the mat", "dogs run in the park"];
    const full = await client.embeddings.create({model: cfg.embed, input});
    const short = await client.embeddings.create({model: cfg.embed, input, dimensions: 64});
    assert(short.data.length === 2 && short.data[0].embedding.length === 64, `length ${short.data[0].embedding.length}`);
    for (let i = 0; i < 2; i++) {
        const head = full.data[i].embedding.slice(0, 64);
        const norm = Math.hypot(...head);
        const got = short.data[i].embedding;
        for (let j = 0; j < 64; j++)
            assert(Math.abs(got[j] - head[j] / norm) < 1e-5, `component ${j}: ${got[j]} vs ${head[j] / norm}`);
    }
    return `full ${full.data[0].embedding.length} -> 64, unit norm`;
});
await check("chat withResponse headers", async () => {
    const p = {model: cfg.model, max_tokens: 8, temperature: 0, messages: [{role: "user", content: `Define harbor ${Date.now()}.`}]};
    const a = await client.chat.completions.create(p).withResponse();
    const b = await client.chat.completions.create(p).withResponse();
    assert(a.response.headers.get("x-cache") === "MISS", `first x-cache ${a.response.headers.get("x-cache")}`);
    assert(b.response.headers.get("x-cache") === "HIT-EXACT", `second x-cache ${b.response.headers.get("x-cache")}`);
    assert(a.response.headers.get("x-request-id"), "no x-request-id");
    assert(a.data.choices[0].message.content === b.data.choices[0].message.content, "hit differs");
    return `MISS then HIT-EXACT, request id ${a.response.headers.get("x-request-id")}`;
});
await check("langchain ChatOpenAI", async () => {
    const llm = new ChatOpenAI({model: cfg.model, apiKey: "unused", temperature: 0, maxTokens: 12, configuration: {baseURL: cfg.local + "/v1"}});
    const m = await llm.invoke("Define ocean.");
    assert(typeof m.content === "string" && m.content.length > 0, "empty invoke");
    let streamed = "";
    for await (const chunk of await llm.stream("Define ocean.")) streamed += chunk.content;
    assert(streamed === m.content, `stream ${JSON.stringify(streamed)} != invoke ${JSON.stringify(m.content)}`);
    return JSON.stringify(m.content);
});
process.stdout.write(JSON.stringify(results) + "\n");
