// Shared by every signed-in page: API calls, DOM helpers, toasts, the bell and the live
// connection (the typed gateway client, bundled in). Data is always put into the page as text
// (textContent / attributes), never as HTML.
import type { Answer, Schemas } from '../../client/api-types.js';
import { CredentialRefusedError, GatewayClient, type ClientState, type NotificationFrame } from '../../client/gateway-client.js';
import { ApiError } from './forms.js';
import { stepUp, type StepUpDetails } from './step-up.js';

export * from './forms.js';

const body = document.body;

/** Who is signed in, as the server rendered it. */
export const me = {
  username: body.dataset.username ?? '',
  userId: body.dataset.userId || null,
  permissions: new Set((body.dataset.permissions ?? '').split(' ').filter(Boolean)),
};
export const can = (permission: string): boolean => me.permissions.has(permission);

function toLogin(): void {
  location.assign(`/login?${new URLSearchParams({ next: location.pathname + location.search })}`);
}

/** Sent on document when the API says this account must enrol a second factor first (on /settings, where the Security panel is). */
export const ENROLMENT_EVENT = 'mfa-enrollment-required';

/** A member of a group that requires a second factor goes to the Security panel, once. */
function toEnrolment(): void {
  if (location.pathname === '/settings') document.dispatchEvent(new CustomEvent(ENROLMENT_EVENT));
  else location.assign('/settings?mfa=required#security');
}

/**
 * One JSON call with the session cookie; 401 sends the browser to the login page. A 403
 * `step_up_required` opens the step-up dialog and, once the factor is verified, sends the call
 * again (once); a 403 `mfa_enrollment_required` goes to the Security panel of the account page.
 */
export async function api<T = unknown>(method: string, path: string, payload?: unknown, retried = false): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  const init: RequestInit = { method, credentials: 'same-origin', headers };
  if (payload !== undefined) {
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(payload);
  }
  const res = await fetch(path, init);
  const data: unknown = res.status === 204 ? null : await res.json().catch(() => null);
  if (res.status === 401) {
    toLogin();
    throw new ApiError(401, 'unauthorized', 'your session ended');
  }
  if (!res.ok) {
    const err = (data as { error?: { code?: string; message?: string; details?: unknown } } | null)?.error ?? {};
    if (res.status === 403 && err.code === 'step_up_required' && !retried && (await stepUp(err.details as StepUpDetails)))
      return api<T>(method, path, payload, true);
    if (res.status === 403 && err.code === 'mfa_enrollment_required') toEnrolment();
    throw new ApiError(res.status, err.code ?? 'error', err.message ?? `${res.status} ${res.statusText}`, err.details);
  }
  return data as T;
}

type EventHandler = (ev: Event) => void;
type AttrValue = string | number | boolean | null | undefined | Record<string, string> | EventHandler;
type Attrs = Record<string, AttrValue>;
type Child = Node | string | number | null | undefined | false | readonly Child[];

function appendChildren(el: Element, children: readonly Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) appendChildren(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Creates an element: h('a', {href: x, class: 'y'}, 'text', child). */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = String(v);
    else if (k === 'dataset' && typeof v === 'object') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  appendChildren(el, children);
  return el;
}

export const $ = <E extends Element = HTMLElement>(sel: string, root?: ParentNode | null): E | null => (root ?? document).querySelector<E>(sel);

/** An element the server always renders on this page. */
export function must<E extends Element = HTMLElement>(sel: string, root?: ParentNode | null): E {
  const el = $<E>(sel, root);
  if (!el) throw new Error(`the page has no ${sel}`);
  return el;
}

/** A link target we are willing to put into href: http(s) or a local path. */
export function safeHref(link: unknown): string | null {
  if (typeof link !== 'string') return null;
  if (/^\/(?![/\\])/.test(link)) return link;
  try {
    const u = new URL(link);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
  } catch {
    return null;
  }
}

