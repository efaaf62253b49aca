// Dashboard: the notification history (read, dismiss, read all, load older) kept current by the
// live connection, the send form, and the service status for administrators.
import type { Answer } from '../../client/api-types.js';
import type { NotificationFrame } from '../../client/gateway-client.js';
import {
  $,
  api,
  boot,
  busy,
  clearOnEdit,
  currentLiveState,
  errorText,
  h,
  must,
  onLiveState,
  onNotification,
  reasonHiddenNote,
  refreshUnread,
  safeHref,
  say,
  submitter,
  text,
  UNREAD_EVENT,
  when,
  type HistoryPage,
  type LiveState,
  type NotificationView,
} from './app.js';

const FIRST_PAGE = 100;
const OLDER_PAGE = 50;

const feed = must<HTMLOListElement>('[data-feed]');
const empty = must('[data-feed-empty]');
const unreadOnly = must<HTMLInputElement>('[data-unread-only]');
const unreadLabel = must('[data-unread-label]');
const older = h('button', { type: 'button', class: 'secondary', 'data-load-older': true, hidden: true }, 'Load older');
feed.after(older);
/** id -> notification view */
const items = new Map<string, NotificationView>();
/** the lowest seq of the history pages loaded: "load older" continues below it */
let oldestLoaded = Infinity;

function render(): void {
  const list = [...items.values()].filter((n) => !unreadOnly.checked || !n.read).sort((a, b) => b.seq - a.seq);
  feed.replaceChildren(...list.map(row));
  empty.hidden = list.length > 0;
}

function row(n: NotificationView): HTMLLIElement {
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
      h(
        'div',
        { class: 'meta' },
        when(n.created_at),
        n.source ? ` · ${n.source}` : '',
        n.broadcast ? ' · everyone' : ' · to you',
        href ? ' · ' : '',
        href ? h('a', { href, rel: 'noopener noreferrer' }, 'open') : null,
      ),
    ),
    actions,
  );
}

/** Adds a history page (newest first); a page shorter than asked for is the end of the history. */
function take(page: HistoryPage, limit: number): void {
  for (const n of page.notifications) {
    items.set(n.id, n);
    oldestLoaded = Math.min(oldestLoaded, n.seq);
  }
  older.hidden = page.notifications.length < limit;
  render();
}

async function load(): Promise<HistoryPage> {
  const page = await api<HistoryPage>('GET', `/api/notifications?limit=${FIRST_PAGE}`);
  items.clear();
  oldestLoaded = Infinity;
  take(page, FIRST_PAGE);
  return page;
}

older.addEventListener('click', async () => {
  const query = new URLSearchParams({ before: String(oldestLoaded), limit: String(OLDER_PAGE) });
  const page = await busy(older, null, () => api<HistoryPage>('GET', `/api/notifications?${query}`));
  if (page) take(page, OLDER_PAGE);
});

async function markRead(id: string): Promise<void> {
  await api('POST', `/api/notifications/${encodeURIComponent(id)}/read`).catch(() => undefined);
  const n = items.get(id);
  if (n) n.read = true;
  render();
  refreshUnread();
}

async function dismiss(id: string): Promise<void> {
  await api('DELETE', `/api/notifications/${encodeURIComponent(id)}`).catch(() => undefined);
  items.delete(id);
  render();
  refreshUnread();
}

const readAll = must<HTMLButtonElement>('[data-read-all]');
readAll.addEventListener('click', async () => {
  await busy(readAll, null, () => api('POST', '/api/notifications/read-all'));
  for (const n of items.values()) n.read = true;
  render();
  refreshUnread();
});
unreadOnly.addEventListener('change', render);
document.addEventListener(UNREAD_EVENT, ({ detail: count }) => {
  unreadLabel.textContent = count ? `(${count} unread)` : '';
});

/** A pushed notification as the history shows it. */
function view(n: NotificationFrame): NotificationView {
  return {
    id: n.id,
    seq: n.seq ?? 0,
    title: n.title ?? '',
    message: n.message ?? '',
    level: n.level ?? 'info',
    source: n.source ?? null,
    link: n.link ?? null,
    created_at: n.created_at ?? new Date().toISOString(),
    updated_at: n.updated_at ?? n.created_at ?? new Date().toISOString(),
    read: n.read ?? false,
    broadcast: n.broadcast,
    toast: n.toast ?? true,
  };
}

onNotification((n) => {
  if (n.action === 'clear') items.delete(n.id);
  else if (n.persist !== false) items.set(n.id, view(n));
  render();
});

// ---- send form ---------------------------------------------------------------------------

interface SendBody {
  title: string;
  message: string;
  level: string;
  link?: string;
  user?: string;
}

