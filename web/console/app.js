// Warren console: a small single-page app over the management API.
// No build step, no dependencies. Every element a test needs has an id.
'use strict';

const state = { auth: sessionStorage.getItem('warren-auth'), timer: null, history: [], queuePage: 1, queueSort: 'name', queueReverse: false };
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
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

const enc = encodeURIComponent;
const fmt = (n) => (n === undefined || n === null ? '' : Number(n).toLocaleString());
const rate = (d) => (d && typeof d.rate === 'number' ? d.rate.toFixed(1) + '/s' : '0.0/s');

async function api(method, path, body) {
  // X-Requested-With: a 401 then comes without a challenge, so the browser
  // shows no login dialog of its own.
  const opts = { method, headers: { Authorization: 'Basic ' + state.auth, 'X-Requested-With': 'XMLHttpRequest' } };
  if (body !== undefined) {
    if (body instanceof FormData) opts.body = body;
    else { opts.body = JSON.stringify(body); opts.headers['Content-Type'] = 'application/json'; }
  }
  const res = await fetch('api' + path, opts);
  if (res.status === 401 && path === '/whoami') throw new Error('Login failed');
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error((data && (data.reason || data.error)) || res.statusText);
  return data;
}

function flash(msg, bad) {
  const f = $('flash');
  f.textContent = msg;
  f.className = 'flash' + (bad ? ' bad' : '');
  f.hidden = false;
  clearTimeout(flash.t);
  flash.t = setTimeout(() => { f.hidden = true; }, 3500);
}

// act runs an action and reports its failure.
async function act(fn, ok) {
  try { await fn(); if (ok) flash(ok); route(); } catch (e) { flash(e.message, true); }
}

// ---- login ----

async function login(user, pass) {
  state.auth = btoa(unescape(encodeURIComponent(user + ':' + pass)));
  const me = await api('GET', '/whoami');
  sessionStorage.setItem('warren-auth', state.auth);
  return me;
}

function showLogin(err) {
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
    showLogin(e.message);
  }
});

$('logout').addEventListener('click', () => {
  sessionStorage.removeItem('warren-auth');
  state.auth = null;
  clearInterval(state.timer);
  showLogin();
});

function start(me) {
  $('login-view').hidden = true;
  $('app-view').hidden = false;
  $('whoami-name').textContent = me.name;
  if (!location.hash) location.hash = '#/overview';
  route();
}

// ---- routing ----

window.addEventListener('hashchange', route);

function route() {
  clearInterval(state.timer);
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const page = parts[0] || 'overview';
  for (const a of document.querySelectorAll('.sidebar nav a')) {
    a.classList.toggle('active', a.id === 'nav-' + (page === 'queue' ? 'queues' : page === 'exchange' ? 'exchanges' : page));
  }
  const views = { overview, connections, channels, exchanges, exchange, queues, queue, admin };
  const view = views[page] || overview;
  const run = () => view(...parts.slice(1)).catch((e) => flash(e.message, true));
  run();
  if (page === 'overview' || page === 'queue' || page === 'connections' || page === 'channels') {
    // Refresh, but not under the hands of someone filling in a form.
    state.timer = setInterval(() => {
      const a = document.activeElement;
      if (a && $('page').contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName)) return;
      run();
    }, 5000);
  }
}

function render(...nodes) {
  const p = $('page');
  p.replaceChildren(...nodes);
}

// ---- charts ----

