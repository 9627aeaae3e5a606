// Drives a running specgate with the official OpenAI Node SDK's Predicted
// Outputs (`prediction`), for gateway's TestNodeSDKPrediction. Usage:
//   node prediction_check.mjs '{"base": BASE_URL, "model": M}'
// Prints one JSON line: [{"name", "ok", "detail"}...]. Every expectation is
// written here, against what the SDK parsed.
import OpenAI from "openai";

const cfg = JSON.parse(process.argv[2]);
const client = new OpenAI({baseURL: cfg.base + "/v1", apiKey: "unused", maxRetries: 0});
const results = [];
async function check(name, fn) {
    try {
        results.push({name, ok: true, detail: (await fn()) ?? ""});
    } catch (e) {
        results.push({name, ok: false, detail: String(e && e.stack || e)});
    }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
const nocache = {headers: {"Cache-Control": "no-cache"}};
const params = {model: cfg.model, temperature: 0, max_tokens: 48,
    messages: [{role: "user", content: "Write a short Go function that adds two integers."}]};

let plain;
await check("chat without prediction", async () => {
    plain = await client.chat.completions.create(params, nocache);
    const d = plain.usage.completion_tokens_details;
    assert(d && d.accepted_prediction_tokens === undefined && d.rejected_prediction_tokens === undefined,
        `prediction fields without a prediction: ${JSON.stringify(d)}`);
    return JSON.stringify(plain.choices[0].message.content);
});
const text = plain.choices[0].message.content;
for (const [name, content] of [["string", text], ["text parts", [{type: "text", text: text.slice(0, 7)}, {type: "text", text: text.slice(7)}]]]) {
    await check(`chat prediction (${name})`, async () => {
        const r = await client.chat.completions.create({...params, prediction: {type: "content", content}}, nocache);
        assert(r.choices[0].message.content === text, `content ${JSON.stringify(r.choices[0].message.content)} != ${JSON.stringify(text)}`);
        const d = r.usage.completion_tokens_details;
        assert(Number.isInteger(d.accepted_prediction_tokens) && Number.isInteger(d.rejected_prediction_tokens), `details ${JSON.stringify(d)}`);
        assert(d.accepted_prediction_tokens > 0 && d.accepted_prediction_tokens <= r.usage.completion_tokens, `accepted ${d.accepted_prediction_tokens} of ${r.usage.completion_tokens}`);
        return `accepted ${d.accepted_prediction_tokens}, rejected ${d.rejected_prediction_tokens}, completion ${r.usage.completion_tokens}`;
    });
}
await check("chat prediction, unrelated text", async () => {
    const r = await client.chat.completions.create({...params, prediction: {type: "content", content: "Lorem ipsum dolor sit amet."}}, nocache);
    assert(r.choices[0].message.content === text, "content changed by a wrong prediction");
    const d = r.usage.completion_tokens_details;
    assert(d.rejected_prediction_tokens > 0, `rejected ${d.rejected_prediction_tokens}`);
    return `accepted ${d.accepted_prediction_tokens}, rejected ${d.rejected_prediction_tokens}`;
});
await check("chat prediction, streamed with usage", async () => {
    const stream = await client.chat.completions.create({...params, stream: true, stream_options: {include_usage: true},
        prediction: {type: "content", content: text}}, nocache);
    let out = "", usage;
    for await (const ch of stream) {
        for (const c of ch.choices) out += c.delta.content ?? "";
        if (ch.usage) usage = ch.usage;
    }
    assert(out === text, `stream ${JSON.stringify(out)}`);
    assert(usage && usage.completion_tokens_details.accepted_prediction_tokens > 0, `usage ${JSON.stringify(usage)}`);
    return `accepted ${usage.completion_tokens_details.accepted_prediction_tokens}`;
});
await check("bad prediction: BadRequestError", async () => {
    try {
        await client.chat.completions.create({...params, prediction: {type: "content", content: 7}});
    } catch (e) {
        assert(e instanceof OpenAI.BadRequestError, `error ${e && e.constructor && e.constructor.name}`);
        assert(e.status === 400 && e.param === "prediction.content", `status ${e.status} param ${e.param}`);
        return e.message;
    }
    throw new Error("no error");
});
console.log(JSON.stringify(results));
