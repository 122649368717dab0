// The router's dashboard (GET /) in a real browser: Debian's headless Chromium driven by playwright-core.
// Waits until the instance table shows every expected instance healthy, sends a prompt over the context
// limit through the playground and waits for its code in the recent-failures list, streams a chat answer
// with an image (a chosen file, then the page's sample picture N with --sample N), waits until the charts
// have data, saves a full-page screenshot and prints what the page showed as one line of JSON. Exits 1 with a message on any failure, also on a console error, an uncaught
// exception or a failed request on the page. Run by tests/e2e/dashboard_test.cpp; by hand:
//   node tests/http/node/dashboard.mjs --url http://127.0.0.1:18100/ --expect router,encoder-0,prefill-0,decode-0 \
//     --image tests/http/node/fixtures/checker.png --screenshot /tmp/dashboard.png
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { chromium } from 'playwright-core';

const WAIT_MS = Number(process.env.EPD_WAIT_MS || 30_000);  // each wait on the page (EPD_WAIT_MS)
const OVERALL_MS = 150_000;

function parseArgs(argv) {
  const args = {
    url: null,
    expect: [],
    image: null,
    sample: 0,
    prompt: 'Describe the picture.',
    maxTokens: 24,
    screenshot: null,
    failPromptBytes: 0,  // 0: no failure case
    chromium: process.env.EPD_CHROMIUM || '/usr/bin/chromium',
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [key, value] = [argv[i], argv[i + 1]];
    if (value === undefined) usage(`${key} needs a value`);
    if (key === '--url') args.url = value;
    else if (key === '--expect') args.expect = value.split(',').filter(Boolean);
    else if (key === '--image') args.image = value;
    else if (key === '--sample') args.sample = Number(value);
    else if (key === '--prompt') args.prompt = value;
    else if (key === '--max-tokens') args.maxTokens = Number(value);
    else if (key === '--screenshot') args.screenshot = value;
    else if (key === '--fail-prompt-bytes') args.failPromptBytes = Number(value);
    else if (key === '--chromium') args.chromium = value;
    else usage(`unknown argument ${key}`);
  }
  if (!args.url || !args.expect.length || !args.screenshot) usage('--url, --expect and --screenshot are required');
  return args;
}

function usage(why) {
  console.error(`dashboard.mjs: ${why}\nusage: node dashboard.mjs --url URL --expect id,id,... --screenshot FILE ` +
    '[--image PNG] [--sample N] [--prompt TEXT] [--max-tokens N] [--fail-prompt-bytes N] [--chromium PATH]');
  process.exit(2);
}

class Failure extends Error {}

const args = parseArgs(process.argv.slice(2));
const problems = [];  // console errors, page exceptions, failed requests: each fails the run
const expectedBad = [];  // responses >= 400 the run provokes on purpose: [{method, path, status}]
const facts = { instances: [], charts: {}, answer: null, failure: null, screenshot: args.screenshot };

const userDir = mkdtempSync(join(tmpdir(), 'epd-dashboard-chromium-'));
let context = null;
const overall = setTimeout(() => {
  console.error(`dashboard.mjs: FAILED: not finished after ${OVERALL_MS} ms`);
  process.exit(1);
}, OVERALL_MS);

