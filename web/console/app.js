// Warren console: a small single-page app over the management API.
// No build step, no dependencies. Every element a test needs has an id.
//
// Each page is a view: an async function of the route's parts that returns
// the nodes of the page. route() runs the view of location.hash and, every
// 5 s, runs it again; render() puts the nodes in place. A render of the
// route already shown keeps what the user typed or chose (inputs, selects,
// and nodes marked data-keep, such as Get results); a render of another
// route starts afresh. A view still loading when the route changes is
// dropped, so a slow answer never paints over the page that replaced it.
'use strict';

const state = {
  auth: sessionStorage.getItem('warren-auth'),
  timer: null,
  gen: 0,
  history: {},
  lists: {},
  range: localStorage.getItem('warren-range') || '600:5',
};
const $ = (id) => document.getElementById(id);

// h builds an element: h('td', {class: 'num'}, 'text', childNode...).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

const enc = encodeURIComponent;
const fmt = (n) => (n === undefined || n === null ? '—' : Number(n).toLocaleString());
const rateNum = (r) => (typeof r === 'number' ? (Math.abs(r) >= 100 ? r.toFixed(0) : r.toFixed(1)) : '0.0');
const rate = (d) => rateNum(d && d.rate) + '/s';

function fmtBytes(n) {
  if (typeof n !== 'number') return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
}

function fmtDuration(ms) {
  if (typeof ms !== 'number') return '—';
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return d + 'd ' + hr + 'h';
  if (hr) return hr + 'h ' + m + 'm';
  return m + 'm ' + s + 's';
}

// HTTPError is a failed API call; status is the HTTP status.
class HTTPError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(method, path, body) {
  // X-Requested-With: a 401 then comes without a challenge, so the browser
  // shows no login dialog of its own.
  const opts = { method, headers: { Authorization: 'Basic ' + state.auth, 'X-Requested-With': 'XMLHttpRequest' } };
  if (body !== undefined) {
    if (body instanceof FormData) opts.body = body;
    else { opts.body = JSON.stringify(body); opts.headers['Content-Type'] = 'application/json'; }
  }
  const res = await fetch('api' + path, opts);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!res.ok) throw new HTTPError(res.status, (data && (data.reason || data.error)) || res.statusText || ('HTTP ' + res.status));
  return data;
}

// optional is api() for a resource this broker may not serve: null on a
// 404 or 405 instead of an error.
async function optional(method, path, body) {
  try { return await api(method, path, body); } catch (e) {
    if (e.status === 404 || e.status === 405) return null;
    throw e;
  }
}

function flash(msg, bad) {
  const f = $('flash');
  f.textContent = msg;
  f.className = 'flash' + (bad ? ' bad' : '');
  f.hidden = false;
  clearTimeout(flash.t);
  flash.t = setTimeout(() => { f.hidden = true; }, 3500);
}

// act runs an action, reports how it went, and shows the page anew.
async function act(fn, ok) {
  try { await fn(); if (ok) flash(ok); refresh(); } catch (e) { flash(e.message, true); }
}

// jsonField parses a JSON text field, naming it when the text is not JSON.
function jsonField(id, what) {
  const text = $(id).value.trim();
  if (!text) return {};
  try { return JSON.parse(text); } catch (e) { throw new Error(what + ' is not valid JSON: ' + e.message); }
}

// ---- login ----

async function login(user, pass) {
  state.auth = btoa(unescape(encodeURIComponent(user + ':' + pass)));
  const me = await api('GET', '/whoami');
  sessionStorage.setItem('warren-auth', state.auth);
  return me;
}

function showLogin(err) {
  clearInterval(state.timer);
  $('app-view').hidden = true;
  $('login-view').hidden = false;
  $('login-error').hidden = !err;
  $('login-error').textContent = err || '';
}

$('login-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  try {
    const me = await login($('login-user').value, $('login-pass').value);
    start(me);
  } catch (e) {
    state.auth = null;
    // The server's reason: "Login failed", "Not management user", "User
    // can only log in via localhost".
    showLogin(e.status === 401 ? 'Login refused: ' + e.message : 'Cannot log in: ' + e.message);
  }
});

$('logout').addEventListener('click', () => {
  sessionStorage.removeItem('warren-auth');
  state.auth = null;
  state.gen++;
  $('page').replaceChildren();
  delete $('page').dataset.route;
  showLogin();
});

function start(me) {
  state.me = me;
  $('login-view').hidden = true;
  $('app-view').hidden = false;
  $('whoami-name').textContent = me.name;
  // Users, vhosts and permissions are for administrators only.
  $('nav-admin').hidden = !(me.tags || []).includes('administrator');
  if (!location.hash) location.hash = '#/overview';
  route();
}

// ---- routing ----

window.addEventListener('hashchange', route);

const views = {
  overview, connections, connection, channels, channel, exchanges, exchange, queues, queue,
  policies: () => policies(false), 'operator-policies': () => policies(true), admin,
};
const navOf = { queue: 'queues', exchange: 'exchanges', connection: 'connections', channel: 'channels' };

function route() {
  clearInterval(state.timer);
  const gen = ++state.gen;
  const hash = location.hash || '#/overview';
  const parts = hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const page = views[parts[0]] ? parts[0] : 'overview';
  for (const a of document.querySelectorAll('.sidebar nav a')) a.classList.toggle('active', a.id === 'nav-' + (navOf[page] || page));
  const run = async () => {
    try {
      const nodes = await views[page](...parts.slice(1));
      if (gen === state.gen) render(hash, nodes);
    } catch (e) {
      if (gen !== state.gen) return;
      // Credentials no longer valid: back to the login page. Any other 401
      // (a page for administrators, say) is the page's error.
      if (e.status === 401 && e.message === 'Login failed') { showLogin('Login refused: ' + e.message); return; }
      render(hash, [h('h1', {}, 'Error'), h('div', { class: 'card' }, h('p', { id: 'page-error', class: 'error' }, e.message))]);
    }
  };
  state.rerun = run;
  run();
  // Refresh, but not under the hands of someone filling in a form.
  state.timer = setInterval(() => {
    const a = document.activeElement;
    if (a && $('page').contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName)) return;
    run();
  }, 5000);
}

// refresh shows the current page anew.
function refresh() { if (state.rerun) state.rerun(); }

// render shows a view's nodes for route. When the page already shows that
// route, the values of its form fields and its data-keep nodes stay.
function render(route, nodes) {
  const p = $('page');
  const same = p.dataset.route === route;
  const values = new Map(), kept = new Map();
  if (same) {
    for (const el of p.querySelectorAll('input[id], select[id], textarea[id]')) {
      if (el.type !== 'file' && !el.closest('[data-keep]')) values.set(el.id, el.type === 'checkbox' ? el.checked : el.value);
    }
    for (const el of p.querySelectorAll('[data-keep][id]')) kept.set(el.id, el);
  }
  const after = [];
  const list = [nodes].flat().filter((n) => {
    if (typeof n === 'function') { after.push(n); return false; }
    return n !== null && n !== undefined && n !== false;
  });
  p.replaceChildren(...list);
  p.dataset.route = route;
  for (const [id, old] of kept) { const el = $(id); if (el && el !== old) el.replaceWith(old); }
  for (const [id, v] of values) {
    const el = $(id);
    if (!el) continue;
    if (el.type === 'checkbox') el.checked = v;
    else if (el.tagName !== 'SELECT' || [...el.options].some((o) => o.value === v)) el.value = v;
  }
  for (const f of after) f();
}

function notFound(id, text) {
  return [h('h1', {}, 'Not found'), h('div', { class: 'card' }, h('p', { id: 'not-found' }, text))];
}

// ---- charts and history ----

// A series is {label, color, dash, points: [{t, v}], now}. The colours are
// far apart and each series also has its own dash pattern.
const palette = [
  { color: '#2563eb', dash: [] }, { color: '#f59e0b', dash: [6, 3] }, { color: '#16a34a', dash: [2, 3] },
  { color: '#dc2626', dash: [8, 3, 2, 3] }, { color: '#7c3aed', dash: [] }, { color: '#0891b2', dash: [4, 4] },
];

