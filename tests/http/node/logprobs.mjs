// logprobs / top_logprobs through the official SDK, each case plain and streamed, against epd-run's values.
//
//   node logprobs.mjs --base-url http://127.0.0.1:PORT/v1 --spec cases.json
//
// cases.json: {"cases": [{"name", "endpoint": "completions"|"chat", "params": {request body without
// model/stream, with the logprobs fields}, "top": alternatives asked for, "greedy": bool, "expect_choices":
// [token ids of the reference run, per choice], "expect_logprobs": [per choice, per token {"logprob": x,
// "top": [[id, x], ...]} as `epd-run --json --logprobs N` prints them]}]}.
// An image_url whose url is "@file:PATH" is replaced by PATH's data URI. Checked, for every choice: an entry
// for every token, the first (prefill's) included; each value equal to epd-run's (as float32: epd-run
// prints nine digits, the router the float's double); the alternatives as many as asked, most likely first,
// equal to epd-run's; a greedy token first among them; the streamed entries joined equal to the answer's.
import assert from 'node:assert/strict';
import { Checks, makeClient, parseArgs, readSpec, withImages } from './lib.mjs';

const args = parseArgs();
const spec = readSpec(args.spec);
const client = makeClient(args.baseUrl);
const checks = new Checks();
const f32 = Math.fround;

// The reference model's bytes of a token: ids below 256 are bytes, its special tokens are spelled out as the
// tokenizer renders them (POST /tokenize's pieces).
const specials = { 256: '<bos>', 257: '<eos>', 258: '<image>' };
const bytesOf = (id) => (id < 256 ? [id] : [...Buffer.from(specials[id] ?? '')]);
const textOf = (id) => new TextDecoder('utf-8').decode(Uint8Array.from(bytesOf(id)));

// Chat: {"content": [...], "refusal": null} per choice, against the reference.
function checkChat(content, tokens, expected, c, where) {
  assert.ok(Array.isArray(content), `${where}: logprobs.content is not an array`);
  assert.equal(content.length, tokens.length, `${where}: one entry per token, the first included`);
  for (let j = 0; j < tokens.length; j++) {
    const e = content[j];
    const x = expected[j];
    const at = `${where} token ${j}`;
    assert.deepEqual(e.bytes, bytesOf(tokens[j]), `${at}: bytes`);
    assert.equal(e.token, textOf(tokens[j]), `${at}: token`);
    assert.equal(f32(e.logprob), f32(x.logprob), `${at}: logprob ${e.logprob} != epd-run's ${x.logprob}`);
    assert.ok(e.logprob <= 0, `${at}: logprob ${e.logprob} > 0`);
    assert.equal(e.top_logprobs.length, c.top, `${at}: ${c.top} alternatives`);
    for (let k = 0; k < c.top; k++) {
      const [id, lp] = x.top[k];
      assert.deepEqual(e.top_logprobs[k].bytes, bytesOf(id), `${at} alternative ${k}: bytes`);
      assert.equal(f32(e.top_logprobs[k].logprob), f32(lp), `${at} alternative ${k}: logprob`);
      if (k > 0) assert.ok(e.top_logprobs[k].logprob <= e.top_logprobs[k - 1].logprob, `${at}: sorted`);
    }
    if (c.greedy && c.top > 0) {
      assert.deepEqual(e.top_logprobs[0].bytes, e.bytes, `${at}: greedy token first among the alternatives`);
      assert.equal(e.top_logprobs[0].logprob, e.logprob, `${at}: greedy token's logprob first`);
    }
  }
}

// Completions: the four lists per choice.
function checkCompletion(lp, tokens, expected, c, where) {
  assert.equal(lp.tokens.length, tokens.length, `${where}: one token per generated token, the first included`);
  assert.equal(lp.token_logprobs.length, tokens.length, `${where}: token_logprobs`);
  assert.equal(lp.top_logprobs.length, tokens.length, `${where}: top_logprobs`);
  assert.equal(lp.text_offset.length, tokens.length, `${where}: text_offset`);
  let offset = 0;
  for (let j = 0; j < tokens.length; j++) {
    const at = `${where} token ${j}`;
    assert.equal(lp.tokens[j], textOf(tokens[j]), `${at}: token`);
    assert.equal(f32(lp.token_logprobs[j]), f32(expected[j].logprob), `${at}: logprob`);
    assert.equal(lp.text_offset[j], offset, `${at}: text_offset`);
    offset += [...lp.tokens[j]].length;
    // The dict by text: each text's value is the first (likelier) alternative with that text.
    const want = {};
    for (const [id, v] of expected[j].top.slice(0, c.top)) if (!(textOf(id) in want)) want[textOf(id)] = f32(v);
    const got = Object.fromEntries(Object.entries(lp.top_logprobs[j]).map(([k, v]) => [k, f32(v)]));
    assert.deepEqual(got, want, `${at}: top_logprobs`);
    if (c.greedy && c.top > 0) assert.equal(got[lp.tokens[j]], f32(lp.token_logprobs[j]), `${at}: greedy first`);
  }
}

function check(endpoint, logprobs, i, c, where) {
  assert.ok(logprobs, `${where}: choice ${i} has no logprobs`);
  const tokens = c.expect_choices[i];
  const expected = c.expect_logprobs[i];
  if (endpoint === 'chat') checkChat(logprobs.content, tokens, expected, c, `${where} choice ${i}`);
  else checkCompletion(logprobs, tokens, expected, c, `${where} choice ${i}`);
}

// Joins the streamed chunks' logprobs of each choice into one object of the answer's shape.
function joinStreamed(endpoint, perChoice) {
  if (endpoint === 'chat') return perChoice.map((parts) => ({ content: parts.flatMap((p) => p.content) }));
  return perChoice.map((parts) => ({
    tokens: parts.flatMap((p) => p.tokens),
    token_logprobs: parts.flatMap((p) => p.token_logprobs),
    top_logprobs: parts.flatMap((p) => p.top_logprobs),
    text_offset: parts.flatMap((p) => p.text_offset),
  }));
}

for (const c of spec.cases) {
  const n = c.expect_choices.length;
  const body = withImages(c.params);
  const api = c.endpoint === 'chat' ? client.chat.completions : client.completions;
  let plain;
  await checks.run(`${c.name}: plain`, async () => {
    const r = await api.create({ ...body, model: spec.model ?? 'epd-tiny' });
    assert.equal(r.choices.length, n, 'choices');
    plain = r.choices.map((ch) => ch.logprobs);
    r.choices.forEach((ch, i) => check(c.endpoint, ch.logprobs, ch.index, c, 'plain'));
  });
  await checks.run(`${c.name}: streamed, equal to plain`, async () => {
    const stream = await api.create({ ...body, model: spec.model ?? 'epd-tiny', stream: true });
    const parts = Array.from({ length: n }, () => []);
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        const text = c.endpoint === 'chat' ? ch.delta?.content : ch.text;
        if (ch.logprobs) parts[ch.index].push(ch.logprobs);
        else assert.ok(!text, 'a chunk with text carries its tokens\' logprobs');
      }
    }
    const joined = joinStreamed(c.endpoint, parts);
    joined.forEach((lp, i) => check(c.endpoint, lp, i, c, 'streamed'));
    assert.ok(plain, 'the plain answer failed');
    const strip = (lp) => (c.endpoint === 'chat' ? lp.content : lp);
    joined.forEach((lp, i) => assert.deepEqual(strip(lp), strip(plain[i]), `choice ${i}: streamed != plain`));
  });
}
checks.finish();
