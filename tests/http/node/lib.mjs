// Shared by the SDK test scripts: arguments, the client, data URIs and the expected text of a reference run.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

// `--base-url URL --spec FILE` (or EPD_BASE_URL / EPD_SPEC): the harness writes the cases and their
// reference outputs (computed with epd-run) into the spec file.
export function parseArgs(argv = process.argv.slice(2)) {
  const args = { baseUrl: process.env.EPD_BASE_URL, spec: process.env.EPD_SPEC };
  for (let i = 0; i < argv.length; i += 2) {
    const [key, value] = [argv[i], argv[i + 1]];
    if (value === undefined) usage(`${key} needs a value`);
    if (key === '--base-url') args.baseUrl = value;
    else if (key === '--spec') args.spec = value;
    else usage(`unknown argument ${key}`);
  }
  if (!args.baseUrl) usage('--base-url is required');
  return args;
}

function usage(why) {
  console.error(`${why}\nusage: node <script>.mjs --base-url http://127.0.0.1:PORT/v1 [--spec cases.json]`);
  process.exit(2);
}

export function readSpec(path) {
  if (!path) usage('--spec is required');
  return JSON.parse(readFileSync(path, 'utf8'));
}

// No retries: a test must see the first answer, errors included, not a retried one. The key comes from
// OPENAI_API_KEY when the router requires one (and NODE_EXTRA_CA_CERTS names its CA under TLS).
export function makeClient(baseUrl) {
  const apiKey = process.env.OPENAI_API_KEY || 'epd-test';
  return new OpenAI({ baseURL: baseUrl, apiKey, maxRetries: 0, timeout: 60_000 });
}

// An image file as a data URI; the type comes from the magic bytes (the server accepts PNG, JPEG, PPM).
export function imageDataUri(path) {
  const bytes = readFileSync(path);
  let type = 'application/octet-stream';
  if (bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) type = 'image/png';
  else if (bytes[0] === 0xff && bytes[1] === 0xd8) type = 'image/jpeg';
  else if (bytes[0] === 0x50 && bytes[1] === 0x36) type = 'image/x-portable-pixmap';
  return `data:${type};base64,${bytes.toString('base64')}`;
}

// A chat request whose image_url parts with a url "@file:PATH" carry PATH's data URI instead.
export function withImages(params) {
  if (!params.messages) return params;
  const messages = params.messages.map((m) => {
    if (!Array.isArray(m.content)) return m;
    const content = m.content.map((part) =>
      part.type === 'image_url' && part.image_url.url.startsWith('@file:')
        ? { ...part, image_url: { ...part.image_url, url: imageDataUri(part.image_url.url.slice(6)) } }
        : part,
    );
    return { ...m, content };
  });
  return { ...params, messages };
}

// The text a byte-level model's tokens read as: bytes up to EOS (257), invalid UTF-8 replaced by U+FFFD.
export function textOfTokens(tokens) {
  const bytes = [];
  for (const t of tokens) {
    if (t === 257) break;
    if (t < 256) bytes.push(t);
  }
  return new TextDecoder('utf-8').decode(Uint8Array.from(bytes));
}

// Runs named checks; prints one line per check and exits 1 at the end if any failed (all of them run, so one
// report names every difference).
export class Checks {
  constructor() {
    this.failed = 0;
    this.passed = 0;
  }

  async run(name, fn) {
    try {
      await fn();
      this.passed++;
      console.log(`ok   ${name}`);
    } catch (err) {
      this.failed++;
      // The SDK's "Connection error." hides what the socket said (ECONNREFUSED, ECONNRESET, ...): print
      // the chain of causes too.
      let causes = '';
      for (let c = err?.cause; c; c = c.cause) causes += `\n  caused by: ${c?.code ?? ''} ${c?.message ?? c}`;
      console.log(`FAIL ${name}: ${err?.stack ?? err}${causes}`);
    }
  }

  finish() {
    console.log(`${this.passed} passed, ${this.failed} failed`);
    process.exit(this.failed ? 1 : 0);
  }
}

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

// The model to ask for: the spec's, else the first the server lists.
export async function modelOf(client, spec) {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  return spec.model ?? models[0]?.id ?? 'epd';
}

// `create()` must fail with a 400 whose message contains `expected`.
export async function assertRefused(create, expected) {
  await assert.rejects(create, (err) => {
    assert.equal(err.status, 400, `status ${err.status}: ${err.message}`);
    assert.ok(err.message.includes(expected), `"${err.message}" does not say "${expected}"`);
    return true;
  });
}