// chart draws series on a canvas with a value axis and a time axis.
function chart(canvas, series) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, ht = canvas.clientHeight || 180;
  canvas.width = w * dpr; canvas.height = ht * dpr;
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, ht);
  const pts = series.flatMap((s) => s.points);
  const now = Date.now();
  const t1 = pts.length ? Math.max(...pts.map((p) => p.t)) : now;
  const t0 = series.span ? t1 - series.span : pts.length ? Math.min(t1 - 60000, ...pts.map((p) => p.t)) : now - 60000;
  // What is drawn, for tests and the curious: the span in seconds, where
  // the history came from, and each series' points and last value.
  Object.assign(canvas.dataset, {
    span: String(Math.round((t1 - t0) / 1000)), source: series.span ? 'server' : 'page',
    points: JSON.stringify(Object.fromEntries(series.map((s) => [s.key, s.points.length]))),
    last: JSON.stringify(Object.fromEntries(series.map((s) => [s.key, s.points.length ? s.points[s.points.length - 1].v : null]))),
  });
  // A round scale: three steps of 1, 2 or 5 times a power of ten.
  const top = Math.max(1, ...pts.map((p) => p.v)) * 1.05 / 3;
  const p10 = Math.pow(10, Math.floor(Math.log10(top)));
  const max = 3 * [1, 2, 5, 10].map((m) => m * p10).find((x) => x >= top);
  const left = 40, bottom = 18, plotH = ht - bottom - 6;
  g.strokeStyle = '#e3e7ef'; g.fillStyle = '#6b7385'; g.font = '11px system-ui'; g.lineWidth = 1;
  g.textAlign = 'right';
  for (let i = 0; i <= 3; i++) {
    const y = 6 + plotH * i / 3;
    g.beginPath(); g.moveTo(left, y); g.lineTo(w, y); g.stroke();
    g.fillText(String(Number((max * (1 - i / 3)).toPrecision(3))), left - 4, y + 4);
  }
  const x = (t) => left + (w - left - 4) * (t - t0) / Math.max(1, t1 - t0);
  // Time axis: a label every 100 px or so, with seconds when the span is
  // short.
  const span = t1 - t0;
  const n = Math.max(1, Math.floor((w - left) / 100));
  const two = (v) => String(v).padStart(2, '0');
  g.textAlign = 'center';
  for (let i = 0; i <= n; i++) {
    const t = t0 + span * i / n;
    const d = new Date(t);
    const label = two(d.getHours()) + ':' + two(d.getMinutes()) + (span <= 15 * 60000 ? ':' + two(d.getSeconds()) : '');
    g.fillText(label, Math.min(w - 24, Math.max(left + 24, x(t))), ht - 4);
  }
  g.save();
  g.beginPath(); g.rect(left, 0, w - left, ht); g.clip();
  for (const s of series) {
    if (!s.points.length) continue;
    g.strokeStyle = s.color; g.lineWidth = 2; g.setLineDash(s.dash || []); g.beginPath();
    s.points.forEach((p, i) => {
      const y = 6 + plotH * (1 - p.v / max);
      if (i === 0) g.moveTo(x(p.t), y); else g.lineTo(x(p.t), y);
    });
    g.stroke();
  }
  g.restore();
  g.setLineDash([]);
}

// legend is the table beside a chart: each series' colour, name and
// current value.
function legend(id, series, unit) {
  return h('table', { class: 'legend', id },
    h('tbody', {}, series.map((s) => h('tr', {},
      h('td', {}, h('i', { style: 'border-color:' + s.color + ';border-style:' + (s.dash && s.dash.length ? 'dashed' : 'solid') })),
      h('td', {}, s.label),
      h('td', { class: 'num', id: id + '-' + s.key }, unit === 'rate' ? rateNum(s.now) + '/s' : fmt(s.now))))));
}

// chartCard is a card with a chart and its legend.
function chartCard(title, id, series, unit) {
  const c = h('canvas', { id: 'chart-' + id });
  return [h('div', { class: 'card' }, h('h2', {}, title), h('div', { class: 'chart-row' }, c, legend('legend-' + id, series, unit))),
    () => chart(c, series)];
}

// samplePoints reads a _details object's samples (newest first, as the
// API sends them) as points in time order.
function samplePoints(d) {
  if (!d || !Array.isArray(d.samples)) return null;
  return d.samples.map((s) => ({ t: s.timestamp, v: s.sample })).sort((a, b) => a.t - b.t);
}

// counterRates turns samples of a counter into per-second rates.
function counterRates(points) {
  const out = [];
  for (let i = 1; i < points.length; i++) {
    const dt = (points[i].t - points[i - 1].t) / 1000;
    if (dt > 0) out.push({ t: points[i].t, v: Math.max(0, (points[i].v - points[i - 1].v) / dt) });
  }
  return out;
}

// history builds series from obj for defs [{key, label, details(obj),
// value(obj), counter}]. With samples from the server (rate history kept
// there), those are drawn; without, the values seen by this page are kept
// under histKey and drawn.
function history(histKey, obj, defs) {
  const now = Date.now();
  const fromServer = defs.map((d) => samplePoints(d.details(obj)));
  const server = fromServer.some((p) => p !== null);
  let hist = state.history[histKey];
  if (!server) {
    if (!hist) hist = state.history[histKey] = [];
    hist.push({ t: now, v: defs.map((d) => d.value(obj)) });
    if (hist.length > 120) hist.shift();
  }
  const out = defs.map((d, i) => {
    let points;
    if (server) points = fromServer[i] ? (d.counter ? counterRates(fromServer[i]) : fromServer[i]) : [];
    else points = hist.map((x) => ({ t: x.t, v: x.v[i] || 0 }));
    return { key: d.key, label: d.label, ...palette[i % palette.length], points, now: d.value(obj) };
  });
  // Server history spans the range asked for; the page's own, what it saw.
  out.span = server ? Number(state.range.split(':')[0]) * 1000 : 0;
  return out;
}

const rateDef = (key, label, stat) => ({
  key, label, counter: true,
  details: (o) => (o.message_stats || {})[stat + '_details'],
  value: (o) => { const d = (o.message_stats || {})[stat + '_details']; return d && typeof d.rate === 'number' ? d.rate : 0; },
});
const lengthDef = (key, label, field, container) => ({
  key, label,
  details: (o) => (container ? o[container] || {} : o)[field + '_details'],
  value: (o) => (container ? o[container] || {} : o)[field] || 0,
});
const messageRateDefs = [
  rateDef('publish', 'Publish', 'publish'), rateDef('confirm', 'Publisher confirm', 'confirm'),
  rateDef('deliver', 'Deliver / get', 'deliver_get'), rateDef('ack', 'Consumer ack', 'ack'),
  rateDef('redeliver', 'Redelivered', 'redeliver'),
];

// rangeQuery is the query asking for the rate history of the chosen range.
function rangeQuery() {
  const [age, incr] = state.range.split(':');
  return 'lengths_age=' + age + '&lengths_incr=' + incr + '&msg_rates_age=' + age + '&msg_rates_incr=' + incr +
    '&data_rates_age=' + age + '&data_rates_incr=' + incr;
}

function rangePicker() {
  return h('label', { class: 'inline' }, 'Show ', h('select', {
    id: 'rates-range', onchange: (ev) => { state.range = ev.target.value; localStorage.setItem('warren-range', state.range); refresh(); },
  }, [['600:5', 'last 10 minutes'], ['3600:60', 'last hour'], ['86400:60', 'last day']].map(([v, t]) => h('option', { value: v, selected: v === state.range }, t))));
}

// ---- overview ----