// One date style on every page, in the reader's time zone: "26 Nov 2026, 14:05"; the exact
// ISO time is in the title.
const DATE_FORMAT = new Intl.DateTimeFormat('en-GB', { day: 'numeric', month: 'short', year: 'numeric', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
export const formatDate = (iso: string): string => DATE_FORMAT.format(new Date(iso));
export const when = (iso: string | null | undefined): Node | string =>
  iso ? h('time', { datetime: iso, title: new Date(iso).toISOString() }, formatDate(iso)) : '—';

// On a phone the navigations scroll sideways: the current page's link is scrolled into sight.
for (const nav of document.querySelectorAll<HTMLElement>('.topbar nav, .admin-nav')) {
  const currentLink = $('[aria-current]', nav);
  if (!currentLink || nav.scrollWidth <= nav.clientWidth) continue;
  const past = currentLink.getBoundingClientRect().right - nav.getBoundingClientRect().right;
  if (past > -24) nav.scrollLeft += past + 32;
}

// On a phone a table's rows become cards (app.css): each cell then names its column, taken
// from the table's heading, for rows added at any time.
function labelCells(table: HTMLTableElement): void {
  const heads = [...(table.tHead?.rows[0]?.cells ?? [])].map((th) => th.textContent?.trim() ?? '');
  for (const body of table.tBodies) {
    for (const row of body.rows) for (const cell of row.cells) if (cell.colSpan === 1 && heads[cell.cellIndex]) cell.dataset.label = heads[cell.cellIndex];
  }
}
for (const table of document.querySelectorAll<HTMLTableElement>('table.list')) {
  labelCells(table);
  new MutationObserver(() => labelCells(table)).observe(table, { childList: true, subtree: true });
}

// ---- toasts --------------------------------------------------------------------------

type Level = NonNullable<NotificationFrame['level']>;
const toastArea = $('[data-toasts]');
const TOAST_MS: Record<Level, number> = { info: 6000, success: 6000, warning: 9000, error: 12000 };
const isLevel = (l: unknown): l is Level => typeof l === 'string' && l in TOAST_MS;

export interface ToastContent {
  id?: string;
  title?: string;
  message?: string;
  level?: string;
  link?: string | null;
}

export function toast(n: ToastContent): void {
  if (!toastArea) return;
  const level = isLevel(n.level) ? n.level : 'info';
  const href = safeHref(n.link);
  const close = h('button', { type: 'button', class: 'close', 'aria-label': 'Close' }, '×');
  const el = h(
    'div',
    { class: `toast lvl-${level}`, dataset: { toast: n.id ?? '' } },
    h('div', { class: 'title' }, n.title ?? ''),
    n.message ? h('div', { class: 'msg' }, n.message) : null,
    href ? h('a', { href, rel: 'noopener noreferrer' }, 'Open') : null,
    close,
  );
  const remove = () => el.remove();
  close.addEventListener('click', remove);
  toastArea.append(el);
  while (toastArea.children.length > 5) toastArea.firstElementChild?.remove();
  setTimeout(remove, TOAST_MS[level]);
}

// ---- bell ----------------------------------------------------------------------------

/** GET /api/notifications: a page of the history, and one notification of it. */
export type HistoryPage = Answer<'/api/notifications', 'get'>;
export type NotificationView = Schemas['Notification'];

const bellCount = $('[data-bell-count]');
let bellTimer: ReturnType<typeof setTimeout> | undefined;

/** Sent on document whenever the unread count is known anew. */
export const UNREAD_EVENT = 'unread';
declare global {
  interface DocumentEventMap {
    [UNREAD_EVENT]: CustomEvent<number>;
  }
}

export function setUnread(count: number): void {
  if (!bellCount) return;
  bellCount.textContent = count > 99 ? '99+' : String(count);
  bellCount.hidden = count === 0;
  bellCount.parentElement?.setAttribute('aria-label', `Notifications, ${count} unread`);
  document.dispatchEvent(new CustomEvent<number>(UNREAD_EVENT, { detail: count }));
}

/** Re-reads the unread count (debounced: bursts of events cost one request). */
export function refreshUnread(): void {
  if (!bellCount) return; // no bell on this page (no dashboard to read them on)
  clearTimeout(bellTimer);
  bellTimer = setTimeout(async () => {
    try {
      setUnread((await api<HistoryPage>('GET', '/api/notifications?limit=1')).unread);
    } catch {
      /* the next event tries again */
    }
  }, 120);
}

// ---- live connection -----------------------------------------------------------------

export type LiveState = 'connecting' | 'live' | 'offline';
const liveStateOf = (s: ClientState): LiveState => (s === 'live' ? 'live' : s === 'connecting' || s === 'resuming' ? 'connecting' : 'offline');

const notificationListeners = new Set<(n: NotificationFrame) => void>();
const stateListeners = new Set<(s: LiveState) => void>();
let liveState: LiveState = 'connecting';
let client: GatewayClient | null = null;

/** Every notification push, once, in order (live or missed while away). */
export const onNotification = (fn: (n: NotificationFrame) => void): void => void notificationListeners.add(fn);
export const onLiveState = (fn: (s: LiveState) => void): void => void stateListeners.add(fn);
export const currentLiveState = (): LiveState => liveState;

const frameListeners: Array<[string, (payload: unknown) => void]> = [];
/** Every live frame of one server event (e.g. `audit:event`), from now on; frames are not replayed after a reconnect. */
export function onFrame<T>(event: string, fn: (payload: T) => void): void {
  const listener = fn as (payload: unknown) => void;
  frameListeners.push([event, listener]);
  client?.on(event, listener);
}

const connBanner = $('[data-conn-state]');
function showLiveState(s: LiveState): void {
  liveState = s;
  if (connBanner) connBanner.hidden = s !== 'offline';
  document.body.dataset.live = s;
  for (const fn of stateListeners) fn(s);
}

/** A one-time ticket for each connection, bought with the session cookie. */
async function wsTicket(): Promise<string> {
  const res = await fetch('/api/ws/ticket', { method: 'POST', credentials: 'same-origin', headers: { accept: 'application/json' } });
  if (res.status === 401) throw new CredentialRefusedError('your session ended');
  if (!res.ok) throw new Error(`ticket: ${res.status}`);
  return ((await res.json()) as { ticket: string }).ticket;
}

const toastable = (n: NotificationFrame): boolean => n.action !== 'clear' && n.toast !== false;

function startLive(since: number): void {
  const live = new GatewayClient({
    url: `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}/ws`,
    ticket: wsTicket,
    since,
    backoff: { initialMs: 500, maxMs: 10_000 },
    keepalive: { intervalMs: 20_000, timeoutMs: 5_000 },
  });
  client = live;
  for (const [event, fn] of frameListeners) live.on(event, fn);
  let missed: NotificationFrame[] = [];
  live.on('state', ({ state }) => {
    showLiveState(liveStateOf(state));
    if (state === 'refused') toLogin();
    // closed by the server (e.g. the account was disabled): a 401 here goes to the login page
    else if (state === 'closed') refreshUnread();
  });
  live.on('notification', ({ payload, replayed }) => {
    if (!replayed) {
      if (toastable(payload)) toast(payload);
    } else if (toastable(payload) && !payload.read) missed.push(payload);
    for (const fn of notificationListeners) fn(payload);
    refreshUnread();
  });
  live.on('notifications:resumed', ({ more }) => {
    if (more) return;
    const shown = missed;
    missed = [];
    // a few missed ones one by one; many as one summary
    if (shown.length <= 3) shown.forEach(toast);
    else toast({ title: `${shown.length} new notifications`, message: 'arrived while you were offline', level: 'info', link: '/#notifications' });
    refreshUnread();
  });
  window.addEventListener('online', () => live.reconnectNow());
  window.addEventListener('offline', () => live.drop('the browser went offline'));
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && live.state === 'reconnecting') live.reconnectNow();
  });
}

