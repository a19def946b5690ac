// ralph serve's page: the token from the URL's fragment is traded for a cookie, the fragment
// cleared, then every loop is drawn from the event stream. Whatever a loop or its agent wrote
// is set as text (textContent), never as markup.
'use strict';

const loops = new Map(); // name -> {el, parts, data}
let readOnly = true;
let nextId = 0;

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function say(text) {
  document.getElementById('message').textContent = text;
}

function api(path, options) {
  return fetch(path, Object.assign({ credentials: 'same-origin' }, options || {}));
}

async function start() {
  const m = /(?:^#|&)token=([0-9a-fA-F]+)/.exec(location.hash);
  if (m) {
    history.replaceState(null, '', location.pathname + location.search);
    const r = await api('/api/session', { method: 'POST', headers: { Authorization: 'Bearer ' + m[1] } });
    if (!r.ok) {
      say('The token was refused: open the URL ralph serve printed.');
      return;
    }
  }
  const conn = document.getElementById('connection');
  const events = new EventSource('/api/events');
  events.addEventListener('open', () => { conn.textContent = 'Live'; });
  events.addEventListener('error', () => {
    conn.textContent = 'Disconnected — retrying (if this lasts, open the URL ralph serve printed)';
  });
  events.addEventListener('loops', (e) => render(JSON.parse(e.data)));
  events.addEventListener('loop', (e) => {
    const l = loops.get(e.data);
    if (l && l.parts.details.open) loadView(e.data);
  });
}

function stateText(d) {
  if (d.waiting) return 'waiting for a person';
  if (d.running) return 'running';
  if (d.path === null) return d.merged_at ? 'merged' : 'retired';
  if (d.halt_reason) {
    const exit = d.exit_code === null || d.exit_code === undefined ? '' : ` (exit ${d.exit_code})`;
    return `halted: ${d.halt_reason}${exit}`;
  }
  return d.run_id ? 'stopped' : 'no run yet';
}

function elapsed(s) {
  if (s === null || s === undefined) return '—';
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return (h ? `${h}h ` : '') + (h || m ? `${m}m ` : '') + `${r}s`;
}

function render(all) {
  readOnly = !!all.read_only;
  const list = document.getElementById('loops');
  const seen = new Set();
  for (const d of all.loops) {
    seen.add(d.name);
    let l = loops.get(d.name);
    if (!l) {
      l = build(d.name);
      loops.set(d.name, l);
    }
    list.appendChild(l.el); // keeps the server's order
    update(l, d);
  }
  for (const [name, l] of loops) {
    if (!seen.has(name)) {
      l.el.remove();
      loops.delete(name);
    }
  }
}

const FACTS = [
  ['branch', 'Branch'], ['state', 'State'], ['progress', 'Progress'], ['iteration', 'Iteration'],
  ['elapsed', 'Elapsed'], ['cost', 'Cost'], ['halt', 'Halt reason'], ['activity', 'Latest activity'],
];

function build(name) {
  const id = 'loop-' + nextId++;
  const item = el('li');
  const li = item.appendChild(el('section', { class: 'loop', 'aria-labelledby': id + '-name' }));
  li.appendChild(el('h2', { id: id + '-name' }, name));
  const facts = el('dl', { class: 'facts' });
  const parts = { name, id };
  for (const [key, label] of FACTS) {
    facts.appendChild(el('dt', {}, label));
    parts[key] = facts.appendChild(el('dd'));
  }
  li.appendChild(facts);
  parts.question = li.appendChild(el('div', { class: 'question' }));
  parts.questionText = parts.question.appendChild(el('p'));
  parts.answer = sayBox(parts.question, id + '-answer', `Answer for ${name}`, `Send answer for ${name}`, 'answer', name);
  parts.actions = li.appendChild(el('div', { class: 'actions' }));
  parts.buttons = {};
  for (const [action, label] of [['stop', 'Stop'], ['resume', 'Resume'], ['merge', 'Merge']]) {
    const b = el('button', { type: 'button' }, `${label} ${name}`);
    b.addEventListener('click', () => act(name, action, null, b));
    parts.buttons[action] = b;
  }
  parts.hintBox = li.appendChild(el('div'));
  parts.hint = sayBox(parts.hintBox, id + '-hint', `Hint for ${name}`, `Send hint for ${name}`, 'hint', name);
  parts.details = li.appendChild(el('details'));
  parts.details.appendChild(el('summary', {}, `Details of ${name}`));
  parts.view = parts.details.appendChild(el('div'));
  parts.details.addEventListener('toggle', () => { if (parts.details.open) loadView(name); });
  return { el: item, parts, data: null };
}

function sayBox(parent, id, label, button, action, name) {
  const box = parent.appendChild(el('div', { class: 'say' }));
  box.appendChild(el('label', { for: id }, label));
  const input = box.appendChild(el('textarea', { id, rows: '2' }));
  const b = box.appendChild(el('button', { type: 'button' }, button));
  b.addEventListener('click', async () => {
    if (!input.value.trim()) { say(`${label}: write something first.`); return; }
    if (await act(name, action, { text: input.value }, b)) input.value = '';
  });
  return box;
}

function show(node, visible) {
  node.hidden = !visible;
}

function update(l, d) {
  const p = l.parts;
  l.data = d;
  p.branch.textContent = d.branch || '—';
  p.state.textContent = stateText(d);
  p.progress.textContent = d.done === null ? '—' : `${d.done}/${d.total}`;
  p.iteration.textContent = d.max_iterations ? `${d.iteration}/${d.max_iterations}` : String(d.iteration);
  p.elapsed.textContent = elapsed(d.elapsed_s);
  p.cost.textContent = `$${(d.cost_usd || 0).toFixed(2)}`;
  p.halt.textContent = d.halt_reason || '—';
  p.activity.textContent = d.activity_now || (d.last_records && d.last_records.length ? d.last_records[d.last_records.length - 1] : '—');
  const q = d.question;
  show(p.question, !!q);
  p.questionText.textContent = q ? `Question (iteration ${q.iteration}, ${q.asked_at}): ${q.text}` : '';
  show(p.answer, !!q && !readOnly);
  const live = d.path !== null;
  const applies = {
    stop: d.running,
    resume: live && !d.running && !!d.run_id && !!d.halt_reason && d.halt_reason !== 'complete',
    merge: live && d.name !== 'main' && !d.running && d.halt_reason === 'complete',
  };
  for (const [action, b] of Object.entries(p.buttons)) {
    const wanted = !readOnly && applies[action];
    if (wanted && !b.isConnected) p.actions.appendChild(b);
    if (!wanted && b.isConnected) b.remove();
  }
  show(p.hintBox, live && !readOnly);
}

async function act(name, action, body, button) {
  button.disabled = true;
  try {
    const r = await api(`/api/loops/${encodeURIComponent(name)}/${action}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body || {}),
    });
    const j = await r.json().catch(() => ({ ok: false, message: `HTTP ${r.status}` }));
    say(j.message);
    return j.ok;
  } catch (e) {
    say(`${action} ${name}: ${e}`);
    return false;
  } finally {
    button.disabled = false;
  }
}

const loading = new Map();

async function loadView(name) {
  if (loading.get(name)) { loading.set(name, 'again'); return; }
  loading.set(name, true);
  try {
    const r = await api(`/api/loops/${encodeURIComponent(name)}`);
    if (r.ok) drawView(name, await r.json());
  } finally {
    const again = loading.get(name) === 'again';
    loading.delete(name);
    if (again) loadView(name);
  }
}

function section(parent, title, lines) {
  parent.appendChild(el('h3', {}, title));
  parent.appendChild(el('pre', {}, lines && lines.length ? lines.join('\n') : '(none)'));
}

function drawView(name, v) {
  const l = loops.get(name);
  if (!l) return;
  const view = el('div');
  view.appendChild(el('h3', {}, 'Criteria'));
  const crit = view.appendChild(el('ul', { class: 'criteria' }));
  for (const c of v.criteria || []) {
    const li = crit.appendChild(el('li'));
    const box = li.appendChild(el('input', { type: 'checkbox', disabled: '' }));
    box.checked = !!c.checked;
    li.appendChild(document.createTextNode(' ' + c.text));
  }
  if (!(v.criteria || []).length) crit.appendChild(el('li', {}, '(none)'));
  section(view, 'Iteration records', v.records);
  section(view, 'Activity', v.activity);
  section(view, 'Transcript (its end)', v.transcript_tail ? [v.transcript_tail] : []);
  l.parts.view.replaceWith(view);
  l.parts.view = view;
}

start();