async function overview() {
  const [o, nodes] = await Promise.all([api('GET', '/overview?' + rangeQuery()), optional('GET', '/nodes').catch(() => null)]);
  const qt = o.queue_totals || {}, ot = o.object_totals || {};
  const rates = history('overview-rates', o, messageRateDefs);
  const depth = history('overview-depth', o, [
    lengthDef('ready', 'Ready', 'messages_ready', 'queue_totals'),
    lengthDef('unacked', 'Unacked', 'messages_unacknowledged', 'queue_totals'),
    lengthDef('total', 'Total', 'messages', 'queue_totals'),
  ]);
  const stat = (k, v, id) => h('div', { class: 'stat' }, h('div', { class: 'v', id }, fmt(v)), h('div', { class: 'k' }, k));
  const [rateCard, drawRates] = chartCard('Message rates (per second)', 'rates', rates, 'rate');
  const [depthCard, drawDepth] = chartCard('Queued messages', 'depth', depth, 'count');
  return [
    h('div', { class: 'page-head' }, h('h1', {}, 'Overview ', h('span', { class: 'pill ok' }, o.cluster_name || o.node)), rangePicker()),
    h('div', { class: 'stats', id: 'totals' },
      stat('Connections', ot.connections, 'total-connections'), stat('Channels', ot.channels, 'total-channels'),
      stat('Exchanges', ot.exchanges, 'total-exchanges'), stat('Queues', ot.queues, 'total-queues'),
      stat('Consumers', ot.consumers, 'total-consumers'), stat('Messages', qt.messages, 'total-messages')),
    rateCard, depthCard,
    nodes ? h('div', { class: 'card' }, h('h2', {}, 'Nodes'), h('div', { class: 'nodes', id: 'nodes' }, nodes.map(nodePanel))) : null,
    h('div', { class: 'card' }, h('h2', {}, 'Listeners'),
      table(['Protocol', 'Address', 'Port'], (o.listeners || []).map((l) => [l.protocol, l.ip_address, l.port]), { id: 'listeners' })),
    drawRates, drawDepth,
  ];
}

// gauge is a labelled bar: used of total, red past the limit.
function gauge(id, label, used, total, text, bad) {
  const known = typeof used === 'number' && typeof total === 'number' && total > 0;
  const pct = known ? Math.min(100, 100 * used / total) : 0;
  return h('div', { class: 'gauge' + (bad ? ' bad' : ''), id },
    h('div', { class: 'k' }, label),
    h('div', { class: 'bar' }, h('span', { style: 'width:' + pct.toFixed(1) + '%' })),
    h('div', { class: 'v' }, text));
}

function nodePanel(n) {
  const alarms = [n.mem_alarm ? 'memory' : null, n.disk_free_alarm ? 'disk' : null].filter(Boolean);
  const of = (a, b, f) => (typeof a === 'number' ? f(a) + (typeof b === 'number' ? ' of ' + f(b) : '') : '—');
  return h('div', { class: 'node', dataset: { name: n.name } },
    h('div', { class: 'node-head' }, h('strong', {}, n.name), ' ',
      h('span', { class: 'pill ' + (n.running === false ? 'bad' : 'ok') }, n.running === false ? 'down' : 'running'), ' ',
      h('span', { class: 'pill ' + (alarms.length ? 'bad' : 'ok'), id: 'node-alarms' }, alarms.length ? alarms.join(' and ') + ' alarm' : 'no alarms')),
    h('div', { class: 'gauges' },
      gauge('node-memory', 'Memory', n.mem_used, n.mem_limit, of(n.mem_used, n.mem_limit, fmtBytes), n.mem_alarm),
      // Disk: free space against the limit it must stay above.
      gauge('node-disk', 'Disk free', n.disk_free_limit, n.disk_free, of(n.disk_free, undefined, fmtBytes) + (typeof n.disk_free_limit === 'number' ? ' (limit ' + fmtBytes(n.disk_free_limit) + ')' : ''), n.disk_free_alarm),
      gauge('node-fds', 'File descriptors', n.fd_used, n.fd_total, of(n.fd_used, n.fd_total, fmt)),
      gauge('node-sockets', 'Sockets', n.sockets_used, n.sockets_total, of(n.sockets_used, n.sockets_total, fmt)),
      gauge('node-procs', 'Goroutines', n.proc_used, n.proc_total, of(n.proc_used, n.proc_total, fmt)),
      h('div', { class: 'gauge', id: 'node-uptime' }, h('div', { class: 'k' }, 'Uptime'), h('div', { class: 'v' }, fmtDuration(n.uptime)))));
}

// table builds a table from headers and rows of cells (strings or nodes);
// a row may be {data, cells}.
function table(headers, rows, opts) {
  opts = opts || {};
  const numeric = (i) => opts.num && opts.num.includes(i);
  return h('table', { id: opts.id },
    h('thead', {}, h('tr', {}, headers.map((hd, i) => {
      const sortKey = opts.sortKeys && opts.sortKeys[i];
      return h('th', { class: (sortKey ? 'sortable ' : '') + (numeric(i) ? 'num' : ''), onclick: sortKey ? () => opts.onSort(sortKey) : null }, hd);
    }))),
    h('tbody', {}, rows.length ? rows.map((r) => h('tr', { dataset: r.data || {} }, (r.cells || r).map((c, i) => h('td', { class: numeric(i) ? 'num' : null }, c)))) :
      h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'Nothing here yet.'))));
}

// kv is a definition list of [term, value] pairs; a value may be a node.
function kv(pairs, id) {
  return h('dl', { class: 'kv', id }, pairs.filter(Boolean).map(([k, v, vid]) => [h('dt', {}, k), h('dd', { id: vid }, v === undefined || v === null || v === '' ? '—' : v)]));
}

// ---- paged lists ----

// A paged list (queues, connections, channels, exchanges) asks the API for
// one page at a time, filtered and sorted there, so that a page with ten
// thousand queues loads as fast as one with ten. kind prefixes the ids of
// its toolbar (queue-filter, queue-count, queue-prev, queue-next).
function listState(kind) {
  if (!state.lists[kind]) state.lists[kind] = { page: 1, filter: '', sort: 'name', reverse: false };
  return state.lists[kind];
}

async function fetchPage(kind, path) {
  const ls = listState(kind);
  const get = () => api('GET', path + '?' + new URLSearchParams({ page: ls.page, page_size: 50, name: ls.filter, sort: ls.sort, sort_reverse: ls.reverse, use_regex: 'false' }));
  try { return await get(); } catch (e) {
    // Past the last page (objects went away): back to the first.
    if (ls.page === 1) throw e;
    ls.page = 1;
    return get();
  }
}

function sorter(kind) {
  return (k) => { const ls = listState(kind); ls.reverse = ls.sort === k ? !ls.reverse : false; ls.sort = k; refresh(); };
}

function listToolbar(kind, pg, noun) {
  const ls = listState(kind);
  const input = h('input', { id: kind + '-filter', placeholder: 'Filter by name', value: ls.filter });
  input.addEventListener('input', () => {
    ls.filter = input.value; ls.page = 1;
    clearTimeout(ls.t);
    ls.t = setTimeout(async () => {
      await state.rerun();
      const i = $(kind + '-filter');
      if (i) { i.focus(); i.setSelectionRange(i.value.length, i.value.length); }
    }, 250);
  });
  return h('div', { class: 'toolbar' }, input, h('span', { class: 'spacer' }),
    h('span', { class: 'muted', id: kind + '-count' }, fmt(pg.filtered_count) + ' of ' + fmt(pg.total_count) + ' ' + noun),
    h('button', { id: kind + '-prev', disabled: pg.page <= 1, onclick: () => { ls.page--; refresh(); } }, '‹ Prev'),
    h('span', {}, 'Page ' + pg.page + ' / ' + Math.max(1, pg.page_count)),
    h('button', { id: kind + '-next', disabled: pg.page >= pg.page_count, onclick: () => { ls.page++; refresh(); } }, 'Next ›'));
}

// ---- connections and channels ----

const connLink = (name, text) => h('a', { href: '#/connection/' + enc(name) }, text || name);
const chanLink = (name) => h('a', { href: '#/channel/' + enc(name) }, name);

async function connections() {
  const pg = await fetchPage('connection', '/connections');
  return [h('h1', {}, 'Connections'), h('div', { class: 'card' }, listToolbar('connection', pg, 'connections'), table(
    ['Name', 'User', 'Virtual host', 'Client', 'Channels', 'From client', 'To client', 'State', ''],
    pg.items.map((c) => ({
      data: { name: c.name },
      cells: [connLink(c.name), c.user, c.vhost, c.user_provided_name || (c.client_properties && c.client_properties.product) || '', fmt(c.channels),
        rate(c.recv_oct_details), rate(c.send_oct_details),
        h('span', { class: 'pill ok' }, c.state),
        h('button', { class: 'danger', dataset: { action: 'close', name: c.name }, onclick: () => closeConnection(c.name) }, 'Close')],
    })), { id: 'connections-table', num: [4, 5, 6], sortKeys: ['name', 'user', 'vhost', 'user_provided_name', 'channels', 'recv_oct_details.rate', 'send_oct_details.rate', 'state'], onSort: sorter('connection') }))];
}

function closeConnection(name, after) {
  if (!confirm('Close connection ' + name + '?')) return;
  act(async () => { await api('DELETE', '/connections/' + enc(name)); if (after) after(); }, 'Connection closed');
}