// chart draws series [{label, color, values}] on a canvas.
function chart(canvas, series) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, ht = canvas.clientHeight || 180;
  canvas.width = w * dpr; canvas.height = ht * dpr;
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, ht);
  const n = Math.max(2, ...series.map((s) => s.values.length));
  // A round scale: three steps of 1, 2 or 5 times a power of ten.
  const top = Math.max(1, ...series.flatMap((s) => s.values)) * 1.05 / 3;
  const p10 = Math.pow(10, Math.floor(Math.log10(top)));
  const max = 3 * [1, 2, 5, 10].map((m) => m * p10).find((x) => x >= top);
  const pad = 28;
  g.strokeStyle = '#e3e7ef'; g.fillStyle = '#6b7385'; g.font = '11px system-ui'; g.lineWidth = 1;
  for (let i = 0; i <= 3; i++) {
    const y = 6 + (ht - 16) * i / 3;
    g.beginPath(); g.moveTo(pad, y); g.lineTo(w, y); g.stroke();
    g.fillText(String(Number((max * (1 - i / 3)).toPrecision(3))), 0, y + 4);
  }
  for (const s of series) {
    g.strokeStyle = s.color; g.lineWidth = 2; g.beginPath();
    s.values.forEach((v, i) => {
      const x = pad + (w - pad) * (i + n - s.values.length) / (n - 1);
      const y = 6 + (ht - 16) * (1 - v / max);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
  }
}

function legend(series) {
  return h('div', { class: 'legend' }, series.map((s) => h('span', {}, h('i', { style: 'background:' + s.color }), s.label)));
}

// ---- overview ----

async function overview() {
  const o = await api('GET', '/overview');
  const ms = o.message_stats || {}, qt = o.queue_totals || {}, ot = o.object_totals || {};
  state.history.push({
    publish: ms.publish_details ? ms.publish_details.rate : 0,
    deliver: ms.deliver_get_details ? ms.deliver_get_details.rate : 0,
    ack: ms.ack_details ? ms.ack_details.rate : 0,
    ready: qt.messages_ready || 0,
    unacked: qt.messages_unacknowledged || 0,
  });
  if (state.history.length > 120) state.history.shift();
  const hist = state.history;
  const rates = [
    { label: 'Publish', color: '#4f46e5', values: hist.map((x) => x.publish) },
    { label: 'Deliver / get', color: '#06b6d4', values: hist.map((x) => x.deliver) },
    { label: 'Ack', color: '#16a34a', values: hist.map((x) => x.ack) },
  ];
  const depth = [
    { label: 'Ready', color: '#f59e0b', values: hist.map((x) => x.ready) },
    { label: 'Unacked', color: '#ef4444', values: hist.map((x) => x.unacked) },
  ];
  const stat = (k, v, id) => h('div', { class: 'stat' }, h('div', { class: 'v', id }, fmt(v)), h('div', { class: 'k' }, k));
  const c1 = h('canvas', { id: 'chart-rates' }), c2 = h('canvas', { id: 'chart-depth' });
  render(
    h('h1', {}, 'Overview ', h('span', { class: 'pill ok' }, o.node)),
    h('div', { class: 'stats', id: 'totals' },
      stat('Connections', ot.connections, 'total-connections'), stat('Channels', ot.channels, 'total-channels'),
      stat('Exchanges', ot.exchanges, 'total-exchanges'), stat('Queues', ot.queues, 'total-queues'),
      stat('Consumers', ot.consumers, 'total-consumers'), stat('Messages', qt.messages, 'total-messages')),
    h('div', { class: 'grid' },
      h('div', { class: 'card' }, h('h2', {}, 'Message rates (per second)'), c1, legend(rates)),
      h('div', { class: 'card' }, h('h2', {}, 'Queued messages'), c2, legend(depth))),
    h('div', { class: 'card' }, h('h2', {}, 'Listeners'),
      table(['Protocol', 'Address', 'Port'], (o.listeners || []).map((l) => [l.protocol, l.ip_address, l.port]))),
  );
  chart(c1, rates);
  chart(c2, depth);
}

// table builds a table from headers and rows of cells (strings or nodes).
function table(headers, rows, opts) {
  opts = opts || {};
  return h('table', { id: opts.id },
    h('thead', {}, h('tr', {}, headers.map((hd, i) => {
      const sortKey = opts.sortKeys && opts.sortKeys[i];
      return h('th', { class: (sortKey ? 'sortable ' : '') + (opts.num && opts.num.includes(i) ? 'num' : ''), onclick: sortKey ? () => opts.onSort(sortKey) : null }, hd);
    }))),
    h('tbody', {}, rows.length ? rows.map((r) => h('tr', { dataset: r.data || {} }, r.cells ? r.cells.map((c, i) => h('td', { class: opts.num && opts.num.includes(i) ? 'num' : null }, c)) : r.map((c, i) => h('td', { class: opts.num && opts.num.includes(i) ? 'num' : null }, c)))) :
      h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'Nothing here yet.'))));
}

// ---- connections and channels ----

