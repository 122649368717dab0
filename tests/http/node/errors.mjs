// API errors arrive as the SDK's typed errors, and X-Request-Id is echoed.
//
//   node errors.mjs --base-url http://127.0.0.1:PORT/v1 [--spec {"model": id}]
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Checks, makeClient, parseArgs, readSpec } from './lib.mjs';

const args = parseArgs();
const spec = args.spec ? readSpec(args.spec) : {};
const client = makeClient(args.baseUrl);
const checks = new Checks();
const model = spec.model ?? (await client.models.list()).data[0]?.id ?? 'epd';
const chat = { model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 2 };

// The error body's fields as the SDK exposes them: {"error": {"message", "type", "param", "code"}}.
function checkBody(err, status, param) {
  assert.equal(err.status, status);
  assert.ok(typeof err.error?.message === 'string' && err.error.message.length > 0, 'error.message');
  assert.equal(typeof err.type, 'string', 'error.type');
  for (const key of ['param', 'code']) assert.ok(key in err.error, `error.${key} is present (null allowed)`);
  if (param) assert.equal(err.param, param, 'error.param names the field');
}

async function expectError(type, status, param, call) {
  await assert.rejects(call, (err) => {
    assert.ok(err instanceof type, `expected ${type.name}, got ${err?.constructor?.name}: ${err?.message}`);
    checkBody(err, status, param);
    return true;
  });
}

await checks.run('chat n=9 is a BadRequestError (400) naming n', () =>
  expectError(OpenAI.BadRequestError, 400, 'n', () => client.chat.completions.create({ ...chat, n: 9 })),
);
await checks.run('completions n=9 is a BadRequestError (400) naming n', () =>
  expectError(OpenAI.BadRequestError, 400, 'n', () =>
    client.completions.create({ model, prompt: 'Hello', max_tokens: 2, n: 9 }),
  ),
);
await checks.run('chat without messages is a BadRequestError (400)', () =>
  expectError(OpenAI.BadRequestError, 400, null, () => client.chat.completions.create({ model, max_tokens: 2 })),
);
await checks.run('an unknown route is a NotFoundError (404)', () =>
  expectError(OpenAI.NotFoundError, 404, null, () => client.post('/no-such-route', { body: {} })),
);

await checks.run('an unknown model is a NotFoundError (404) naming model', () =>
  expectError(OpenAI.NotFoundError, 404, 'model', () =>
    client.chat.completions.create({ ...chat, model: 'no-such-model' }),
  ),
);

await checks.run('X-Request-Id is echoed on a chat answer', async () => {
  const id = `sdk-chat-${process.pid}`;
  const { data, response } = await client.chat.completions
    .create(chat, { headers: { 'X-Request-Id': id } })
    .withResponse();
  assert.equal(response.headers.get('x-request-id'), id);
  assert.equal(data._request_id, id, 'the SDK reads the id from the header');
  assert.equal(data.epd?.request_id, id, 'epd.request_id');
});
await checks.run('X-Request-Id is echoed on a stream', async () => {
  const id = `sdk-stream-${process.pid}`;
  const { data: stream, response } = await client.completions
    .create({ model, prompt: 'Hello', max_tokens: 2, stream: true }, { headers: { 'X-Request-Id': id } })
    .withResponse();
  assert.equal(response.headers.get('x-request-id'), id);
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
  let epd = null;
  for await (const chunk of stream) epd = chunk.epd ?? epd;
  assert.equal(epd?.request_id, id, 'epd.request_id on the finish chunk');
});
await checks.run('X-Request-Id is echoed on an error', async () => {
  const id = `sdk-error-${process.pid}`;
  await assert.rejects(
    () => client.chat.completions.create({ ...chat, n: 9 }, { headers: { 'X-Request-Id': id } }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError);
      assert.equal(err.headers?.get('x-request-id'), id);
      assert.equal(err.requestID, id);
      return true;
    },
  );
});
checks.finish();