// Sign out with fetch(): a plain form post under this page's no-referrer policy would carry
// "Origin: null" and be refused as cross-origin.
$<HTMLButtonElement>('[data-logout]')?.form?.addEventListener('submit', async (e) => {
  e.preventDefault();
  try {
    await fetch('/logout', { method: 'POST', credentials: 'same-origin' });
  } finally {
    location.assign('/login');
  }
});

/**
 * Starts the shared parts of a page: the bell and the live connection. `page` is a history
 * answer the page already has; the live connection resumes after its last_seq.
 */
export async function boot(page: HistoryPage | null = null): Promise<void> {
  if (client) return;
  showLiveState('connecting');
  let since = 0;
  try {
    page ??= await api<HistoryPage>('GET', '/api/notifications?limit=1');
    setUnread(page.unread);
    since = page.last_seq;
  } catch (err) {
    // an account that must enrol a second factor first gets no live connection until it has
    if (err instanceof ApiError && err.code === 'mfa_enrollment_required') return;
    /* notifications unavailable: the live connection still tries */
  }
  if (!client) startLive(since);
}

/**
 * Said beside an unavailable socket provider when its reason is kept from the viewer (it names
 * sockets and paths: `host_facts_hidden` in GET /api/socket/providers), on every page that lists them.
 */
export function reasonHiddenNote(): HTMLElement {
  return h('span', { class: 'note', dataset: { reasonHidden: '' } }, 'why is shown to a superadmin or a holder of a socket permission');
}