const dataRateDefs = [
  { key: 'recv', label: 'From client', counter: true, details: (o) => o.recv_oct_details, value: (o) => (o.recv_oct_details && o.recv_oct_details.rate) || 0 },
  { key: 'send', label: 'To client', counter: true, details: (o) => o.send_oct_details, value: (o) => (o.send_oct_details && o.send_oct_details.rate) || 0 },
];

async function connection(name) {
  let c;
  try { c = await api('GET', '/connections/' + enc(name) + '?' + rangeQuery()); } catch (e) {
    if (e.status === 404) return notFound('not-found', 'Connection ' + name + ' is not open.');
    throw e;
  }
  const chans = await api('GET', '/connections/' + enc(name) + '/channels');
  const data = history('conn:' + name, c, dataRateDefs);
  const [dataCard, drawData] = chartCard('Data rates (bytes per second)', 'data', data, 'rate');
  const cp = c.client_properties || {};
  return [
    h('div', { class: 'page-head' }, h('h1', {}, 'Connection ', h('span', { class: 'pill', id: 'connection-name' }, c.user_provided_name || c.name)), rangePicker()),
    h('div', { class: 'grid wide' },
      h('div', { class: 'card' }, h('h2', {}, 'Details'), kv([
        ['Name', c.name], ['User', c.user, 'connection-user'], ['Virtual host', c.vhost, 'connection-vhost'],
        ['Protocol', c.protocol], ['State', c.state], ['Peer', (c.peer_host || '') + ':' + (c.peer_port || '')],
        ['Channels', fmt(c.channels), 'connection-channels'], ['Frame max', fmt(c.frame_max)], ['Heartbeat', c.timeout ? c.timeout + ' s' : 'none'],
        ['Connected at', c.connected_at ? new Date(c.connected_at).toLocaleString() : ''],
        ['Received', fmtBytes(c.recv_oct), 'connection-recv'], ['Sent', fmtBytes(c.send_oct), 'connection-sent'],
      ])),
      dataCard),
    h('div', { class: 'card' }, h('h2', {}, 'Client properties'), kv(Object.entries(cp).map(([k, v]) => [k, typeof v === 'object' ? JSON.stringify(v) : String(v)]), 'connection-client')),
    h('div', { class: 'card' }, h('h2', {}, 'Channels'), table(['Channel', 'Consumers', 'Unacked', 'Prefetch', 'Publish', 'Deliver / get', 'Ack'],
      chans.map((x) => ({ data: { name: x.name }, cells: [chanLink(x.name), fmt(x.consumer_count), fmt(x.messages_unacknowledged), fmt(x.prefetch_count),
        rate((x.message_stats || {}).publish_details), rate((x.message_stats || {}).deliver_get_details), rate((x.message_stats || {}).ack_details)] })),
      { id: 'connection-channels-table', num: [1, 2, 3, 4, 5, 6] })),
    h('div', { class: 'card toolbar' }, h('button', { id: 'connection-close', class: 'danger', onclick: () => closeConnection(name, () => { location.hash = '#/connections'; }) }, 'Close this connection')),
    drawData,
  ];
}

async function channels() {
  const pg = await fetchPage('channel', '/channels');
  return [h('h1', {}, 'Channels'), h('div', { class: 'card' }, listToolbar('channel', pg, 'channels'), table(
    ['Channel', 'User', 'Virtual host', 'Mode', 'Consumers', 'Unacked', 'Prefetch', 'Publish', 'Deliver / get', 'Ack'],
    pg.items.map((c) => ({ data: { name: c.name }, cells: [chanLink(c.name), c.user, c.vhost, [c.confirm ? 'C' : '', c.transactional ? 'T' : ''].join(''),
      fmt(c.consumer_count), fmt(c.messages_unacknowledged), fmt(c.prefetch_count),
      rate((c.message_stats || {}).publish_details), rate((c.message_stats || {}).deliver_get_details), rate((c.message_stats || {}).ack_details)] })),
    { id: 'channels-table', num: [4, 5, 6, 7, 8, 9], sortKeys: ['name', 'user', 'vhost', null, 'consumer_count', 'messages_unacknowledged', 'prefetch_count', 'message_stats.publish_details.rate', 'message_stats.deliver_get_details.rate', 'message_stats.ack_details.rate'], onSort: sorter('channel') }))];
}

async function channel(name) {
  // GET /api/channels/{name} where the broker serves it, else the list.
  let c = await optional('GET', '/channels/' + enc(name) + '?' + rangeQuery());
  if (!c) c = (await api('GET', '/channels')).find((x) => x.name === name);
  if (!c) return notFound('not-found', 'Channel ' + name + ' is not open.');
  const rates = history('chan:' + name, c, messageRateDefs);
  const [rateCard, drawRates] = chartCard('Message rates (per second)', 'channel-rates', rates, 'rate');
  const cd = c.connection_details || {};
  const consumers = c.consumer_details || (await api('GET', '/consumers/' + enc(c.vhost))).filter((x) => x.channel_details && x.channel_details.name === name);
  return [
    h('div', { class: 'page-head' }, h('h1', {}, 'Channel ', h('span', { class: 'pill', id: 'channel-name' }, c.name)), rangePicker()),
    h('div', { class: 'grid wide' },
      h('div', { class: 'card' }, h('h2', {}, 'Details'), kv([
        ['Connection', cd.name ? connLink(cd.name) : ''], ['Number', c.number], ['User', c.user], ['Virtual host', c.vhost],
        ['State', c.state], ['Confirm mode', String(!!c.confirm)], ['Transactional', String(!!c.transactional)],
        ['Prefetch', fmt(c.prefetch_count), 'channel-prefetch'], ['Global prefetch', fmt(c.global_prefetch_count)],
        ['Unacked', fmt(c.messages_unacknowledged), 'channel-unacked'], ['Consumers', fmt(c.consumer_count), 'channel-consumers'],
      ])),
      rateCard),
    h('div', { class: 'card' }, h('h2', {}, 'Consumers'), table(['Tag', 'Queue', 'Ack required', 'Prefetch'],
      consumers.map((x) => [x.consumer_tag, x.queue ? h('a', { href: '#/queue/' + enc(x.queue.vhost) + '/' + enc(x.queue.name) }, x.queue.name) : '', String(x.ack_required), fmt(x.prefetch_count)]),
      { id: 'channel-consumers-table' })),
    drawRates,
  ];
}

// ---- exchanges ----

async function vhostSelect(id) {
  const vs = await api('GET', '/vhosts');
  return h('select', { id }, vs.map((v) => h('option', { value: v.name }, v.name)));
}

// argsEditor is a list of key, value and type rows for AMQP arguments or
// headers, with shortcuts for the usual keys. It is kept across refreshes.
function argsEditor(id, shortcuts) {
  const rows = h('div', { class: 'args-rows' });
  const addRow = (key, type) => {
    const k = h('input', { class: 'arg-key', placeholder: 'key', value: key || '' });
    const v = h('input', { class: 'arg-value', placeholder: 'value' });
    const t = h('select', { class: 'arg-type' }, ['string', 'number', 'boolean', 'list'].map((x) => h('option', { value: x, selected: x === type }, x)));
    const row = h('div', { class: 'arg-row' }, k, ' = ', v, t);
    // A new empty row appears when the last one is used.
    k.addEventListener('input', () => { if (row === rows.lastElementChild && k.value) addRow(); });
    rows.append(row);
    return row;
  };
  addRow();
  const shortcutButtons = (shortcuts || []).map(([key, type]) => h('button', { type: 'button', class: 'chip', onclick: () => {
    const last = rows.lastElementChild;
    if (last && !last.querySelector('.arg-key').value) last.remove();
    addRow(key, type).querySelector('.arg-value').focus();
    addRow();
  } }, key));
  return h('div', { class: 'args', id, dataset: { keep: '1' } }, rows, shortcutButtons.length ? h('div', { class: 'chips' }, 'Add ', shortcutButtons) : null);
}