const sendForm = $<HTMLFormElement>('[data-send-form]');
if (sendForm) clearOnEdit(sendForm, $('[data-msg]', sendForm));
sendForm?.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(sendForm);
  const body: SendBody = { title: text(f, 'title'), message: text(f, 'message'), level: text(f, 'level') };
  if (text(f, 'link')) body.link = text(f, 'link');
  if (text(f, 'user')) body.user = text(f, 'user');
  const msg = $('[data-msg]', sendForm);
  const res = await busy(submitter(e), msg, () => api('POST', '/api/notifications', body));
  if (res) {
    say(msg, 'Sent.');
    sendForm.reset();
  }
});

// ---- toasts beside the send form ----------------------------------------------------------
// The toasts keep to the bottom right of the screen; on a phone they take its width, and there
// they would sit on the send form's fields whenever the form is low on the screen. Then they go
// to the top, under the bar, if they cover none of it there (else to whichever place covers
// less). Checked when a toast comes or goes and while the page scrolls or resizes.

const toastArea = $('[data-toasts]');
const topBar = $('.topbar');

/** The area of the send form's fields and buttons (a label holds its field) the toasts cover where they are now. */
function coveredByToasts(area: HTMLElement, form: HTMLFormElement): number {
  const t = area.getBoundingClientRect();
  let covered = 0;
  for (const el of form.querySelectorAll('label, button')) {
    const r = el.getBoundingClientRect();
    const w = Math.min(r.right, t.right) - Math.max(r.left, t.left);
    const hgt = Math.min(r.bottom, t.bottom) - Math.max(r.top, t.top);
    if (w > 0 && hgt > 0) covered += w * hgt;
  }
  return covered;
}

function placeToasts(): void {
  if (!toastArea || !sendForm) return;
  toastArea.classList.remove('at-top');
  if (!toastArea.childElementCount) return;
  const below = coveredByToasts(toastArea, sendForm);
  if (below === 0) return;
  // the bar is sticky: its bottom is where the page's visible content starts
  toastArea.style.setProperty('--toasts-top', `${Math.max(0, topBar?.getBoundingClientRect().bottom ?? 0)}px`);
  toastArea.classList.add('at-top');
  if (coveredByToasts(toastArea, sendForm) >= below) toastArea.classList.remove('at-top');
}

if (toastArea && sendForm) {
  new MutationObserver(placeToasts).observe(toastArea, { childList: true });
  const whileShown = () => {
    if (toastArea.childElementCount) placeToasts();
  };
  window.addEventListener('scroll', whileShown, { passive: true });
  window.addEventListener('resize', whileShown);
}

// ---- service status (feature:dashboard.admin_sections) ---------------------------------------

type ProviderList = Answer<'/api/socket/providers', 'get'>;
type WebhookHealth = Answer<'/api/notifications/webhook/scm/health', 'get'>;

async function loadStatus(status: HTMLElement): Promise<void> {
  const providers = must('[data-providers]', status);
  const webhook = must('[data-webhook]', status);
  try {
    const p = await api<ProviderList>('GET', '/api/socket/providers');
    // an unavailable provider says why, so the administrator knows what to fix
    const entry = (x: ProviderList['providers'][number]) =>
      h(
        'div',
        { class: 'provider', dataset: { provider: x.name } },
        h('span', { class: `pill ${x.available ? 'on' : 'off'}` }, `${x.name} ${x.available ? 'available' : 'unavailable'}`),
        !x.available && x.reason ? h('span', { class: 'note reason' }, x.reason) : null,
        // the reason names sockets and paths: say who reads it instead of leaving a bare "not available"
        !x.available && p.host_facts_hidden ? reasonHiddenNote() : null,
      );
    providers.replaceChildren(...(p.providers.length ? p.providers.map(entry) : ['none']));
  } catch (err) {
    providers.textContent = errorText(err);
  }
  try {
    const w = await api<WebhookHealth>('GET', '/api/notifications/webhook/scm/health');
    webhook.replaceChildren(
      h('span', { class: `pill ${w.status === 'ok' ? 'on' : 'off'}` }, w.status === 'ok' ? 'accepting' : 'disabled (no secret)'),
      w.last_delivery_at ? ' last delivery ' : '',
      w.last_delivery_at ? when(w.last_delivery_at) : '',
    );
  } catch (err) {
    webhook.textContent = errorText(err);
  }
}

const status = $('[data-status]');
if (status) {
  const liveState = must('[data-live]', status);
  const show = (s: LiveState) => (liveState.textContent = s === 'live' ? 'connected' : s);
  onLiveState(show);
  show(currentLiveState());
  void loadStatus(status);
}

// the live connection resumes after the history just loaded: nothing falls in between
load()
  .then((page) => boot(page))
  .catch((err: unknown) => {
    empty.hidden = false;
    empty.textContent = `Could not load notifications: ${errorText(err)}`;
    void boot();
  });
