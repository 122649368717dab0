// Completions and chat through the official SDK, each case plain and streamed, against reference outputs.
//
//   node generate.mjs --base-url http://127.0.0.1:PORT/v1 --spec cases.json
//
// cases.json: {"model"?: id, "cases": [{"name", "endpoint": "completions"|"chat", "params": {request body
// without model/stream}, "expect_tokens": [token ids of the reference run], "prompt_tokens"?: n,
// "expect_text"?: the answer's text (else the reference model's bytes of expect_tokens), "expect_finish"?:
// "stop" | "length", "expect_choices"?: with params.n > 1, each choice's reference token ids in index
// order (instead of expect_tokens)}]}.
// An image_url whose url is "@file:PATH" is replaced by PATH's data URI.
import assert from 'node:assert/strict';
import { Checks, makeClient, parseArgs, readSpec, textOfTokens, withImages } from './lib.mjs';

const args = parseArgs();
const spec = readSpec(args.spec);
const client = makeClient(args.baseUrl);
const checks = new Checks();

// The router's own figures, on the final answer or the finish chunk.
function checkEpd(epd) {
  assert.equal(typeof epd, 'object', 'the "epd" extension object is missing');
  for (const key of ['attempts', 'first_token_ms', 'total_ms']) assert.equal(typeof epd[key], 'number', `epd.${key}`);
  assert.ok(epd.attempts >= 1, 'epd.attempts >= 1');
  assert.ok(epd.first_token_ms >= 0 && epd.first_token_ms <= epd.total_ms, 'epd.first_token_ms in 0..total_ms');
  assert.ok(epd.room !== undefined, 'epd.room');
  assert.equal(typeof epd.request_id, 'string', 'epd.request_id');
}

// Each choice's expected text, in index order.
const expectedChoices = (c) => (c.expect_choices ? c.expect_choices.map(textOfTokens) : [expectedText(c)]);
const expectedCompletionTokens = (c) =>
  (c.expect_choices ?? [c.expect_tokens]).reduce((sum, tokens) => sum + tokens.length, 0);

function checkUsage(usage, c) {
  assert.ok(usage, 'usage is missing');
  assert.equal(usage.completion_tokens, expectedCompletionTokens(c), 'usage.completion_tokens');
  if (c.prompt_tokens !== undefined) assert.equal(usage.prompt_tokens, c.prompt_tokens, 'usage.prompt_tokens');
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, 'usage.total_tokens');
}

const expectedText = (c) => c.expect_text ?? textOfTokens(c.expect_tokens);

function checkFinish(finish, c) {
  assert.ok(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
  if (c.expect_finish !== undefined) assert.equal(finish, c.expect_finish, 'finish_reason');
}

async function plain(c, model) {
  const params = { model, ...withImages(c.params) };
  const expected = expectedChoices(c);
  const chat = c.endpoint === 'chat';
  const res = chat ? await client.chat.completions.create(params) : await client.completions.create(params);
  assert.equal(res.object, chat ? 'chat.completion' : 'text_completion');
  assert.equal(res.choices.length, expected.length, 'choices');
  res.choices.forEach((choice, i) => {
    assert.equal(choice.index, i, 'choices in index order');
    if (chat) assert.equal(choice.message.role, 'assistant');
    assert.equal(chat ? choice.message.content : choice.text, expected[i], `choice ${i}`);
    checkFinish(choice.finish_reason, c);
  });
  checkUsage(res.usage, c);
  checkEpd(res.epd);
  if (expected.length > 1) {
    res.epd.choices.forEach(checkEpd);
    assert.equal(new Set(res.epd.choices.map((e) => String(e.room))).size, expected.length, 'a room per choice');
  }
}

async function streamed(c, model) {
  const params = { model, ...withImages(c.params), stream: true, stream_options: { include_usage: true } };
  const chat = c.endpoint === 'chat';
  const stream = chat ? await client.chat.completions.create(params) : await client.completions.create(params);
  const expected = expectedChoices(c);
  const text = expected.map(() => '');
  const finish = expected.map(() => null);
  const roleSent = expected.map(() => false);
  let usage = null;
  let epd = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, chat ? 'chat.completion.chunk' : 'text_completion');
    assert.equal(usage, null, 'a chunk after the usage chunk');
    if (chunk.epd) epd = chunk.epd;
    if (chunk.usage) {
      usage = chunk.usage;
      assert.equal(chunk.choices.length, 0, 'the usage chunk has no choices');
      continue;
    }
    const choice = chunk.choices[0];
    const i = choice.index;
    assert.ok(i >= 0 && i < expected.length, `choice index ${i}`);
    // Chat: each choice's first chunk names the role.
    if (chat && !roleSent[i]) assert.equal(choice.delta?.role, 'assistant', `choice ${i}'s first chunk names the role`);
    roleSent[i] = true;
    assert.equal(finish[i], null, `a chunk of choice ${i} after its finish chunk`);
    text[i] += (chat ? choice.delta?.content : choice.text) ?? '';
    if (choice.finish_reason) {
      finish[i] = choice.finish_reason;
      checkEpd(chunk.epd);
    }
  }
  expected.forEach((t, i) => {
    assert.equal(text[i], t, `choice ${i}`);
    checkFinish(finish[i], c);
  });
  checkUsage(usage, c);
  checkEpd(epd);
}

const models = [];
await checks.run('GET /v1/models lists the model', async () => {
  for await (const m of client.models.list()) models.push(m);
  assert.ok(models.length >= 1, 'no model listed');
  assert.equal(models[0].object, 'model');
  assert.equal(typeof models[0].id, 'string');
});
const model = spec.model ?? models[0]?.id ?? 'epd';

for (const c of spec.cases) {
  await checks.run(`${c.name} (plain)`, () => plain(c, model));
  await checks.run(`${c.name} (stream)`, () => streamed(c, model));
}
checks.finish();