// readArgs reads an argsEditor into an object, typing each value.
function readArgs(id) {
  const out = {};
  for (const row of $(id).querySelectorAll('.arg-row')) {
    const k = row.querySelector('.arg-key').value.trim();
    if (!k) continue;
    const raw = row.querySelector('.arg-value').value, type = row.querySelector('.arg-type').value;
    if (type === 'number') {
      if (raw.trim() === '' || isNaN(Number(raw))) throw new Error('Argument ' + k + ': "' + raw + '" is not a number');
      out[k] = Number(raw);
    } else if (type === 'boolean') out[k] = /^(true|1|yes)$/i.test(raw.trim());
    else if (type === 'list') out[k] = raw.split(',').map((s) => s.trim()).filter(Boolean);
    else out[k] = raw;
  }
  return out;
}

function clearArgs(id) {
  const el = $(id);
  if (!el) return;
  const rows = el.querySelector('.args-rows');
  for (const row of [...rows.children].slice(1)) row.remove();
  for (const input of rows.querySelectorAll('input')) input.value = '';
}

const builtinExchangeTypes = ['direct', 'fanout', 'topic', 'headers'];

async function exchanges() {
  const [pg, vsel, o] = await Promise.all([fetchPage('exchange', '/exchanges'), vhostSelect('exchange-new-vhost'), api('GET', '/overview')]);
  // The types the broker offers, plugin types included; the four built
  // in when the overview does not list them.
  const types = (o.exchange_types || []).map((t) => t.name);
  for (const t of builtinExchangeTypes) if (!types.includes(t)) types.push(t);
  return [h('h1', {}, 'Exchanges'),
    h('div', { class: 'card' }, listToolbar('exchange', pg, 'exchanges'), table(['Virtual host', 'Name', 'Type', 'Features', 'In', 'Out'],
      pg.items.map((x) => ({
        data: { name: x.name },
        cells: [x.vhost, h('a', { href: '#/exchange/' + enc(x.vhost) + '/' + enc(x.name || 'amq.default') }, x.name || '(AMQP default)'), x.type,
          [x.durable ? 'D ' : '', x.auto_delete ? 'AD ' : '', x.internal ? 'I ' : '', Object.keys(x.arguments || {}).length ? 'Args' : ''].join(''),
          rate((x.message_stats || {}).publish_in_details), rate((x.message_stats || {}).publish_out_details)],
      })), { id: 'exchange-table', num: [4, 5], sortKeys: ['vhost', 'name', 'type', null, 'message_stats.publish_in_details.rate', 'message_stats.publish_out_details.rate'], onSort: sorter('exchange') })),
    h('div', { class: 'card' }, h('h2', {}, 'Add an exchange'), h('div', { class: 'form-row' },
      h('label', {}, 'Virtual host', vsel),
      h('label', {}, 'Name', h('input', { id: 'exchange-new-name' })),
      h('label', {}, 'Type', h('select', { id: 'exchange-new-type' }, types.map((t) => h('option', { value: t }, t)))),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', id: 'exchange-new-durable', checked: true }), 'Durable'),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', id: 'exchange-new-autodelete' }), 'Auto delete'),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', id: 'exchange-new-internal' }), 'Internal')),
    h('label', {}, 'Arguments', argsEditor('exchange-new-args', [['alternate-exchange', 'string'], ['x-delayed-type', 'string'],
      ['x-delayed-exchange', 'boolean'], ['x-message-deduplication', 'boolean'], ['x-cache-size', 'number'], ['x-cache-ttl', 'number'],
      ['x-cache-persistence', 'string'], ['hash-header', 'string'], ['hash-property', 'string']])),
    h('div', { class: 'toolbar' }, h('button', { id: 'exchange-create', class: 'primary', onclick: () => act(async () => {
      await api('PUT', '/exchanges/' + enc($('exchange-new-vhost').value) + '/' + enc($('exchange-new-name').value), {
        type: $('exchange-new-type').value, durable: $('exchange-new-durable').checked, auto_delete: $('exchange-new-autodelete').checked,
        internal: $('exchange-new-internal').checked, arguments: readArgs('exchange-new-args'),
      });
      clearArgs('exchange-new-args');
    }, 'Exchange created') }, 'Add exchange')))];
}

async function exchange(vhost, name) {
  const path = '/exchanges/' + enc(vhost) + '/' + enc(name);
  let x;
  try { x = await api('GET', path + '?' + rangeQuery()); } catch (e) {
    if (e.status === 404) return notFound('not-found', 'Exchange ' + name + ' in virtual host ' + vhost + ' does not exist.');
    throw e;
  }
  const src = await api('GET', path + '/bindings/source');
  const rates = history('x:' + vhost + '/' + name, x, [rateDef('in', 'Publish (in)', 'publish_in'), rateDef('out', 'Publish (out)', 'publish_out')]);
  const [rateCard, drawRates] = chartCard('Message rates (per second)', 'exchange-rates', rates, 'rate');
  return [h('h1', {}, 'Exchange ', h('span', { class: 'pill', id: 'exchange-name' }, x.name || '(AMQP default)'), ' ', h('span', { class: 'muted' }, 'in ' + x.vhost)),
    h('div', { class: 'grid' },
      h('div', { class: 'card' }, h('h2', {}, 'Details'), kv([
        ['Virtual host', x.vhost], ['Type', x.type, 'exchange-type'], ['Durable', String(x.durable)], ['Auto delete', String(x.auto_delete)],
        ['Internal', String(x.internal)], ['Arguments', JSON.stringify(x.arguments || {}), 'exchange-arguments'], ['Policy', x.policy],
        ...(x.messages_delayed !== undefined ? [['Delayed messages', fmt(x.messages_delayed), 'exchange-delayed']] : []),
        ...(x.deduplication_cache_size !== undefined ? [['Deduplication cache', fmt(x.deduplication_cache_size) + ' keys', 'exchange-dedup']] : []),
      ])),
      rateCard),
    h('div', { class: 'card' }, h('h2', {}, 'Bindings from this exchange'), table(['To', 'Type', 'Routing key', 'Arguments'],
      src.map((b) => [b.destination, b.destination_type, b.routing_key, JSON.stringify(b.arguments || {})]), { id: 'exchange-bindings' })),
    publishCard('xpublish', path + '/publish', ''),
    name === 'amq.default' || name.startsWith('amq.') ? null : h('div', { class: 'card' },
      h('button', { id: 'exchange-delete', class: 'danger', onclick: () => { if (confirm('Delete exchange ' + name + '?')) act(async () => { await api('DELETE', path); location.hash = '#/exchanges'; }, 'Exchange deleted'); } }, 'Delete this exchange')),
    drawRates];
}

// publishCard is the publish form of an exchange or queue page: routing
// key, delivery mode, the usual properties, headers and the payload.
function publishCard(prefix, path, key) {
  const prop = (label, name, attrs) => h('label', {}, label, h('input', { id: prefix + '-' + name, ...(attrs || {}) }));
  return h('div', { class: 'card' }, h('h2', {}, 'Publish message'),
    h('div', { class: 'form-row' },
      h('label', {}, 'Routing key', h('input', { id: prefix + '-key', value: key })),
      h('label', {}, 'Delivery mode', h('select', { id: prefix + '-mode' }, h('option', { value: '1' }, '1 - Non-persistent'), h('option', { value: '2' }, '2 - Persistent'))),
      prop('Content type', 'content-type', { placeholder: 'text/plain' }),
      prop('Correlation ID', 'correlation-id'), prop('Message ID', 'message-id'), prop('Reply to', 'reply-to'),
      prop('Expiration (ms)', 'expiration'), prop('Priority', 'priority', { type: 'number', min: '0', max: '255' }),
      prop('Type', 'type'), prop('App ID', 'app-id')),
    h('label', {}, 'Headers', argsEditor(prefix + '-headers')),
    h('label', {}, 'Payload', h('textarea', { id: prefix + '-payload' })),
    h('div', { class: 'toolbar' }, h('button', { id: prefix + '-submit', class: 'primary', onclick: async () => {
      try {
        const props = { delivery_mode: Number($(prefix + '-mode').value) };
        for (const [field, name] of [['content_type', 'content-type'], ['correlation_id', 'correlation-id'], ['message_id', 'message-id'],
          ['reply_to', 'reply-to'], ['expiration', 'expiration'], ['type', 'type'], ['app_id', 'app-id']]) {
          const v = $(prefix + '-' + name).value;
          if (v) props[field] = v;
        }
        if ($(prefix + '-priority').value !== '') props.priority = Number($(prefix + '-priority').value);
        const headers = readArgs(prefix + '-headers');
        if (Object.keys(headers).length) props.headers = headers;
        const r = await api('POST', path, { routing_key: $(prefix + '-key').value, payload: $(prefix + '-payload').value, payload_encoding: 'string', properties: props });
        flash(r.routed ? 'Message published.' : 'Message published, but not routed.', !r.routed);
        refresh();
      } catch (e) { flash(e.message, true); }
    } }, 'Publish')));
}