try {
  context = await chromium.launchPersistentContext(userDir, {
    executablePath: args.chromium,
    headless: true,
    // This machine's network is closed: without these Chromium keeps trying its own services.
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1440, height: 1000 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  watch(page);
  await page.goto(args.url, { waitUntil: 'load', timeout: WAIT_MS });

  facts.instances = await waitForInstances(page, args.expect);
  if (args.failPromptBytes > 0) facts.failure = await failingRequest(page, args.failPromptBytes);
  facts.answer = await streamedAnswer(page);
  facts.charts = await waitForCharts(page);
  // One more poll so the failures list, the activity table and the charts all show the last request.
  await page.waitForTimeout(1200);
  facts.instances_after = await instanceRows(page);  // with the prefix caches' figures of the answers

  mkdirSync(dirname(args.screenshot), { recursive: true });
  await page.screenshot({ path: args.screenshot, fullPage: true });
  checkProblems();
  console.log(JSON.stringify(facts));
} catch (err) {
  const why = err instanceof Failure ? err.message : err?.stack ?? String(err);
  console.error(`dashboard.mjs: FAILED: ${why}`);
  if (problems.length) console.error('problems on the page:\n  ' + problems.join('\n  '));
  console.error('facts so far: ' + JSON.stringify(facts));
  process.exitCode = 1;
} finally {
  clearTimeout(overall);
  await context?.close().catch(() => {});
  rmSync(userDir, { recursive: true, force: true });
}

// Everything the page reports that a working dashboard never does.
function watch(page) {
  page.on('console', (msg) => {
    if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`uncaught exception: ${err.message}`));
  page.on('requestfailed', (req) => problems.push(`request failed: ${req.method()} ${req.url()}: ${req.failure()?.errorText}`));
  page.on('response', (res) => {
    if (res.status() >= 400) problems.push(`HTTP ${res.status()}: ${res.request().method()} ${res.url()}`);
  });
}

// A provoked error response shows twice: as the response and as Chromium's console line about it.
function checkProblems() {
  const left = problems.filter((p) => !expectedBad.some((e) =>
    p === `HTTP ${e.status}: ${e.method} ${new URL(e.path, args.url)}` ||
    (p.startsWith('console error: Failed to load resource: the server responded with a status of ' + e.status))));
  if (left.length) throw new Failure('the page reported problems:\n  ' + left.join('\n  '));
}

// Polls `fn` in the page until it returns true. Not page.waitForFunction: its polling compiles the predicate
// inside the page, which the dashboard's Content-Security-Policy (no eval) rightly refuses.
async function waitFor(page, what, fn, arg) {
  const deadline = Date.now() + WAIT_MS;
  while (!(await page.evaluate(fn, arg))) {
    if (Date.now() > deadline) throw new Failure(`${what} (waited ${WAIT_MS} ms)`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function waitForInstances(page, ids) {
  await waitFor(page, `the instance table never showed ${ids.join(', ')} as healthy`, (ids) =>
    ids.every((id) => document.querySelector(`#instances tr[data-instance="${CSS.escape(id)}"]`)?.dataset.healthy === 'true'),
  ids);
  return instanceRows(page);
}

function instanceRows(page) {
  return page.$$eval('#instances tbody tr', (rows) => rows.map((r) => ({
    id: r.dataset.instance,
    role: r.dataset.role,
    healthy: r.dataset.healthy === 'true',
    cache_hit: Number(r.dataset.cacheHit),
    cache_lookups: Number(r.dataset.cacheLookups),
    text: r.innerText.replace(/\s+/g, ' ').trim(),
  })));
}

async function submitAndWait(page) {
  await page.click('#send');
  await waitFor(page, 'the playground never finished its answer', () =>
    ['done', 'error', 'stopped'].includes(document.querySelector('#answer-state').dataset.state));
}

// A prompt longer than the model's context passes the HTTP layer (its limit is on bytes) and is refused by
// the router: 400 invalid_request, shown by the playground and then in the recent-failures list.
async function failingRequest(page, bytes) {
  expectedBad.push({ method: 'POST', path: '/v1/chat/completions', status: 400 });
  await page.fill('#prompt', 'x'.repeat(bytes));
  await page.setInputFiles('#image', []);
  await page.fill('#max-tokens', '8');
  await page.fill('#temperature', '0');
  await submitAndWait(page);
  const shown = await page.$eval('#answer-error', (e) => ({
    state: document.querySelector('#answer-state').dataset.state,
    code: e.dataset.code ?? null,
    status: Number(e.dataset.status),
    request_id: e.dataset.requestId ?? null,
    text: e.innerText,
    visible: !e.hidden,
  }));
  if (shown.state !== 'error' || !shown.visible) throw new Failure(`the over-long prompt did not fail: ${JSON.stringify(shown)}`);
  if (!shown.request_id) throw new Failure('the playground did not show the failed request\'s id');
  await waitFor(page, `request ${shown.request_id} never appeared in the recent-failures list`, (id) =>
    document.querySelector(`#failures li[data-request-id="${CSS.escape(id)}"]`) !== null, shown.request_id);
  const listed = await page.$eval(`#failures li[data-request-id="${shown.request_id}"]`, (li) => ({
    code: li.dataset.code,
    status: Number(li.dataset.status),
    text: li.innerText.replace(/\s+/g, ' ').trim(),
  }));
  return { playground: shown, listed };
}

async function streamedAnswer(page) {
  await page.fill('#prompt', args.prompt);
  if (args.image) {
    await page.setInputFiles('#image', args.image);
    await waitFor(page, 'the playground never previewed the image', () => !document.querySelector('#image-preview').hidden);
  }
  if (args.sample) {  // a sample picture replaces the chosen file
    await page.click(`button.sample[data-src="/dashboard/sample-${args.sample}.png"]`);
    await waitFor(page, 'the playground never previewed the sample picture', (n) =>
      document.querySelector('#image-preview').dataset.sample === `/dashboard/sample-${n}.png`, args.sample);
  }
  await page.fill('#max-tokens', String(args.maxTokens));
  await page.fill('#temperature', '0');
  await submitAndWait(page);
  const out = await page.evaluate(() => {
    const s = document.querySelector('#answer-state').dataset;
    return {
      state: s.state,
      text: document.querySelector('#answer').textContent,
      finish_reason: s.finishReason ?? null,
      request_id: s.requestId ?? null,
      completion_tokens: s.completionTokens ? Number(s.completionTokens) : null,
      meta: document.querySelector('#answer-meta').textContent,
      error: document.querySelector('#answer-error').hidden ? null : document.querySelector('#answer-error').innerText,
    };
  });
  if (out.state !== 'done') throw new Failure(`the streamed answer did not complete: ${JSON.stringify(out)}`);
  return out;
}

// The answer finished: within a poll or two the throughput charts see it, the TTFT chart has its point and
// the transfer counters of the instances that moved its embeddings and KV pages have grown.
async function waitForCharts(page) {
  const read = () => page.$$eval('.chart', (figs) => Object.fromEntries(figs.map((f) => [f.id.replace('chart-', ''), {
    points: Number(f.dataset.points),
    peak: Number(f.dataset.peak),
    value: f.querySelector('.value').textContent,
  }])));
  const ready = () => ['requests', 'tokens', 'ttft', 'bandwidth'].every((k) => {
    const f = document.getElementById('chart-' + k);
    return Number(f.dataset.points) > 0 && Number(f.dataset.peak) > 0;
  });
  try {
    await waitFor(page, 'the charts never all got data', ready);
  } catch (err) {
    throw new Failure(`${err.message}: ${JSON.stringify(await read())}`);
  }
  return read();
}