async function connections() {
  const list = await api('GET', '/connections');
  render(h('h1', {}, 'Connections'), h('div', { class: 'card' }, table(
    ['Name', 'User', 'Virtual host', 'Client', 'Channels', 'State', ''],
    list.map((c) => ({
      data: { name: c.name },
      cells: [c.name, c.user, c.vhost, c.user_provided_name || (c.client_properties && c.client_properties.product) || '', fmt(c.channels),
        h('span', { class: 'pill ok' }, c.state),
        h('button', { class: 'danger', dataset: { action: 'close', name: c.name }, onclick: () => closeConnection(c.name) }, 'Close')],
    })), { id: 'connections-table', num: [4] })));
}

function closeConnection(name) {
  if (!confirm('Close connection ' + name + '?')) return;
  act(() => api('DELETE', '/connections/' + enc(name)), 'Connection closed');
}

async function channels() {
  const list = await api('GET', '/channels');
  render(h('h1', {}, 'Channels'), h('div', { class: 'card' }, table(
    ['Channel', 'User', 'Virtual host', 'Consumers', 'Unacked', 'Prefetch (global)'],
    list.map((c) => [c.name, c.user, c.vhost, fmt(c.consumer_count), fmt(c.messages_unacknowledged), fmt(c.global_prefetch_count)]),
    { id: 'channels-table', num: [3, 4, 5] })));
}

// ---- exchanges ----

async function vhostOptions(id) {
  const vs = await api('GET', '/vhosts');
  return h('select', { id }, vs.map((v) => h('option', { value: v.name }, v.name)));
}

async function exchanges() {
  const list = await api('GET', '/exchanges');
  const vsel = await vhostOptions('exchange-new-vhost');
  render(h('h1', {}, 'Exchanges'),
    h('div', { class: 'card' }, table(['Virtual host', 'Name', 'Type', 'Features'],
      list.map((x) => ({
        data: { name: x.name },
        cells: [x.vhost, h('a', { href: '#/exchange/' + enc(x.vhost) + '/' + enc(x.name || 'amq.default') }, x.name || '(AMQP default)'), x.type,
          [x.durable ? 'D ' : '', x.auto_delete ? 'AD ' : '', x.internal ? 'I' : ''].join('')],
      })), { id: 'exchange-table' })),
    h('div', { class: 'card' }, h('h2', {}, 'Add an exchange'), h('div', { class: 'form-row' },
      h('label', {}, 'Virtual host', vsel),
      h('label', {}, 'Name', h('input', { id: 'exchange-new-name' })),
      h('label', {}, 'Type', h('select', { id: 'exchange-new-type' }, ['direct', 'fanout', 'topic', 'headers'].map((t) => h('option', {}, t)))),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', id: 'exchange-new-durable', checked: true }), 'Durable'),
      h('button', { id: 'exchange-create', class: 'primary', onclick: () => act(() => api('PUT', '/exchanges/' + enc(vsel.value) + '/' + enc($('exchange-new-name').value),
        { type: $('exchange-new-type').value, durable: $('exchange-new-durable').checked }), 'Exchange created') }, 'Add exchange'))));
}

async function exchange(vhost, name) {
  const path = '/exchanges/' + enc(vhost) + '/' + enc(name);
  const x = await api('GET', path);
  const src = await api('GET', path + '/bindings/source');
  render(h('h1', {}, 'Exchange ', h('span', { class: 'pill' }, x.name || '(AMQP default)')),
    h('div', { class: 'grid' },
      h('div', { class: 'card' }, h('h2', {}, 'Details'), h('dl', { class: 'kv' },
        h('dt', {}, 'Virtual host'), h('dd', {}, x.vhost), h('dt', {}, 'Type'), h('dd', {}, x.type),
        h('dt', {}, 'Durable'), h('dd', {}, String(x.durable)), h('dt', {}, 'Arguments'), h('dd', {}, JSON.stringify(x.arguments)))),
      publishCard('xpublish', path + '/publish', '')),
    h('div', { class: 'card' }, h('h2', {}, 'Bindings from this exchange'), table(['To', 'Type', 'Routing key'],
      src.map((b) => [b.destination, b.destination_type, b.routing_key]), { id: 'exchange-bindings' })),
    name === 'amq.default' || name.startsWith('amq.') ? '' : h('div', { class: 'card' },
      h('button', { id: 'exchange-delete', class: 'danger', onclick: () => { if (confirm('Delete exchange ' + name + '?')) act(async () => { await api('DELETE', path); location.hash = '#/exchanges'; }, 'Exchange deleted'); } }, 'Delete this exchange')));
}

