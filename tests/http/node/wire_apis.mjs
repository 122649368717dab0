// OpenAI's Responses API (the official `openai` SDK's responses.create and responses.stream) and Anthropic's
// Messages API (the official `@anthropic-ai/sdk`'s messages.create, messages.stream and
// messages.countTokens) against a running cluster: each answer's text, calls and end equal the same request
// through Chat Completions; the streams' deltas add up to the SDKs' own final objects; refusals are a 400
// naming the field.
//
//   node wire_apis.mjs --base-url http://127.0.0.1:PORT/v1 --spec cases.json [--api-key KEY]
//
// cases.json: {"cases": [{"name", "api": "responses" | "messages", "params": {the route's body without model
// and stream}, "chat": {the same request as a chat body}, "stream": bool, "must_call"?: bool,
// "expect_stop_sequence"?: the stop Anthropic's answer must report}],
// "refusals": [{"name", "api", "params", "param": the field the error names, "message"}]}. "@file:PATH"
// stands for PATH's image: as a data URI (image_url, input_image) or base64 data (Anthropic's source).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Checks, imageDataUri, withImages } from './lib.mjs';

const args = { apiKey: 'epd-test' };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '').replace(/-(.)/g, (_, c) => c.toUpperCase());
  args[key] = process.argv[i + 1];
}
const spec = JSON.parse(readFileSync(args.spec, 'utf8'));
const openai = new OpenAI({ baseURL: args.baseUrl, apiKey: args.apiKey, maxRetries: 0, timeout: 60_000 });
// Anthropic's client sends the key as X-Api-Key, and its base URL has no /v1.
const anthropic = new Anthropic({
  baseURL: args.baseUrl.replace(/\/v1$/, ''),
  apiKey: args.apiKey,
  maxRetries: 0,
  timeout: 60_000,
});
const checks = new Checks();

// "@file:PATH" anywhere in the params: a data URI, or in an Anthropic image source its base64 and type.
function withFiles(value) {
  if (typeof value === 'string' && value.startsWith('@file:')) return imageDataUri(value.slice(6));
  if (Array.isArray(value)) return value.map(withFiles);
  if (value && typeof value === 'object') {
    if (value.type === 'base64' && typeof value.data === 'string' && value.data.startsWith('@file:')) {
      const [, type, data] = /^data:([^;]+);base64,(.*)$/.exec(imageDataUri(value.data.slice(6)));
      return { ...value, media_type: type, data };
    }
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withFiles(v)]));
  }
  return value;
}

// Chat Completions' answer as {text, calls: [{name, input}], finish, prompt_tokens}.
async function viaChat(model, c) {
  const res = await openai.chat.completions.create({ model, ...withImages(c.chat) });
  const m = res.choices[0].message;
  const calls = (m.tool_calls ?? []).map((t) => ({ name: t.function.name, input: JSON.parse(t.function.arguments) }));
  return { text: m.content ?? '', calls, finish: res.choices[0].finish_reason, prompt_tokens: res.usage.prompt_tokens };
}

function sameAnswer(got, want, c) {
  if (c.must_call) assert.ok(want.calls.length > 0, `the chat answer has no call: ${JSON.stringify(want)}`);
  assert.deepEqual(got.calls, want.calls, 'the calls differ from Chat Completions\'');
  const text = (s) => (want.calls.length ? s.trim() : s);
  assert.equal(text(got.text), text(want.text), 'the text differs from Chat Completions\'');
  assert.equal(got.finish, want.finish, 'the end differs from Chat Completions\'');
  if (got.prompt_tokens !== undefined) assert.equal(got.prompt_tokens, want.prompt_tokens, 'prompt tokens');
}

function textOf(r) {
  return r.output
    .filter((o) => o.type === 'message')
    .flatMap((o) => o.content.filter((p) => p.type === 'output_text').map((p) => p.text))
    .join('');
}

// A Response's answer: its output_text parts, its function_call items, completed / incomplete.
function ofResponse(r) {
  const calls = r.output
    .filter((o) => o.type === 'function_call')
    .map((o) => ({ name: o.name, input: JSON.parse(o.arguments) }));
  for (const o of r.output.filter((o) => o.type === 'function_call')) assert.ok(o.call_id, 'a call_id');
  const finish = r.status === 'incomplete' ? 'length' : calls.length ? 'tool_calls' : 'stop';
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  else assert.equal(r.status, 'completed');
  const text = textOf(r);
  // The SDK's own reading of a whole Response (not of a streamed event's).
  if (r.output_text !== undefined) assert.equal(r.output_text, text, 'the SDK\'s output_text');
  return { text, calls, finish, prompt_tokens: r.usage.input_tokens };
}