// ---- queues ----

async function queues() {
  const [pg, vsel] = await Promise.all([fetchPage('queue', '/queues'), vhostSelect('queue-new-vhost')]);
  return [h('h1', {}, 'Queues'),
    h('div', { class: 'card' }, listToolbar('queue', pg, 'queues'),
      table(['Virtual host', 'Name', 'Type', 'Ready', 'Unacked', 'Total', 'Consumers', 'Incoming', 'Deliver / get'],
        pg.items.map((x) => ({
          data: { name: x.name },
          cells: [x.vhost, h('a', { href: '#/queue/' + enc(x.vhost) + '/' + enc(x.name) }, x.name),
            [x.type, ' ', h('span', { class: 'features', title: 'D durable, AD auto-delete, Excl exclusive, Pol policy' },
              [x.durable ? 'D' : '', x.auto_delete ? 'AD' : '', x.exclusive ? 'Excl' : '', x.policy ? 'Pol' : ''].filter(Boolean).join(' '))],
            fmt(x.messages_ready), fmt(x.messages_unacknowledged), fmt(x.messages), fmt(x.consumers),
            rate(x.message_stats && x.message_stats.publish_details), rate(x.message_stats && x.message_stats.deliver_get_details)],
        })),
        { id: 'queue-table', num: [3, 4, 5, 6, 7, 8], sortKeys: ['vhost', 'name', 'type', 'messages_ready', 'messages_unacknowledged', 'messages', 'consumers', 'message_stats.publish_details.rate', 'message_stats.deliver_get_details.rate'], onSort: sorter('queue') })),
    h('div', { class: 'card' }, h('h2', {}, 'Add a queue'), h('div', { class: 'form-row' },
      h('label', {}, 'Virtual host', vsel),
      h('label', {}, 'Type', h('select', { id: 'queue-new-type' }, ['classic', 'quorum', 'stream'].map((t) => h('option', { value: t }, t)))),
      h('label', {}, 'Name', h('input', { id: 'queue-new-name' })),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', id: 'queue-new-durable', checked: true }), 'Durable'),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', id: 'queue-new-autodelete' }), 'Auto delete')),
    h('label', {}, 'Arguments', argsEditor('queue-new-args', [['x-message-ttl', 'number'], ['x-expires', 'number'], ['x-max-length', 'number'],
      ['x-max-length-bytes', 'number'], ['x-overflow', 'string'], ['x-dead-letter-exchange', 'string'], ['x-dead-letter-routing-key', 'string'],
      ['x-max-priority', 'number'], ['x-single-active-consumer', 'boolean'], ['x-delivery-limit', 'number'], ['x-max-age', 'string'],
      ['x-message-deduplication', 'boolean'], ['x-cache-size', 'number'], ['x-cache-ttl', 'number'], ['x-cache-persistence', 'string'],
      ['x-message-group-header', 'string']])),
    h('div', { class: 'toolbar' }, h('button', { id: 'queue-create', class: 'primary', onclick: () => act(async () => {
      const args = readArgs('queue-new-args');
      const type = $('queue-new-type').value;
      // The type travels as x-queue-type, as AMQP clients declare it.
      if (type !== 'classic') args['x-queue-type'] = type;
      await api('PUT', '/queues/' + enc($('queue-new-vhost').value) + '/' + enc($('queue-new-name').value),
        { durable: $('queue-new-durable').checked, auto_delete: $('queue-new-autodelete').checked, arguments: args });
      clearArgs('queue-new-args');
    }, 'Queue created') }, 'Add queue')))];
}

async function queue(vhost, name) {
  const path = '/queues/' + enc(vhost) + '/' + enc(name);
  let q;
  try { q = await api('GET', path + '?' + rangeQuery()); } catch (e) {
    if (e.status === 404) return notFound('not-found', 'Queue ' + name + ' in virtual host ' + vhost + ' does not exist.');
    throw e;
  }
  const binds = await api('GET', path + '/bindings');
  const ms = q.message_stats || {};
  const rates = history('q:' + vhost + '/' + name, q, messageRateDefs.filter((d) => d.key !== 'confirm'));
  const depth = history('qd:' + vhost + '/' + name, q, [lengthDef('ready', 'Ready', 'messages_ready'), lengthDef('unacked', 'Unacked', 'messages_unacknowledged'), lengthDef('total', 'Total', 'messages')]);
  const [rateCard, drawRates] = chartCard('Message rates (per second)', 'queue', rates, 'rate');
  const [depthCard, drawDepth] = chartCard('Queued messages', 'queue-depth', depth, 'count');
  const stat = (k, v, id) => h('div', { class: 'stat' }, h('div', { class: 'v', id }, fmt(v)), h('div', { class: 'k' }, k));
  return [h('div', { class: 'page-head' }, h('h1', {}, 'Queue ', h('span', { class: 'pill', id: 'queue-name' }, q.name), ' ', h('span', { class: 'muted' }, 'in ' + q.vhost)), rangePicker()),
    h('div', { class: 'stats' }, stat('Ready', q.messages_ready, 'queue-ready'), stat('Unacked', q.messages_unacknowledged, 'queue-unacked'),
      stat('Total', q.messages, 'queue-messages'), stat('Consumers', q.consumers, 'queue-consumers'), stat('Published', ms.publish || 0, 'queue-published')),
    h('div', { id: 'queue-detail' }, rateCard, depthCard),
    h('div', { class: 'card' }, h('h2', {}, 'Details'), kv([
      ['Type', q.type, 'queue-type'], ['Durable', String(q.durable)], ['Auto delete', String(q.auto_delete)],
      ['Exclusive', String(q.exclusive)], ['State', q.state], ['Arguments', JSON.stringify(q.arguments || {}), 'queue-arguments'],
      ['Policy', q.policy || '—', 'queue-policy'], ['Operator policy', q.operator_policy || '—', 'queue-operator-policy'],
      ['Effective policy', JSON.stringify(q.effective_policy_definition || {}), 'queue-effective-policy'],
      ...(q.deduplication_cache_size !== undefined ? [['Deduplication cache', fmt(q.deduplication_cache_size) + ' keys, ' + fmt(q.deduplication_dropped) + ' duplicates dropped', 'queue-dedup']] : []),
      ...(q.message_groups !== undefined ? [['Message groups', fmt(q.message_groups), 'queue-groups']] : []),
    ])),
    h('div', { class: 'card' }, h('h2', {}, 'Consumers'), table(['Tag', 'Channel', 'Ack required', 'Prefetch'],
      (q.consumer_details || []).map((x) => [x.consumer_tag, chanLink(x.channel_details.name), String(x.ack_required), fmt(x.prefetch_count)]), { id: 'queue-consumers-table' })),
    h('div', { class: 'card' }, h('h2', {}, 'Bindings'), table(['From', 'Routing key', ''],
      binds.map((b) => [b.source || '(AMQP default)', b.routing_key, b.source ? h('button', { class: 'danger', onclick: () => act(() => api('DELETE', '/bindings/' + enc(vhost) + '/e/' + enc(b.source) + '/q/' + enc(name) + '/' + enc(b.properties_key)), 'Unbound') }, 'Unbind') : '']), { id: 'queue-bindings' }),
      h('div', { class: 'form-row' },
        h('label', {}, 'From exchange', h('input', { id: 'bind-exchange' })),
        h('label', {}, 'Routing key', h('input', { id: 'bind-key' })),
        h('button', { id: 'bind-submit', onclick: () => act(() => api('POST', '/bindings/' + enc(vhost) + '/e/' + enc($('bind-exchange').value) + '/q/' + enc(name), { routing_key: $('bind-key').value, arguments: {} }), 'Bound') }, 'Bind'))),
    h('div', { class: 'grid' },
      publishCard('qpublish', '/exchanges/' + enc(vhost) + '/amq.default/publish', name),
      h('div', { class: 'card' }, h('h2', {}, 'Get messages'),
        h('div', { class: 'form-row' },
          h('label', {}, 'Ack mode', h('select', { id: 'get-ackmode' },
            h('option', { value: 'ack_requeue_true' }, 'Nack, requeue'), h('option', { value: 'ack_requeue_false' }, 'Ack, remove'),
            h('option', { value: 'reject_requeue_true' }, 'Reject, requeue'), h('option', { value: 'reject_requeue_false' }, 'Reject, remove'))),
          h('label', {}, 'Messages', h('input', { id: 'get-count', type: 'number', value: '1', min: '1' })),
          h('button', { id: 'get-submit', class: 'primary', onclick: () => getMessages(path) }, 'Get messages')),
        h('div', { id: 'get-result', dataset: { keep: '1' } }))),
    h('div', { class: 'card toolbar' },
      h('button', { id: 'purge-btn', class: 'danger', onclick: () => { if (confirm('Purge ' + name + '?')) act(() => api('DELETE', path + '/contents'), 'Queue purged'); } }, 'Purge messages'),
      h('button', { id: 'delete-btn', class: 'danger', onclick: () => { if (confirm('Delete ' + name + '?')) act(async () => { await api('DELETE', path); location.hash = '#/queues'; }, 'Queue deleted'); } }, 'Delete queue')),
    drawRates, drawDepth];
}

