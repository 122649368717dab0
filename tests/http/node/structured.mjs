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
import { Checks, makeClient, parseArgs, readSpec, withImages } from './lib.mjs';

const args = parseArgs();
const spec = readSpec(args.spec);
const client = makeClient(args.baseUrl);
const checks = new Checks();

// A small JSON Schema validator for what the cases use: type (one or a list), enum, const, properties,
// required, additionalProperties (false or a schema), items, minItems/maxItems, minLength/maxLength,
// minimum/maximum, anyOf, $ref to #/$defs/... Returns the first violation, or null.
export function violation(value, schema, root = schema, path = '$') {
  if (schema === true || schema === undefined) return null;
  if (schema === false) return `${path}: no value is allowed`;
  if (schema.$ref) {
    const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(schema.$ref);
    if (!m) return `${path}: unsupported $ref ${schema.$ref}`;
    return violation(value, root[m[1]][m[2]], root, path);
  }
  if (schema.anyOf) {
    return schema.anyOf.some((s) => violation(value, s, root, path) === null) ? null : `${path}: matches no anyOf`;
  }
  if ('const' in schema && JSON.stringify(value) !== JSON.stringify(schema.const)) return `${path}: not the const`;
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value)))
    return `${path}: ${JSON.stringify(value)} is not in the enum`;
  if (schema.type) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    const kind =
      value === null
        ? 'null'
        : Array.isArray(value)
          ? 'array'
          : Number.isInteger(value)
            ? 'integer'
            : typeof value;
    const ok = types.some((t) => t === kind || (t === 'number' && kind === 'integer'));
    if (!ok) return `${path}: ${kind} is not ${types.join('|')}`;
  }
  if (typeof value === 'string') {
    if (schema.minLength !== undefined && [...value].length < schema.minLength) return `${path}: too short`;
    if (schema.maxLength !== undefined && [...value].length > schema.maxLength) return `${path}: too long`;
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) return `${path}: below the minimum`;
    if (schema.maximum !== undefined && value > schema.maximum) return `${path}: above the maximum`;
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) return `${path}: too few items`;
    if (schema.maxItems !== undefined && value.length > schema.maxItems) return `${path}: too many items`;
    for (let i = 0; i < value.length; i++) {
      const v = violation(value[i], schema.items, root, `${path}[${i}]`);
      if (v) return v;
    }
  } else if (value !== null && typeof value === 'object') {
    for (const key of schema.required ?? []) if (!(key in value)) return `${path}: "${key}" is missing`;
    for (const [key, v] of Object.entries(value)) {
      const sub = schema.properties?.[key] ?? schema.additionalProperties;
      if (sub === false) return `${path}: "${key}" is not allowed`;
      const bad = violation(v, sub, root, `${path}.${key}`);
      if (bad) return bad;
    }
  }
  return null;
}

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
  await assert.rejects(
    () => (r.endpoint === 'chat' ? client.chat.completions.create(params) : client.completions.create(params)),
    (err) => {
      assert.equal(err.status, 400, `status ${err.status}: ${err.message}`);
      assert.ok(err.message.includes(r.expect_message), `"${err.message}" does not say "${r.expect_message}"`);
      return true;
    },
  );
  console.log(`     refused in ${Date.now() - started} ms`);
}

const models = [];
for await (const m of client.models.list()) models.push(m);
const model = spec.model ?? models[0]?.id ?? 'epd';
for (const c of spec.cases ?? []) {
  await checks.run(`${c.name} (plain)`, () => plain(c, model));
  await checks.run(`${c.name} (stream)`, () => streamed(c, model));
}
for (const r of spec.refusals ?? []) await checks.run(`${r.name} is a 400`, () => refused(r, model));
checks.finish();