async function responses(model, c) {
  const params = { model, ...withFiles(c.params) };
  if (!c.stream) return ofResponse(await openai.responses.create(params));
  // The SDK's stream helper builds a Response from the events (and refuses events out of order); it takes
  // the final object from response.completed only, so an incomplete one is read from its own event.
  const stream = openai.responses.stream(params);
  let text = '';
  let ended = null;
  const args = {};
  for await (const e of stream) {
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.function_call_arguments.delta') args[e.item_id] = (args[e.item_id] ?? '') + e.delta;
    if (e.type === 'response.completed' || e.type === 'response.incomplete') ended = e.response;
  }
  const built = await stream.finalResponse();
  assert.ok(ended, 'the stream ended with response.completed or response.incomplete');
  const answer = ofResponse(ended);
  assert.equal(text, answer.text, 'the deltas add up to the final text');
  assert.equal(textOf(built), answer.text, 'the SDK built the same text from the events');
  for (const o of ended.output.filter((o) => o.type === 'function_call'))
    assert.equal(args[o.id], o.arguments, 'the argument deltas add up to the call');
  return answer;
}

// A Message's answer: its text blocks, tool_use blocks, stop_reason.
function ofMessage(m) {
  const finish = { end_turn: 'stop', stop_sequence: 'stop', max_tokens: 'length', tool_use: 'tool_calls' }[m.stop_reason];
  assert.ok(finish, `stop_reason ${m.stop_reason}`);
  const text = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const calls = m.content.filter((b) => b.type === 'tool_use').map((b) => ({ name: b.name, input: b.input }));
  for (const b of m.content.filter((b) => b.type === 'tool_use')) assert.ok(b.id, 'a tool_use id');
  return { text, calls, finish, prompt_tokens: m.usage.input_tokens, stop_sequence: m.stop_sequence };
}

async function messages(model, c) {
  const params = { model, ...withFiles(c.params) };
  if (!c.stream) return ofMessage(await anthropic.messages.create(params));
  // The SDK's MessageStream builds the message from the events and checks their order.
  const stream = anthropic.messages.stream(params);
  let text = '';
  stream.on('text', (delta) => (text += delta));
  const m = await stream.finalMessage();
  const answer = ofMessage(m);
  assert.equal(text, answer.text, 'the text deltas add up to the final message');
  return answer;
}

const models = [];
for await (const m of openai.models.list()) models.push(m);
const model = models[0].id;

for (const c of spec.cases ?? []) {
  await checks.run(`${c.api}: ${c.name}`, async () => {
    const want = await viaChat(model, c);
    const got = c.api === 'responses' ? await responses(model, c) : await messages(model, c);
    const { stop_sequence: stopSequence, ...answer } = got;
    sameAnswer(answer, want, c);
    if (c.expect_stop_sequence) assert.equal(stopSequence, c.expect_stop_sequence, 'the stop_sequence that matched');
    if (c.api === 'messages') {
      const { stream: _, max_tokens: __, ...counted } = withFiles(c.params);
      const n = await anthropic.messages.countTokens({ model, ...counted });
      assert.equal(n.input_tokens, want.prompt_tokens, 'count_tokens says another prompt length');
    }
  });
}

for (const r of spec.refusals ?? []) {
  await checks.run(`${r.api} refuses ${r.name}`, async () => {
    const create =
      r.api === 'responses'
        ? () => openai.responses.create({ model, ...r.params })
        : () => anthropic.messages.create({ model, ...r.params });
    await assert.rejects(create, (err) => {
      assert.equal(err.status, 400, `status ${err.status}: ${err.message}`);
      const message = r.api === 'responses' ? err.error?.message : err.error?.error?.message;
      assert.ok(message?.includes(r.message), `"${message}" does not say "${r.message}"`);
      if (r.api === 'responses') assert.equal(err.error?.param, r.param, 'the field the error names');
      else assert.equal(err.error?.type, 'error', 'Anthropic\'s error shape');
      return true;
    });
  });
}

// With a key: a wrong one is refused by both routes, sent as Bearer and as X-Api-Key.
if (args.apiKey !== 'epd-test') {
  await checks.run('a wrong key is refused as Bearer and as X-Api-Key', async () => {
    const wrongOpenai = new OpenAI({ baseURL: args.baseUrl, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrongOpenai.responses.create({ model, input: 'hi' }), (err) => err.status === 401);
    const wrongAnthropic = new Anthropic({ baseURL: args.baseUrl.replace(/\/v1$/, ''), apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrongAnthropic.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }),
      (err) => err.status === 401 && err.error?.error?.type === 'authentication_error');
  });
}

checks.finish();
