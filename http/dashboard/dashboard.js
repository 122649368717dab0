// epd dashboard (docs/http-api.md, "Dashboard"): polls this router's /v1/instances, /v1/stats and
// /v1/activity every second and draws them; the playground streams a chat answer through the OpenAI route.
// Plain DOM and SVG, no framework. Text from the server only ever goes in as text nodes, never as HTML.
'use strict';

(() => {
  const POLL_MS = 1000;
  const WINDOW_MS = 120_000;  // the charts show the last two minutes
  const MAX_FAILURES = 30;
  const MAX_ACTIVITY = 14;

  // ---- small DOM helpers ------------------------------------------------------------------------------

  const $ = (sel) => document.querySelector(sel);

  // el('td', {class: 'num', data: {x: 1}, title: 'why'}, child, 'text', ...)
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  function svg(tag, attrs = {}, text) {
    const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
    setAttrs(node, attrs);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null) continue;
      if (key === 'data') Object.assign(node.dataset, value);
      else node.setAttribute(key, String(value));
    }
  }

  // ---- formatting -------------------------------------------------------------------------------------

  function fmtNumber(v) {
    if (!Number.isFinite(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + 'G';
    if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    if (a >= 100 || Number.isInteger(v)) return Math.round(v).toString();
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(2).replace(/\.?0+$/, '') || '0';
  }

  function fmtBytes(v) {
    if (!Number.isFinite(v)) return '–';
    if (v === 0) return '0 B';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return (i === 0 ? Math.round(v).toString() : v.toFixed(v >= 100 ? 0 : 1)) + ' ' + units[i];
  }

  function fmtMs(ms) {
    if (!Number.isFinite(ms)) return '–';
    if (ms === 0) return '0';
    if (ms >= 10_000) return (ms / 1000).toFixed(1) + ' s';
    if (ms >= 1000) return (ms / 1000).toFixed(2) + ' s';
    if (ms >= 10) return Math.round(ms) + ' ms';
    return ms.toFixed(1) + ' ms';
  }

  function fmtClock(unixMs) {
    const d = new Date(unixMs);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
  }

  // ---- state ------------------------------------------------------------------------------------------

  const state = {
    model: null,
    prev: null,  // the previous poll's counters, for rates: {t, completed, tokens, transfer: Map}
    lastSeq: 0,  // the newest /v1/activity entry already charted
    series: { requests: [], tokens: [], ttft: [], bandwidth: [] },  // [{t, v, bad}]
  };

  const charts = {
    requests: { id: 'chart-requests', format: (v) => fmtNumber(v), unit: ' req/s', kind: 'line' },
    tokens: { id: 'chart-tokens', format: (v) => fmtNumber(v), unit: ' tok/s', kind: 'line' },
    ttft: { id: 'chart-ttft', format: fmtMs, unit: '', kind: 'dots' },
    bandwidth: { id: 'chart-bandwidth', format: fmtBytes, unit: '/s', kind: 'line', bytes: true },
  };

  // Incarnations are 64-bit: parsed as numbers their last digits would be wrong, so they are kept as the
  // text they were sent as (JSON.parse's source text, where the browser has it).
  const exact = (key, value, context) =>
    key === 'incarnation' && typeof context?.source === 'string' ? context.source : value;

  // With API keys on (docs/http-api.md, "Authentication") the page asks for a key the first time the router
  // answers 401, keeps it for this tab only (sessionStorage) and sends it as a Bearer header.
  const KEY_ITEM = 'epd-api-key';
  let keyDeclined = false;
  const storedKey = () => sessionStorage.getItem(KEY_ITEM);
  const authHeaders = (key = storedKey()) => (key ? { Authorization: `Bearer ${key}` } : {});
  // After a 401 to a request sent with `sentKey`: true when another key is at hand to try.
  function keyAfter401(sentKey) {
    const stored = storedKey();
    if (stored && stored !== sentKey) return true;  // entered after that request left
    sessionStorage.removeItem(KEY_ITEM);
    if (keyDeclined) return false;
    const key = window.prompt('This router requires an API key (kept in this tab only):')?.trim();
    if (!key) {
      keyDeclined = true;  // no prompt every second; reload the page to enter one
      return false;
    }
    sessionStorage.setItem(KEY_ITEM, key);
    return true;
  }

  async function getJson(path) {
    const sent = storedKey();
    let res = await fetch(path, { cache: 'no-store', headers: authHeaders(sent) });
    if (res.status === 401 && keyAfter401(sent)) res = await fetch(path, { cache: 'no-store', headers: authHeaders() });
    if (!res.ok) throw new Error(`${path} answered HTTP ${res.status}`);
    return JSON.parse(await res.text(), exact);
  }

  function setConnection(live, text) {
    $('#conn').dataset.state = live ? 'live' : 'lost';
    $('#conn-text').textContent = text;
  }

  // ---- polling ----------------------------------------------------------------------------------------

  async function loadModel() {
    try {
      const models = await getJson('/v1/models');
      state.model = models.data?.[0]?.id ?? null;
      $('#model').textContent = state.model ?? 'no model';
    } catch {
      // The next poll tries again.
    }
  }

  async function poll() {
    try {
      if (state.model === null) await loadModel();
      const [instances, stats, activity] = await Promise.all([
        getJson('/v1/instances'),
        getJson('/v1/stats'),
        getJson('/v1/activity'),
      ]);
      update(Date.now(), instances, stats, activity);
      setConnection(true, 'live · ' + fmtClock(Date.now()));
    } catch (err) {
      setConnection(false, 'no answer from the router: ' + err.message);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  function update(now, instances, stats, activity) {
    renderTiles(stats);
    renderInstances(instances);
    addRates(now, instances, stats, activity);
    addTtft(now, activity);
    for (const key of Object.keys(state.series)) {
      state.series[key] = state.series[key].filter((p) => p.t >= now - WINDOW_MS);
    }
    drawCharts();
    renderFailures(activity, stats);
    renderActivity(activity);
  }

  // Rates are deltas between two polls. A counter that went down (the router or an instance restarted) gives
  // no point rather than a negative one; an instance's transfer bytes count only while its incarnation holds.
  function addRates(now, instances, stats, activity) {
    const transfer = new Map(instances.map((i) => [i.id, { inc: i.incarnation, bytes: i.transfer_bytes ?? 0 }]));
    const prev = state.prev;
    state.prev = { t: now, completed: stats.completed, tokens: activity.completion_tokens, transfer };
    if (!prev) return;
    const dt = (now - prev.t) / 1000;
    if (dt <= 0) return;
    if (stats.completed >= prev.completed)
      state.series.requests.push({ t: now, v: (stats.completed - prev.completed) / dt });
    if (activity.completion_tokens >= prev.tokens)
      state.series.tokens.push({ t: now, v: (activity.completion_tokens - prev.tokens) / dt });
    let bytes = 0;
    for (const [id, cur] of transfer) {
      const before = prev.transfer.get(id);
      if (before && before.inc === cur.inc && cur.bytes >= before.bytes) bytes += cur.bytes - before.bytes;
    }
    state.series.bandwidth.push({ t: now, v: bytes / dt });
  }

  // One TTFT point per finished request that got a first token, placed at its finishing time. The router's
  // clock may differ from this browser's, so times are taken relative to the newest entry, seen now.
  function addTtft(now, activity) {
    if (activity.recorded < state.lastSeq) state.lastSeq = 0;  // the router restarted
    const fresh = activity.entries.filter((e) => e.seq > state.lastSeq);
    if (!fresh.length) return;
    const newest = fresh[0].finished_unix_ms;
    for (const e of fresh.slice().reverse()) {
      if (e.first_token_ms > 0) {
        state.series.ttft.push({ t: now - (newest - e.finished_unix_ms), v: e.first_token_ms, bad: e.error !== null });
      }
    }
    state.lastSeq = fresh[0].seq;
  }

  // ---- counters ---------------------------------------------------------------------------------------

  function renderTiles(s) {
    const tiles = [
      ['requests', s.requests],
      ['completed', s.completed],
      ['failed', s.failed, s.failed > 0 ? 'bad' : ''],
      ['retries', s.retries, s.retries > 0 ? 'warn' : ''],
      ['cancelled', s.cancelled],
      ['rejected (429)', s.rejected, s.rejected > 0 ? 'warn' : ''],
      ['in flight', s.in_flight],
      ['queued', s.queued, s.queued > 0 ? 'warn' : ''],
    ];
    $('#tiles').replaceChildren(
      ...tiles.map(([label, value, cls]) =>
        el('div', { class: 'tile ' + (cls || ''), data: { stat: label } },
          el('div', { class: 'label' }, label),
          el('div', { class: 'figure' }, fmtNumber(value ?? 0)))));
  }

  // ---- instances --------------------------------------------------------------------------------------

  function bar(used, total, fmt, peak) {
    if (!total) return el('span', { class: 'none' }, '—');
    const ratio = Math.min(1, Math.max(0, used / total));
    const fill = el('div', { class: 'fill' });
    fill.style.width = (ratio * 100).toFixed(1) + '%';  // CSSOM, allowed by the page's style-src 'self'
    const track = el('div', { class: 'track' }, fill);
    if (peak !== undefined && peak > 0) {
      const mark = el('div', { class: 'peak', title: 'peak ' + fmt(peak) });
      mark.style.left = 'calc(' + (Math.min(1, peak / total) * 100).toFixed(1) + '% - 1px)';
      track.append(mark);
    }
    const cls = 'bar' + (ratio >= 0.98 ? ' full' : ratio >= 0.8 ? ' high' : '');
    return el('div', { class: cls, title: `${fmt(used)} of ${fmt(total)} in use` }, track,
      el('span', { class: 'text' }, `${fmt(used)} / ${fmt(total)}`));
  }

  // "restarts / retries / failures" as three numbers (a non-zero one stands out), then the rarer counters
  // and the bytes sent on a second line when there is anything to say.
  function counters(i) {
    const num = (v, title) => el('span', { class: 'n' + (v ? ' nonzero' : ''), title }, fmtNumber(v ?? 0));
    const main = el('div', { class: 'counters' },
      num(i.worker_restarts, 'transfer worker restarts'), ' / ',
      num(i.transfer_retries, 'transfer writes retried on a fresh session'), ' / ',
      num(i.transfer_failures, 'transfer writes that failed after the retry'));
    const extra = [
      ['cancelled', i.cancelled_rooms],
      ['fenced', i.fenced_writes],
      ['recycled', i.sessions_recycled],
      ['quarantined', i.quarantined_pages],
    ].filter(([, v]) => v).map(([k, v]) => `${k} ${fmtNumber(v)}`);
    if (i.transfer_bytes) extra.push('sent ' + fmtBytes(i.transfer_bytes));
    const lookups = (i.prefix_hit_tokens ?? 0) + (i.prefix_missed_tokens ?? 0);
    if (lookups) extra.push(`cache hit ${Math.round((100 * i.prefix_hit_tokens) / lookups)}% of ${fmtNumber(lookups)} tokens`);
    if (i.cached_kv_pages) extra.push(`cached ${fmtNumber(i.cached_kv_pages)} pages`);
    return el('div', {}, main, extra.length ? el('span', { class: 'sub' }, extra.join(' · ')) : null);
  }

  function renderInstances(list) {
    const order = { router: 0, encoder: 1, prefill: 2, decode: 3 };
    list = list.slice().sort((a, b) => (order[a.role] ?? 9) - (order[b.role] ?? 9) || a.id.localeCompare(b.id));
    const rows = list.map((i) => {
      const st = i.staging;
      const staging = st
        ? el('div', {}, bar(st.ring_used, st.ring_bytes, fmtBytes, st.ring_peak),
          el('span', { class: 'sub', title: 'chunks staged; writers that waited for space; WATERMARK messages' },
            `chunks ${fmtNumber(st.chunks)} · waits ${fmtNumber(st.waits)} · marks ${fmtNumber(st.watermarks)}`))
        : el('span', { class: 'none' }, '—');
      return el('tr', { data: { instance: i.id, role: i.role, healthy: String(Boolean(i.healthy)),
        cacheHit: String(i.prefix_hit_tokens ?? 0), cacheLookups: String((i.prefix_hit_tokens ?? 0) + (i.prefix_missed_tokens ?? 0)) } },
        el('td', {}, el('span', { class: 'id' }, i.id), el('span', { class: 'sub' }, i.control_endpoint ?? '')),
        el('td', {}, el('span', { class: 'role role-' + i.role }, i.role)),
        el('td', {}, el('span', { class: 'health', data: { healthy: String(Boolean(i.healthy)) } },
          el('span', { class: 'dot' }), i.healthy ? 'healthy' : 'unhealthy')),
        el('td', { class: 'mono small', title: 'a fresh number on every start and rejoin' }, String(i.incarnation)),
        el('td', { class: 'num' }, fmtMs(i.last_seen_ms) + ' ago'),
        el('td', { class: 'num' }, fmtNumber(i.active_rooms ?? 0)),
        el('td', {}, bar(i.total_kv_pages - i.free_kv_pages, i.total_kv_pages, fmtNumber)),
        el('td', {}, bar(i.total_slots - i.free_slots, i.total_slots, fmtNumber)),
        el('td', {}, staging),
        el('td', {}, counters(i)));
    });
    $('#instances tbody').replaceChildren(...rows);
    const healthy = list.filter((i) => i.healthy).length;
    $('#instances-summary').textContent =
      `${list.length} registered · ${healthy} healthy` + (healthy < list.length ? ` · ${list.length - healthy} unhealthy` : '');
  }

  // ---- charts -----------------------------------------------------------------------------------------

  // The smallest of 1, 2, 5 x 10^k at or above v, so the axis reads in round numbers; for bytes, the
  // smallest of 1, 2, 4, ... 512 x 1024^k, so it reads in round KiB or MiB.
  function niceCeil(v, bytes) {
    if (!(v > 0)) return 1;
    if (bytes) {
      const unit = Math.pow(1024, Math.max(0, Math.floor(Math.log(v) / Math.log(1024))));
      return Math.pow(2, Math.ceil(Math.log2(v / unit))) * unit;
    }
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function drawCharts() {
    for (const [key, c] of Object.entries(charts)) drawChart(c, state.series[key]);
  }

  function drawChart(c, points) {
    const fig = document.getElementById(c.id);
    const plot = fig.querySelector('.plot');
    const W = Math.max(plot.clientWidth, 240);
    const H = Math.max(plot.clientHeight, 120);
    const m = { l: 58, r: 12, t: 8, b: 20 };
    const now = Date.now();
    const t0 = now - WINDOW_MS;
    const peak = points.reduce((a, p) => Math.max(a, p.v), 0);
    const top = niceCeil(peak, c.bytes);
    const x = (t) => m.l + ((t - t0) / WINDOW_MS) * (W - m.l - m.r);
    const y = (v) => m.t + (1 - v / top) * (H - m.t - m.b);
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': fig.querySelector('.title').textContent });

    for (const f of [0, 0.5, 1]) {
      root.append(svg('line', { class: 'grid', x1: m.l, x2: W - m.r, y1: y(top * f), y2: y(top * f) }));
      root.append(svg('text', { class: 'axis', x: m.l - 6, y: y(top * f) + 3, 'text-anchor': 'end' }, c.format(top * f)));
    }
    for (const [t, label, anchor] of [[t0, '−2 min', 'start'], [t0 + WINDOW_MS / 2, '−1 min', 'middle'], [now, 'now', 'end']]) {
      root.append(svg('text', { class: 'axis', x: x(t), y: H - 4, 'text-anchor': anchor }, label));
    }

    if (!points.length) {
      root.append(svg('text', { class: 'waiting', x: (m.l + W - m.r) / 2, y: H / 2, 'text-anchor': 'middle' },
        c.kind === 'dots' ? 'no finished request yet' : 'waiting for a second sample'));
    } else if (c.kind === 'dots') {
      for (const p of points) {
        root.append(svg('circle', { class: 'pt' + (p.bad ? ' bad' : ''), cx: x(p.t), cy: y(p.v), r: 3 },
          undefined));
      }
    } else {
      const xy = points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`);
      const base = y(0).toFixed(1);
      root.append(svg('path', { class: 'area', d: `M${x(points[0].t).toFixed(1)},${base} L${xy.join(' L')} L${x(points.at(-1).t).toFixed(1)},${base} Z` }));
      root.append(svg('polyline', { class: 'line', points: xy.join(' ') }));
      const last = points.at(-1);
      root.append(svg('circle', { class: 'last', cx: x(last.t), cy: y(last.v), r: 3 }));
    }
    plot.replaceChildren(root);

    const last = points.length ? points.at(-1).v : NaN;
    fig.querySelector('.value').textContent = points.length ? c.format(last) + c.unit : '–';
    fig.dataset.points = String(points.length);
    fig.dataset.peak = String(peak);
    fig.dataset.last = points.length ? String(last) : '';
  }

  let resizeTimer = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(drawCharts, 100);
  });

  // ---- failures and activity --------------------------------------------------------------------------

  function renderFailures(activity, stats) {
    const causes = [];
    for (const [code, n] of Object.entries(stats.failure_causes ?? {})) {
      causes.push(el('span', { class: 'cause failure', title: 'requests answered with this error (GET /v1/stats)' },
        'failed · ' + code + ' ', el('b', {}, fmtNumber(n))));
    }
    for (const [code, n] of Object.entries(stats.retry_causes ?? {})) {
      causes.push(el('span', { class: 'cause retry', title: 'rooms the router retried for this cause (GET /v1/stats)' },
        'retried · ' + code + ' ', el('b', {}, fmtNumber(n))));
    }
    $('#causes').replaceChildren(...causes);

    const failed = activity.entries.filter((e) => e.error !== null).slice(0, MAX_FAILURES);
    $('#failures').replaceChildren(...failed.map((e) =>
      el('li', { data: { code: e.error.code, requestId: e.request_id, status: String(e.status) } },
        el('div', { class: 'line1' },
          el('span', { class: 'code' + (e.error.code === 'aborted' ? ' cancel' : '') }, e.error.code),
          el('span', { class: 'meta' }, `HTTP ${e.status} · ${e.route}`),
          el('span', { class: 'when' }, fmtClock(e.finished_unix_ms))),
        el('div', { class: 'message' }, e.error.message),
        el('div', { class: 'meta' }, `request ${e.request_id} · attempts ${e.attempts}` +
          (e.completion_tokens ? ` · ${e.completion_tokens} tokens sent` : '')))));
    $('#failures-empty').hidden = failed.length > 0;
  }

  function renderActivity(activity) {
    const rows = activity.entries.slice(0, MAX_ACTIVITY).map((e) =>
      el('tr', { data: { requestId: e.request_id }, title: 'request ' + e.request_id },
        el('td', { class: 'mono' }, fmtClock(e.finished_unix_ms)),
        el('td', { class: 'mono' }, e.route.replace('/v1/', '') + (e.stream ? ' (stream)' : '')),
        el('td', { class: 'num ' + (e.error ? 'status-bad' : 'status-ok') }, String(e.status)),
        el('td', { class: 'num' }, e.first_token_ms > 0 ? fmtMs(e.first_token_ms) : '–'),
        el('td', { class: 'num' }, e.total_ms > 0 ? fmtMs(e.total_ms) : '–'),
        el('td', { class: 'num' }, fmtNumber(e.completion_tokens)),
        el('td', { class: 'num' }, fmtNumber(e.attempts))));
    $('#activity tbody').replaceChildren(...rows);
    $('#activity-summary').textContent = `${fmtNumber(activity.recorded)} finished since the router started`;
  }

  // ---- playground -------------------------------------------------------------------------------------

  let imageUri = null;  // the chosen file as a data: URI
  let controller = null;

  $('#image').addEventListener('change', () => {
    const file = $('#image').files[0];
    const preview = $('#image-preview');
    imageUri = null;
    preview.hidden = true;
    delete preview.dataset.sample;
    if (!file) return;
    const reader = new FileReader();
    reader.onload = () => {
      imageUri = reader.result;
      preview.src = imageUri;
      preview.hidden = false;
    };
    reader.readAsDataURL(file);
  });

  // A sample picture (served with the page) becomes the chosen image, as a chosen file would.
  for (const button of document.querySelectorAll('button.sample')) {
    button.addEventListener('click', async () => {
      const blob = await (await fetch(button.dataset.src)).blob();
      const reader = new FileReader();
      reader.onload = () => {
        $('#image').value = '';
        imageUri = reader.result;
        const preview = $('#image-preview');
        preview.src = imageUri;
        preview.dataset.sample = button.dataset.src;
        preview.hidden = false;
      };
      reader.readAsDataURL(blob);
    });
  }

  $('#stop').addEventListener('click', () => controller?.abort());

  $('#playground').addEventListener('submit', (event) => {
    event.preventDefault();
    if (!controller) send();
  });

  function setAnswerState(s, extra = {}) {
    const node = $('#answer-state');
    node.dataset.state = s;
    node.textContent = s;
    for (const [k, v] of Object.entries(extra)) node.dataset[k] = String(v);
  }

  function showError(status, error, requestId) {
    const box = $('#answer-error');
    const code = error?.code ?? 'error';
    box.dataset.code = code;
    box.dataset.status = String(status);
    box.dataset.requestId = requestId ?? '';
    const parts = [
      el('span', { class: 'code' }, code),
      status ? el('b', {}, `HTTP ${status} `) : null,
      error?.message ?? 'request failed',
      error?.param ? el('span', { class: 'meta' }, ` (param: ${error.param})`) : null,
      requestId ? el('div', { class: 'meta' }, 'request ' + requestId) : null,
    ];
    box.replaceChildren(...parts.filter((p) => p !== null));
    box.hidden = false;
    setAnswerState('error', { code });
  }

  async function send() {
    const prompt = $('#prompt').value;
    const content = imageUri
      ? [{ type: 'text', text: prompt }, { type: 'image_url', image_url: { url: imageUri } }]
      : prompt;
    const body = {
      messages: [{ role: 'user', content }],
      max_tokens: Number($('#max-tokens').value),
      temperature: Number($('#temperature').value),
      stream: true,
      stream_options: { include_usage: true },
    };
    if (state.model) body.model = state.model;

    const answer = $('#answer');
    answer.replaceChildren();
    $('#answer-meta').textContent = '';
    $('#answer-error').hidden = true;
    delete $('#answer-error').dataset.code;
    for (const k of ['finishReason', 'requestId', 'completionTokens', 'code']) delete $('#answer-state').dataset[k];
    setAnswerState('streaming');
    controller = new AbortController();
    $('#send').disabled = true;
    $('#stop').disabled = false;
    let requestId = null;
    try {
      const res = await fetch('/v1/chat/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...authHeaders() },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      requestId = res.headers.get('X-Request-Id');
      if (!res.ok) {
        const text = await res.text();
        let error;
        try {
          error = JSON.parse(text).error;
        } catch {
          error = { message: text || res.statusText };
        }
        return showError(res.status, error, requestId);
      }
      const result = await readStream(res.body.getReader(), (text) => answer.append(text));
      if (result.error) return showError(200, result.error, requestId);
      if (!result.done) return showError(200, { code: 'truncated', message: 'the stream ended without [DONE]' }, requestId);
      const { usage, epd, finish } = result;
      const parts = [`finish: ${finish ?? '?'}`];
      if (usage) parts.push(`tokens: ${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion`);
      if (epd) parts.push(`TTFT ${fmtMs(epd.first_token_ms)}`, `total ${fmtMs(epd.total_ms)}`, `attempts ${epd.attempts}`);
      parts.push(`request ${epd?.request_id ?? requestId}`);
      $('#answer-meta').textContent = parts.join(' · ');
      setAnswerState('done', {
        finishReason: finish ?? '',
        requestId: epd?.request_id ?? requestId ?? '',
        completionTokens: usage?.completion_tokens ?? '',
      });
    } catch (err) {
      if (err.name === 'AbortError') setAnswerState('stopped');
      else showError(0, { code: 'network', message: String(err.message ?? err) }, requestId);
    } finally {
      controller = null;
      $('#send').disabled = false;
      $('#stop').disabled = true;
    }
  }

  // Server-Sent Events by hand: events end with a blank line; each `data:` line is one JSON chunk, or [DONE].
  async function readStream(reader, onText) {
    const decoder = new TextDecoder();
    const out = { done: false, error: null, finish: null, usage: null, epd: null };
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (data === '[DONE]') {
            out.done = true;
            continue;
          }
          const chunk = JSON.parse(data);
          if (chunk.error) out.error = chunk.error;
          const choice = chunk.choices?.[0];
          if (choice?.delta?.content) onText(choice.delta.content);
          if (choice?.finish_reason) out.finish = choice.finish_reason;
          if (chunk.usage) out.usage = chunk.usage;
          if (chunk.epd) out.epd = chunk.epd;
        }
      }
    }
    return out;
  }

  poll();
})();