const propertyNames = ['delivery_mode', 'content_type', 'content_encoding', 'priority', 'correlation_id', 'reply_to', 'expiration',
  'message_id', 'timestamp', 'type', 'user_id', 'app_id', 'cluster_id'];

// messageView shows a got message: where it came from, its properties,
// its headers and its payload.
function messageView(m, i) {
  const p = m.properties || {};
  const headers = p.headers || {};
  return h('div', { class: 'message', dataset: { index: i } },
    h('p', { class: 'muted' }, 'Message ' + (i + 1) + ' · exchange "' + m.exchange + '" · key "' + m.routing_key + '"' + (m.redelivered ? ' · redelivered' : '') +
      ' · ' + fmt(m.payload_bytes) + ' bytes · ' + m.payload_encoding),
    kv(propertyNames.filter((k) => p[k] !== undefined).map((k) => [k, String(p[k]), 'msg-' + i + '-' + k]), 'msg-' + i + '-properties'),
    Object.keys(headers).length ? h('div', {}, h('h3', {}, 'Headers'),
      table(['Header', 'Value'], Object.entries(headers).map(([k, v]) => ({ data: { header: k }, cells: [k, typeof v === 'object' ? JSON.stringify(v) : String(v)] })), { id: 'msg-' + i + '-headers' })) : null,
    h('pre', { class: 'msg' }, m.payload));
}

async function getMessages(path) {
  try {
    const msgs = await api('POST', path + '/get', { count: Number($('get-count').value) || 1, ackmode: $('get-ackmode').value, encoding: 'auto', truncate: 50000 });
    const out = $('get-result');
    if (!out) return;
    out.replaceChildren(msgs.length ? '' : h('p', { class: 'muted' }, 'Queue is empty.'), ...msgs.map(messageView));
    refresh();
  } catch (e) { flash(e.message, true); }
}

// ---- policies and operator policies ----

async function policies(operator) {
  const base = operator ? '/operator-policies' : '/policies';
  const prefix = operator ? 'oppolicy' : 'policy';
  const [list, vsel] = await Promise.all([api('GET', base), vhostSelect(prefix + '-new-vhost')]);
  const title = operator ? 'Operator policies' : 'Policies';
  const applyTo = operator ? ['queues'] : ['all', 'queues', 'exchanges'];
  const keys = operator
    ? [['max-length', 'number'], ['max-length-bytes', 'number'], ['message-ttl', 'number'], ['expires', 'number'], ['delivery-limit', 'number']]
    : [['max-length', 'number'], ['max-length-bytes', 'number'], ['overflow', 'string'], ['message-ttl', 'number'], ['expires', 'number'],
      ['dead-letter-exchange', 'string'], ['dead-letter-routing-key', 'string'], ['max-priority', 'number'], ['alternate-exchange', 'string'],
      ['queue-mode', 'string'], ['delivery-limit', 'number'], ['max-age', 'string'], ['stream-max-segment-size-bytes', 'number']];
  return [h('h1', {}, title),
    h('p', { class: 'muted' }, operator
      ? 'Operator policies cap what user policies and queue arguments may set; the lower value wins.'
      : 'A policy applies its definition to the queues and exchanges whose name matches its pattern; of those that match, the highest priority wins.'),
    h('div', { class: 'card' }, table(['Virtual host', 'Name', 'Pattern', 'Apply to', 'Definition', 'Priority', ''],
      list.map((p) => ({ data: { name: p.name }, cells: [p.vhost, p.name, p.pattern, p['apply-to'], h('code', {}, JSON.stringify(p.definition)), fmt(p.priority),
        h('button', { class: 'danger', dataset: { action: 'delete', name: p.name }, onclick: () => { if (confirm('Delete policy ' + p.name + '?')) act(() => api('DELETE', base + '/' + enc(p.vhost) + '/' + enc(p.name)), 'Policy deleted'); } }, 'Delete')] })),
      { id: prefix + '-table', num: [5] })),
    h('div', { class: 'card' }, h('h2', {}, 'Add or update a ' + (operator ? 'operator policy' : 'policy')), h('div', { class: 'form-row' },
      h('label', {}, 'Virtual host', vsel),
      h('label', {}, 'Name', h('input', { id: prefix + '-new-name' })),
      h('label', {}, 'Pattern', h('input', { id: prefix + '-new-pattern', placeholder: '^amq\\.' })),
      h('label', {}, 'Apply to', h('select', { id: prefix + '-new-applyto' }, applyTo.map((a) => h('option', { value: a }, a)))),
      h('label', {}, 'Priority', h('input', { id: prefix + '-new-priority', type: 'number', value: '0' }))),
    h('label', {}, 'Definition', argsEditor(prefix + '-new-definition', keys)),
    h('div', { class: 'toolbar' }, h('button', { id: prefix + '-create', class: 'primary', onclick: () => act(async () => {
      const definition = readArgs(prefix + '-new-definition');
      if (!Object.keys(definition).length) throw new Error('A policy needs at least one key in its definition');
      await api('PUT', base + '/' + enc($(prefix + '-new-vhost').value) + '/' + enc($(prefix + '-new-name').value), {
        pattern: $(prefix + '-new-pattern').value, 'apply-to': $(prefix + '-new-applyto').value,
        priority: Number($(prefix + '-new-priority').value) || 0, definition,
      });
      clearArgs(prefix + '-new-definition');
    }, 'Policy saved') }, 'Save policy')))];
}

// ---- admin: users, vhosts, permissions, limits, definitions ----