// publishCard is the publish form of an exchange or queue page.
function publishCard(prefix, path, key) {
  return h('div', { class: 'card' }, h('h2', {}, 'Publish message'),
    h('div', { class: 'form-row' },
      h('label', {}, 'Routing key', h('input', { id: prefix + '-key', value: key })),
      h('label', {}, 'Delivery mode', h('select', { id: prefix + '-mode' }, h('option', { value: '1' }, 'Non-persistent'), h('option', { value: '2' }, 'Persistent')))),
    h('label', {}, 'Payload', h('textarea', { id: prefix + '-payload' })),
    h('div', { class: 'toolbar' }, h('button', { id: prefix + '-submit', class: 'primary', onclick: () => act(async () => {
      const r = await api('POST', path, { routing_key: $(prefix + '-key').value, payload: $(prefix + '-payload').value, payload_encoding: 'string', properties: { delivery_mode: Number($(prefix + '-mode').value) } });
      flash(r.routed ? 'Message published.' : 'Message published, but not routed.', !r.routed);
    }) }, 'Publish')));
}

// ---- queues ----

async function queues() {
  const filter = state.queueFilter || '';
  const q = new URLSearchParams({ page: state.queuePage, page_size: 50, name: filter, sort: state.queueSort, sort_reverse: state.queueReverse, use_regex: 'false' });
  let pg;
  try { pg = await api('GET', '/queues?' + q); } catch (e) { state.queuePage = 1; throw e; }
  const vsel = await vhostOptions('queue-new-vhost');
  const sort = (k) => { state.queueReverse = state.queueSort === k ? !state.queueReverse : false; state.queueSort = k; queues(); };
  const input = h('input', { id: 'queue-filter', placeholder: 'Filter by name', value: filter });
  input.addEventListener('input', () => { state.queueFilter = input.value; state.queuePage = 1; clearTimeout(queues.t); queues.t = setTimeout(() => queues().then(() => { const i = $('queue-filter'); i.focus(); i.setSelectionRange(i.value.length, i.value.length); }), 250); });
  render(h('h1', {}, 'Queues'),
    h('div', { class: 'card' },
      h('div', { class: 'toolbar' }, input, h('span', { class: 'spacer' }),
        h('span', { class: 'muted', id: 'queue-count' }, fmt(pg.filtered_count) + ' of ' + fmt(pg.total_count) + ' queues'),
        h('button', { id: 'queue-prev', disabled: pg.page <= 1, onclick: () => { state.queuePage--; queues(); } }, '‹ Prev'),
        h('span', {}, 'Page ' + pg.page + ' / ' + Math.max(1, pg.page_count)),
        h('button', { id: 'queue-next', disabled: pg.page >= pg.page_count, onclick: () => { state.queuePage++; queues(); } }, 'Next ›')),
      table(['Virtual host', 'Name', 'Type', 'Ready', 'Unacked', 'Total', 'Consumers', 'Incoming', 'Deliver / get'],
        pg.items.map((x) => ({
          data: { name: x.name },
          cells: [x.vhost, h('a', { href: '#/queue/' + enc(x.vhost) + '/' + enc(x.name) }, x.name), x.type, fmt(x.messages_ready), fmt(x.messages_unacknowledged), fmt(x.messages), fmt(x.consumers),
            rate(x.message_stats && x.message_stats.publish_details), rate(x.message_stats && x.message_stats.deliver_get_details)],
        })),
        { id: 'queue-table', num: [3, 4, 5, 6, 7, 8], sortKeys: ['vhost', 'name', 'type', 'messages_ready', 'messages_unacknowledged', 'messages', 'consumers', 'message_stats.publish_details.rate', 'message_stats.deliver_get_details.rate'], onSort: sort })),
    h('div', { class: 'card' }, h('h2', {}, 'Add a queue'), h('div', { class: 'form-row' },
      h('label', {}, 'Virtual host', vsel),
      h('label', {}, 'Name', h('input', { id: 'queue-new-name' })),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', id: 'queue-new-durable', checked: true }), 'Durable'),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', id: 'queue-new-autodelete' }), 'Auto delete'),
      h('button', { id: 'queue-create', class: 'primary', onclick: () => act(() => api('PUT', '/queues/' + enc(vsel.value) + '/' + enc($('queue-new-name').value),
        { durable: $('queue-new-durable').checked, auto_delete: $('queue-new-autodelete').checked }), 'Queue created') }, 'Add queue'))));
}

