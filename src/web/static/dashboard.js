// Dashboard: the notification history (read, dismiss, read all) kept current by the live
// connection, the send form, and the service status for administrators.
import { $, api, boot, busy, errorText, h, live, refreshUnread, safeHref, say, when } from './app.js';

const feed = $('[data-feed]');
const empty = $('[data-feed-empty]');
const unreadOnly = $('[data-unread-only]');
const unreadLabel = $('[data-unread-label]');
/** id -> notification view */
const items = new Map();

function render() {
  const list = [...items.values()].filter((n) => !unreadOnly.checked || !n.read).sort((a, b) => (b.seq ?? 0) - (a.seq ?? 0));
  feed.replaceChildren(...list.map(row));
  empty.hidden = list.length > 0;
}

function row(n) {
  const href = safeHref(n.link);
  const actions = h('div', { class: 'actions' });
  if (!n.read) actions.append(h('button', { type: 'button', class: 'small secondary', 'data-action': 'read', onclick: () => markRead(n.id) }, 'Mark read'));
  actions.append(h('button', { type: 'button', class: 'small secondary', 'data-action': 'dismiss', onclick: () => dismiss(n.id) }, 'Dismiss'));
  return h(
    'li',
    { class: `lvl-${n.level} ${n.read ? 'read' : 'unread'}`, dataset: { id: n.id } },
    h(
      'div',
      {},
      h('div', { class: 'title' }, n.title),
      n.message ? h('p', { class: 'msg' }, n.message) : null,
      h('div', { class: 'meta' }, when(n.created_at), n.source ? ` · ${n.source}` : '', n.broadcast ? ' · everyone' : ' · to you', href ? ' · ' : '', href ? h('a', { href, rel: 'noopener noreferrer' }, 'open') : null),
    ),
    actions,
  );
}

async function load() {
  const page = await api('GET', '/api/notifications?limit=100');
  items.clear();
  for (const n of page.notifications) items.set(n.id, n);
  render();
  return page;
}

async function markRead(id) {
  await api('POST', `/api/notifications/${encodeURIComponent(id)}/read`).catch(() => undefined);
  const n = items.get(id);
  if (n) n.read = true;
  render();
  refreshUnread();
}

async function dismiss(id) {
  await api('DELETE', `/api/notifications/${encodeURIComponent(id)}`).catch(() => undefined);
  items.delete(id);
  render();
  refreshUnread();
}

$('[data-read-all]').addEventListener('click', async (e) => {
  await busy(e.currentTarget, null, () => api('POST', '/api/notifications/read-all'));
  for (const n of items.values()) n.read = true;
  render();
  refreshUnread();
});
unreadOnly.addEventListener('change', render);
document.addEventListener('unread', (e) => {
  unreadLabel.textContent = e.detail ? `(${e.detail} unread)` : '';
});

live.addEventListener('notify', (e) => {
  const { payload } = e.detail;
  if (payload.action === 'clear') items.delete(payload.id);
  else if (payload.persist !== false) items.set(payload.id, payload);
  render();
});

// ---- send form ---------------------------------------------------------------------------

const sendForm = $('[data-send-form]');
if (sendForm) {
  sendForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = new FormData(sendForm);
    const body = { title: f.get('title'), message: f.get('message') ?? '', level: f.get('level') };
    if (f.get('link')) body.link = f.get('link');
    if (f.get('user')) body.user = f.get('user');
    const msg = $('[data-msg]', sendForm);
    const res = await busy(e.submitter, msg, () => api('POST', '/api/notifications', body));
    if (res) {
      say(msg, 'Sent.');
      sendForm.reset();
    }
  });
}

// ---- service status (feature:dashboard.admin_sections) ---------------------------------------

const status = $('[data-status]');
async function loadStatus() {
  const providers = $('[data-providers]', status);
  const webhook = $('[data-webhook]', status);
  try {
    const p = await api('GET', '/api/socket/providers');
    providers.replaceChildren(...(p.providers.length ? p.providers.map((x) => h('span', { class: `pill ${x.available ? 'on' : 'off'}` }, `${x.name} ${x.available ? 'available' : 'unavailable'}`)) : ['none']));
  } catch (err) {
    providers.textContent = errorText(err);
  }
  try {
    const w = await api('GET', '/api/notifications/webhook/scm/health');
    webhook.replaceChildren(h('span', { class: `pill ${w.status === 'ok' ? 'on' : 'off'}` }, w.status === 'ok' ? 'accepting' : 'disabled (no secret)'), w.last_delivery_at ? ' last delivery ' : '', w.last_delivery_at ? when(w.last_delivery_at) : '');
  } catch (err) {
    webhook.textContent = errorText(err);
  }
}
if (status) {
  const liveState = $('[data-live]', status);
  const show = (s) => (liveState.textContent = s === 'live' ? 'connected' : s);
  live.addEventListener('state', (e) => show(e.detail));
  show(live.state);
  loadStatus();
}

// the live connection resumes after the history just loaded: nothing falls in between
load()
  .then((page) => boot(page))
  .catch((err) => {
    empty.hidden = false;
    empty.textContent = `Could not load notifications: ${errorText(err)}`;
    boot();
  });