async function admin() {
  const [users, vhosts, perms, topicPerms, userLimits, vhostLimits] = await Promise.all([api('GET', '/users'), api('GET', '/vhosts'), api('GET', '/permissions'),
    optional('GET', '/topic-permissions'), optional('GET', '/user-limits'), optional('GET', '/vhost-limits')]);
  const limitsOf = {};
  for (const l of userLimits || []) limitsOf[l.user] = l.value || {};
  const vhostLimitsOf = {};
  for (const l of vhostLimits || []) vhostLimitsOf[l.vhost] = l.value || {};
  const vhostLimitText = (v) => Object.entries(vhostLimitsOf[v] || {}).map(([k, n]) => k + ': ' + n).join(', ') || (vhostLimits ? 'none' : '—');
  const opts = (list, id) => h('select', { id }, list.map((x) => h('option', { value: x.name }, x.name)));
  const tagPills = (tags) => (tags || []).map((t) => h('span', { class: 'pill' + (t === 'administrator' ? ' admin' : '') }, t));
  // limitForm sets a limit of a user or a virtual host (kind) through
  // /api/<kind>-limits; a value of -1 clears it.
  const limitForm = (kind, label, list, names) => h('div', { class: 'form-row' },
    h('label', {}, label, opts(list, kind + '-limit-' + kind)),
    h('label', {}, 'Limit', h('select', { id: kind + '-limit-name' }, names.map((n) => h('option', { value: n }, n)))),
    h('label', {}, 'Value', h('input', { id: kind + '-limit-value', type: 'number', placeholder: '-1 for none' })),
    h('button', { id: kind + '-limit-set', onclick: () => act(() => {
      const n = Number($(kind + '-limit-value').value);
      const p = '/' + kind + '-limits/' + enc($(kind + '-limit-' + kind).value) + '/' + enc($(kind + '-limit-name').value);
      return n < 0 ? api('DELETE', p) : api('PUT', p, { value: n });
    }, 'Limit set') }, 'Set limit'));
  const limitText = (u) => Object.entries(limitsOf[u] || {}).map(([k, v]) => k + ': ' + v).join(', ') || (userLimits ? 'none' : '—');
  return [h('h1', {}, 'Admin'),
    h('div', { class: 'card' }, h('h2', {}, 'Users'),
      table(['Name', 'Tags', 'Limits', 'Can access', ''], users.map((u) => ({ data: { name: u.name }, cells: [u.name, h('span', { class: 'tags' }, tagPills(u.tags)), limitText(u.name),
        perms.filter((p) => p.user === u.name).map((p) => p.vhost).join(', ') || h('span', { class: 'muted' }, 'no access'),
        h('button', { class: 'danger', dataset: { action: 'delete-user', name: u.name }, onclick: () => { if (confirm('Delete user ' + u.name + '?')) act(() => api('DELETE', '/users/' + enc(u.name)), 'User deleted'); } }, 'Delete')] })), { id: 'users-table' }),
      h('h3', {}, 'Add a user'),
      h('div', { class: 'form-row' },
        h('label', {}, 'Name', h('input', { id: 'user-new-name' })),
        h('label', {}, 'Password', h('input', { id: 'user-new-pass', type: 'password' })),
        h('label', {}, 'Tags', h('input', { id: 'user-new-tags', placeholder: 'management, administrator' })),
        h('div', { class: 'chips' }, ['administrator', 'monitoring', 'policymaker', 'management', 'impersonator'].map((t) =>
          h('button', { type: 'button', class: 'chip', onclick: () => { const i = $('user-new-tags'); i.value = i.value ? i.value.replace(/\s*$/, '') + ', ' + t : t; } }, t))),
        h('button', { id: 'user-create', class: 'primary', onclick: () => act(() => api('PUT', '/users/' + enc($('user-new-name').value), { password: $('user-new-pass').value, tags: $('user-new-tags').value }), 'User saved') }, 'Add user')),
      h('h3', {}, 'Set a user\'s tags'),
      h('div', { class: 'form-row' },
        h('label', {}, 'User', opts(users, 'user-tags-user')),
        h('label', {}, 'Tags', h('input', { id: 'user-tags-tags', placeholder: 'monitoring' })),
        h('button', { id: 'user-tags-set', onclick: () => act(async () => {
          // The password stays: the user is written back with its hash.
          const u = await api('GET', '/users/' + enc($('user-tags-user').value));
          await api('PUT', '/users/' + enc(u.name), { password_hash: u.password_hash, hashing_algorithm: u.hashing_algorithm, tags: $('user-tags-tags').value });
        }, 'Tags set') }, 'Set tags')),
      userLimits ? [h('h3', {}, 'Set a user limit'),
        limitForm('user', 'User', users, ['max-connections', 'max-channels'])] : h('p', { class: 'muted', id: 'user-limits-absent' }, 'This broker does not serve user limits.')),
    h('div', { class: 'grid' },
      h('div', { class: 'card' }, h('h2', {}, 'Virtual hosts'),
        table(['Name', 'Messages', 'Limits', ''], vhosts.map((v) => ({ data: { name: v.name }, cells: [v.name, fmt(v.messages), vhostLimitText(v.name),
          h('button', { class: 'danger', dataset: { action: 'delete-vhost', name: v.name }, onclick: () => { if (confirm('Delete vhost ' + v.name + ' and everything in it?')) act(() => api('DELETE', '/vhosts/' + enc(v.name)), 'Virtual host deleted'); } }, 'Delete')] })), { id: 'vhosts-table' }),
        h('div', { class: 'form-row' },
          h('label', {}, 'Name', h('input', { id: 'vhost-new-name' })),
          h('button', { id: 'vhost-create', class: 'primary', onclick: () => act(() => api('PUT', '/vhosts/' + enc($('vhost-new-name').value)), 'Virtual host added') }, 'Add virtual host')),
        vhostLimits ? [h('h3', {}, 'Set a virtual host limit'),
          limitForm('vhost', 'Virtual host', vhosts, ['max-connections', 'max-queues'])] : null),
      h('div', { class: 'card' }, h('h2', {}, 'Definitions'),
        h('div', { class: 'form-row' },
          h('button', { id: 'defs-download', onclick: downloadDefinitions }, 'Download definitions'),
          h('label', {}, 'Import a definitions file', h('input', { id: 'defs-file', type: 'file', accept: 'application/json,.json', dataset: { keep: '1' } })),
          h('button', { id: 'defs-upload', class: 'primary', onclick: uploadDefinitions }, 'Upload')))),
    h('div', { class: 'card' }, h('h2', {}, 'Permissions'),
      table(['User', 'Virtual host', 'Configure', 'Write', 'Read', ''], perms.map((p) => [p.user, p.vhost, p.configure, p.write, p.read,
        h('button', { class: 'danger', onclick: () => act(() => api('DELETE', '/permissions/' + enc(p.vhost) + '/' + enc(p.user)), 'Permissions cleared') }, 'Clear')]), { id: 'permissions-table' }),
      h('div', { class: 'form-row' },
        h('label', {}, 'User', opts(users, 'perm-user')), h('label', {}, 'Virtual host', opts(vhosts, 'perm-vhost')),
        h('label', {}, 'Configure', h('input', { id: 'perm-configure', value: '.*' })),
        h('label', {}, 'Write', h('input', { id: 'perm-write', value: '.*' })),
        h('label', {}, 'Read', h('input', { id: 'perm-read', value: '.*' })),
        h('button', { id: 'perm-set', class: 'primary', onclick: () => act(() => api('PUT', '/permissions/' + enc($('perm-vhost').value) + '/' + enc($('perm-user').value),
          { configure: $('perm-configure').value, write: $('perm-write').value, read: $('perm-read').value }), 'Permissions set') }, 'Set permissions'))),
    h('div', { class: 'card' }, h('h2', {}, 'Topic permissions'),
      topicPerms ? [
        table(['User', 'Virtual host', 'Exchange', 'Write', 'Read', ''], topicPerms.map((p) => ({ data: { user: p.user, exchange: p.exchange }, cells: [p.user, p.vhost, p.exchange, p.write, p.read,
          h('button', { class: 'danger', onclick: () => act(() => api('DELETE', '/topic-permissions/' + enc(p.vhost) + '/' + enc(p.user)), 'Topic permissions cleared') }, 'Clear')] })), { id: 'topic-permissions-table' }),
        h('div', { class: 'form-row' },
          h('label', {}, 'User', opts(users, 'tperm-user')), h('label', {}, 'Virtual host', opts(vhosts, 'tperm-vhost')),
          h('label', {}, 'Exchange', h('input', { id: 'tperm-exchange', value: 'amq.topic' })),
          h('label', {}, 'Write', h('input', { id: 'tperm-write', value: '.*' })),
          h('label', {}, 'Read', h('input', { id: 'tperm-read', value: '.*' })),
          h('button', { id: 'tperm-set', class: 'primary', onclick: () => act(() => api('PUT', '/topic-permissions/' + enc($('tperm-vhost').value) + '/' + enc($('tperm-user').value),
            { exchange: $('tperm-exchange').value, write: $('tperm-write').value, read: $('tperm-read').value }), 'Topic permissions set') }, 'Set topic permissions'))]
        : h('p', { class: 'muted', id: 'topic-permissions-absent' }, 'This broker does not serve topic permissions.'))];
}

async function downloadDefinitions() {
  try {
    const d = await api('GET', '/definitions');
    const a = h('a', { href: URL.createObjectURL(new Blob([JSON.stringify(d, null, 2)], { type: 'application/json' })), download: 'warren-definitions.json' });
    document.body.append(a); a.click(); a.remove();
  } catch (e) { flash(e.message, true); }
}

function uploadDefinitions() {
  const f = $('defs-file').files[0];
  if (!f) { flash('Choose a file first.', true); return; }
  const form = new FormData();
  form.append('file', f);
  act(() => api('POST', '/definitions', form), 'Definitions imported');
}

// ---- start ----

(async () => {
  if (!state.auth) { showLogin(); return; }
  try { start(await api('GET', '/whoami')); } catch (e) { showLogin(); }
})();