async function queue(vhost, name) {
  const path = '/queues/' + enc(vhost) + '/' + enc(name);
  const q = await api('GET', path);
  const binds = await api('GET', path + '/bindings');
  const key = 'q:' + vhost + '/' + name;
  if (state.histKey !== key) { state.histKey = key; state.qhist = []; }
  const ms = q.message_stats || {};
  state.qhist.push({ publish: ms.publish_details ? ms.publish_details.rate : 0, deliver: ms.deliver_get_details ? ms.deliver_get_details.rate : 0, ack: ms.ack_details ? ms.ack_details.rate : 0, depth: q.messages });
  if (state.qhist.length > 120) state.qhist.shift();
  const series = [
    { label: 'Publish', color: '#4f46e5', values: state.qhist.map((x) => x.publish) },
    { label: 'Deliver / get', color: '#06b6d4', values: state.qhist.map((x) => x.deliver) },
    { label: 'Ack', color: '#16a34a', values: state.qhist.map((x) => x.ack) },
  ];
  // Keep what the user typed across refreshes.
  const keep = ['qpublish-key', 'qpublish-payload', 'get-count', 'get-ackmode'].map((id) => [id, $(id) && $(id).value]);
  const result = $('get-result') ? $('get-result').cloneNode(true) : h('div', { id: 'get-result' });
  const c = h('canvas', { id: 'chart-queue' });
  const stat = (k, v, id) => h('div', { class: 'stat' }, h('div', { class: 'v', id }, fmt(v)), h('div', { class: 'k' }, k));
  render(h('h1', {}, 'Queue ', h('span', { class: 'pill', id: 'queue-name' }, q.name), ' ', h('span', { class: 'muted' }, 'in ' + q.vhost)),
    h('div', { class: 'stats' }, stat('Ready', q.messages_ready, 'queue-ready'), stat('Unacked', q.messages_unacknowledged, 'queue-unacked'),
      stat('Total', q.messages, 'queue-messages'), stat('Consumers', q.consumers, 'queue-consumers'), stat('Published', ms.publish, 'queue-published')),
    h('div', { class: 'grid', id: 'queue-detail' },
      h('div', { class: 'card' }, h('h2', {}, 'Message rates (per second)'), c, legend(series)),
      h('div', { class: 'card' }, h('h2', {}, 'Details'), h('dl', { class: 'kv' },
        h('dt', {}, 'Durable'), h('dd', {}, String(q.durable)), h('dt', {}, 'Auto delete'), h('dd', {}, String(q.auto_delete)),
        h('dt', {}, 'Exclusive'), h('dd', {}, String(q.exclusive)), h('dt', {}, 'State'), h('dd', {}, q.state),
        h('dt', {}, 'Arguments'), h('dd', {}, JSON.stringify(q.arguments)),
        h('dt', {}, 'Policy'), h('dd', { id: 'queue-policy' }, q.policy || '—'),
        h('dt', {}, 'Operator policy'), h('dd', { id: 'queue-operator-policy' }, q.operator_policy || '—'),
        h('dt', {}, 'Effective policy'), h('dd', { id: 'queue-effective-policy' }, JSON.stringify(q.effective_policy_definition || {}))))),
    h('div', { class: 'card' }, h('h2', {}, 'Consumers'), table(['Tag', 'Channel', 'Ack required', 'Prefetch'],
      (q.consumer_details || []).map((x) => [x.consumer_tag, x.channel_details.name, String(x.ack_required), fmt(x.prefetch_count)]), { id: 'queue-consumers-table' })),
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
            h('option', { value: 'ack_requeue_true' }, 'Nack, requeue'), h('option', { value: 'ack_requeue_false' }, 'Ack, remove'))),
          h('label', {}, 'Messages', h('input', { id: 'get-count', type: 'number', value: '1', min: '1' })),
          h('button', { id: 'get-submit', class: 'primary', onclick: () => getMessages(path) }, 'Get messages')),
        result)),
    h('div', { class: 'card toolbar' },
      h('button', { id: 'purge-btn', class: 'danger', onclick: () => { if (confirm('Purge ' + name + '?')) act(() => api('DELETE', path + '/contents'), 'Queue purged'); } }, 'Purge messages'),
      h('button', { id: 'delete-btn', class: 'danger', onclick: () => { if (confirm('Delete ' + name + '?')) act(async () => { await api('DELETE', path); location.hash = '#/queues'; }, 'Queue deleted'); } }, 'Delete queue')));
  for (const [id, v] of keep) if (v !== null && v !== undefined && $(id)) $(id).value = v;
  chart(c, series);
}

