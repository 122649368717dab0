// Structured output through the official SDK: response_format (json_object, json_schema) and llama-server's
// grammar / json_schema fields, plain and streamed, each answer equal to the colocated run given the same
// grammar; JSON answers parse and validate against their schema; hostile grammars and schemas are a 400.
//
//   node structured.mjs --base-url http://127.0.0.1:PORT/v1 --spec cases.json
//
// cases.json: {"cases": [{"name", "endpoint": "completions"|"chat", "params": {request body without model/
// stream}, "expect_text": the colocated run's answer, "expect_finish"?: "stop"|"length", "json"?: the answer
// must parse as a JSON object, "schema"?: and validate against this schema}], "refusals": [{"name", "endpoint",
// "params", "expect_message": a part of the 400's message}]}.
// An image_url whose url is "@file:PATH" is replaced by PATH's data URI.
import assert from 'node:assert/strict';
import {
  assertRefused,
  Checks,
  makeClient,
  modelOf,
  parseArgs,
  readSpec,
  violation,
  withImages,
} from './lib.mjs';

const args = parseArgs();
const spec = readSpec(args.spec);
const client = makeClient(args.baseUrl);
const checks = new Checks();

function checkAnswer(text, finish, c) {
  assert.equal(text, c.expect_text, 'the colocated run gave another answer');
  if (c.expect_finish) assert.equal(finish, c.expect_finish, 'finish_reason');
  if (c.json || c.schema) {
    let value;
    assert.doesNotThrow(() => (value = JSON.parse(text)), `the answer is not JSON: ${text}`);
    assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), 'the answer is a JSON object');
    if (c.schema) assert.equal(violation(value, c.schema), null, `the answer ${text} breaks the schema`);
  }
}

async function plain(c, model) {
  const params = { model, ...withImages(c.params) };
  const chat = c.endpoint === 'chat';
  const res = chat ? await client.chat.completions.create(params) : await client.completions.create(params);
  const choice = res.choices[0];
  checkAnswer(chat ? choice.message.content : choice.text, choice.finish_reason, c);
}

async function streamed(c, model) {
  const params = { model, ...withImages(c.params), stream: true };
  const chat = c.endpoint === 'chat';
  const stream = chat ? await client.chat.completions.create(params) : await client.completions.create(params);
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    text += (chat ? choice.delta?.content : choice.text) ?? '';
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  checkAnswer(text, finish, c);
}

async function refused(r, model) {
  const params = { model, ...r.params };
  const started = Date.now();
  await assertRefused(
    () => (r.endpoint === 'chat' ? client.chat.completions.create(params) : client.completions.create(params)),
    r.expect_message,
  );
  console.log(`     refused in ${Date.now() - started} ms`);
}

const model = await modelOf(client, spec);
for (const c of spec.cases ?? []) {
  await checks.run(`${c.name} (plain)`, () => plain(c, model));
  await checks.run(`${c.name} (stream)`, () => streamed(c, model));
}
for (const r of spec.refusals ?? []) await checks.run(`${r.name} is a 400`, () => refused(r, model));
checks.finish();
