// Function calling through the official SDK: tools with tool_choice "required", a named function and "auto",
// plain and streamed, n > 1, a conversation that carries a past call and its result; each answer equal to
// the colocated run (epd-run --tools) and each call's arguments valid against its tool's parameters; hostile
// tools are a 400.
//
//   node tools.mjs --base-url http://127.0.0.1:PORT/v1 --spec cases.json
//
// cases.json: {"cases": [{"name", "params": {chat body without model/stream}, "expect"?: {"text": the
// colocated answer's text, "finish": "stop"|"length", "tool_calls"?: [{"name", "arguments"}], "content"?:
// the text outside the calls}, "must_call"?: the answer must be calls (when no expectation is given)}],
// "refusals": [{"name", "params", "expect_message"}]}. Each case's tools' parameters validate its calls.
import assert from 'node:assert/strict';
import { assertRefused, Checks, makeClient, modelOf, parseArgs, readSpec, violation } from './lib.mjs';

const args = parseArgs();
const spec = readSpec(args.spec);
const client = makeClient(args.baseUrl);
const checks = new Checks();

function schemaOf(c, name) {
  const tool = c.params.tools.find((t) => t.function.name === name);
  assert.ok(tool, `a call of ${name}, which is not a tool`);
  return tool.function.parameters ?? true;
}

// One choice's answer: its content, finish_reason and calls ({id, name, arguments}).
function checkChoice(c, content, finish, calls) {
  const e = c.expect;
  const wantCalls = e ? (e.tool_calls ?? []) : null;
  if (e && wantCalls.length === 0) {
    assert.equal(calls.length, 0, `no calls expected, got ${JSON.stringify(calls)}`);
    assert.equal(content ?? '', e.text, 'the colocated run gave another answer');
    assert.equal(finish, e.finish, 'finish_reason');
    return;
  }
  if (c.must_call || wantCalls?.length) {
    const cut = e?.finish === 'length';  // max_tokens ended it: finish_reason "length", calls or not
    assert.equal(finish, cut ? 'length' : 'tool_calls', `finish_reason (content ${JSON.stringify(content)})`);
    assert.ok(calls.length > 0, 'the answer has calls');
  }
  if (wantCalls) {
    assert.deepEqual(calls.map(({ name, arguments: a }) => ({ name, arguments: a })), wantCalls, 'the colocated run called otherwise');
    assert.equal((content ?? '').trim(), (e.content ?? '').trim(), 'content next to the calls');
  }
  // An answer max_tokens cut may end in an unfinished call (finish_reason "length", as llama-server's).
  for (const call of finish === 'tool_calls' ? calls : []) {
    // epd's own (call_<hex>), or the one the format writes (Mistral's), as llama-server keeps it
    assert.ok(typeof call.id === 'string' && call.id.length > 0, 'a call id');
    let args;
    assert.doesNotThrow(() => (args = JSON.parse(call.arguments)), `arguments are not JSON: ${call.arguments}`);
    assert.equal(violation(args, schemaOf(c, call.name)), null, `${call.arguments} breaks ${call.name}'s schema`);
  }
}

async function plain(c, model) {
  const res = await client.chat.completions.create({ model, ...c.params });
  assert.equal(res.choices.length, c.params.n ?? 1);
  for (const choice of res.choices) {
    const calls = (choice.message.tool_calls ?? []).map((t) => {
      assert.equal(t.type, 'function');
      return { id: t.id, name: t.function.name, arguments: t.function.arguments };
    });
    if (calls.length && !(choice.message.content ?? '').trim()) assert.equal(choice.message.content, null);
    checkChoice(c, choice.message.content, choice.finish_reason, calls);
  }
}

// Deltas accumulated per choice: content text, and calls by their index (OpenAI's streaming shape).
async function streamed(c, model) {
  const stream = await client.chat.completions.create({ model, ...c.params, stream: true });
  const choices = new Map();
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      if (!choices.has(ch.index)) choices.set(ch.index, { content: '', finish: null, calls: [] });
      const acc = choices.get(ch.index);
      acc.content += ch.delta?.content ?? '';
      for (const d of ch.delta?.tool_calls ?? []) {
        const call = (acc.calls[d.index] ??= { id: '', name: '', arguments: '' });
        call.id += d.id ?? '';
        call.name += d.function?.name ?? '';
        call.arguments += d.function?.arguments ?? '';
      }
      if (ch.finish_reason) acc.finish = ch.finish_reason;
    }
  }
  assert.equal(choices.size, c.params.n ?? 1);
  for (const acc of choices.values()) checkChoice(c, acc.content, acc.finish, acc.calls);
}

async function refused(r, model) {
  await assertRefused(() => client.chat.completions.create({ model, ...r.params }), r.expect_message);
}

const model = await modelOf(client, spec);
for (const c of spec.cases ?? []) {
  await checks.run(`${c.name} (plain)`, () => plain(c, model));
  await checks.run(`${c.name} (stream)`, () => streamed(c, model));
}
for (const r of spec.refusals ?? []) await checks.run(`${r.name} is a 400`, () => refused(r, model));
checks.finish();