async function getMessages(path) {
  try {
    const msgs = await api('POST', path + '/get', { count: Number($('get-count').value) || 1, ackmode: $('get-ackmode').value, encoding: 'auto', truncate: 50000 });
    const out = $('get-result');
    out.replaceChildren(msgs.length ? '' : h('p', { class: 'muted' }, 'Queue is empty.'),
      ...msgs.map((m, i) => h('div', { class: 'message', dataset: { index: i } },
        h('p', { class: 'muted' }, 'Message ' + (i + 1) + ' · exchange "' + m.exchange + '" · key "' + m.routing_key + '"' + (m.redelivered ? ' · redelivered' : '')),
        h('pre', { class: 'msg' }, m.payload))));
    route();
  } catch (e) { flash(e.message, true); }
}

// ---- admin: users, vhosts, permissions, definitions ----

async function admin() {
  const [users, vhosts, perms] = await Promise.all([api('GET', '/users'), api('GET', '/vhosts'), api('GET', '/permissions')]);
  const opts = (list, id) => h('select', { id }, list.map((x) => h('option', { value: x.name }, x.name)));
  render(h('h1', {}, 'Admin'),
    h('div', { class: 'grid' },
      h('div', { class: 'card' }, h('h2', {}, 'Users'),
        table(['Name', 'Tags', ''], users.map((u) => ({ data: { name: u.name }, cells: [u.name, (u.tags || []).join(', '),
          h('button', { class: 'danger', dataset: { action: 'delete-user', name: u.name }, onclick: () => { if (confirm('Delete user ' + u.name + '?')) act(() => api('DELETE', '/users/' + enc(u.name)), 'User deleted'); } }, 'Delete')] })), { id: 'users-table' }),
        h('div', { class: 'form-row' },
          h('label', {}, 'Name', h('input', { id: 'user-new-name' })),
          h('label', {}, 'Password', h('input', { id: 'user-new-pass', type: 'password' })),
          h('label', {}, 'Tags', h('input', { id: 'user-new-tags', placeholder: 'management, administrator' })),
          h('button', { id: 'user-create', class: 'primary', onclick: () => act(() => api('PUT', '/users/' + enc($('user-new-name').value), { password: $('user-new-pass').value, tags: $('user-new-tags').value }), 'User saved') }, 'Save user'))),
      h('div', { class: 'card' }, h('h2', {}, 'Virtual hosts'),
        table(['Name', 'Messages', ''], vhosts.map((v) => ({ data: { name: v.name }, cells: [v.name, fmt(v.messages),
          h('button', { class: 'danger', dataset: { action: 'delete-vhost', name: v.name }, onclick: () => { if (confirm('Delete vhost ' + v.name + ' and everything in it?')) act(() => api('DELETE', '/vhosts/' + enc(v.name)), 'Virtual host deleted'); } }, 'Delete')] })), { id: 'vhosts-table' }),
        h('div', { class: 'form-row' },
          h('label', {}, 'Name', h('input', { id: 'vhost-new-name' })),
          h('button', { id: 'vhost-create', class: 'primary', onclick: () => act(() => api('PUT', '/vhosts/' + enc($('vhost-new-name').value)), 'Virtual host added') }, 'Add virtual host')))),
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
    h('div', { class: 'card' }, h('h2', {}, 'Definitions'),
      h('div', { class: 'form-row' },
        h('button', { id: 'defs-download', onclick: downloadDefinitions }, 'Download definitions'),
        h('label', {}, 'Import a definitions file', h('input', { id: 'defs-file', type: 'file', accept: 'application/json,.json' })),
        h('button', { id: 'defs-upload', class: 'primary', onclick: uploadDefinitions }, 'Upload'))));
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
