// Shared by every signed-in page: API calls, DOM helpers, toasts, the bell and the live
// connection (the typed gateway client, bundled in). Data is always put into the page as text
// (textContent / attributes), never as HTML.
import { CredentialRefusedError, GatewayClient, type ClientState, type NotificationFrame } from '../../client/gateway-client.js';

const body = document.body;

/** Who is signed in, as the server rendered it. */
export const me = {
  username: body.dataset.username ?? '',
  userId: body.dataset.userId || null,
  permissions: new Set((body.dataset.permissions ?? '').split(' ').filter(Boolean)),
};
export const can = (permission: string): boolean => me.permissions.has(permission);

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
  }
}

function toLogin(): void {
  location.assign(`/login?${new URLSearchParams({ next: location.pathname + location.search })}`);
}

/** One JSON call with the session cookie; 401 sends the browser to the login page. */
export async function api<T = unknown>(method: string, path: string, payload?: unknown): Promise<T> {
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

/** A named control of a form. */
export function control<E extends Element = HTMLInputElement>(form: HTMLFormElement, name: string): E {
  const el = form.elements.namedItem(name);
  if (!(el instanceof Element)) throw new Error(`the form has no single control named ${name}`);
  return el as E;
}

/** A text field of FormData ('' when absent). */
export const text = (f: FormData, name: string): string => {
  const v = f.get(name);
  return typeof v === 'string' ? v : '';
};
export const texts = (f: FormData, name: string): string[] => f.getAll(name).filter((v): v is string => typeof v === 'string');

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

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });
export function ago(iso: string | null | undefined): string {
  if (!iso) return '—';
  const t = new Date(iso).getTime();
  const s = Math.round((t - Date.now()) / 1000);
  const abs = Math.abs(s);
  if (abs < 45) return relative.format(Math.round(s), 'second');
  if (abs < 2700) return relative.format(Math.round(s / 60), 'minute');
  if (abs < 64800) return relative.format(Math.round(s / 3600), 'hour');
  if (abs < 2592000) return relative.format(Math.round(s / 86400), 'day');
  return new Date(iso).toLocaleDateString();
}
export const when = (iso: string | null | undefined): Node | string => (iso ? h('time', { datetime: iso, title: new Date(iso).toLocaleString() }, ago(iso)) : '—');

/** Shows a form result under the form. */
export function say(el: Element | null, message: string, kind: 'ok' | 'error' = 'ok'): void {
  if (!el) return;
  el.textContent = message;
  el.className = `form-msg ${kind}`;
}

const isProblem = (d: unknown): d is { field: string; message: string } => typeof d === 'object' && d !== null && 'field' in d && 'message' in d;

export function errorText(err: unknown): string {
  if (err instanceof ApiError && Array.isArray(err.details) && err.details.length && err.details.every(isProblem)) {
    return err.details.map((d) => `${d.field}: ${d.message}`).join('; ');
  }
  return err instanceof Error ? err.message : String(err);
}

/** Runs an async action for a button: disabled while it runs, errors shown in `msg`. */
export async function busy<T>(button: HTMLButtonElement | null | undefined, msg: Element | null, fn: () => Promise<T>): Promise<T | undefined> {
  if (button) button.disabled = true;
  try {
    return await fn();
  } catch (err) {
    say(msg, errorText(err), 'error');
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

/** The button that submitted a form, when it is one. */
export const submitter = (e: SubmitEvent): HTMLButtonElement | null => (e.submitter instanceof HTMLButtonElement ? e.submitter : null);

/** 32 random bytes, base64url: for generated secrets. */
export function randomSecret(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export async function copyText(value: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(value);
    return true;
  } catch {
    return false;
  }
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

/** GET /api/notifications: a page of the history. */
export interface NotificationView {
  id: string;
  seq: number;
  title: string;
  message: string;
  level: Level;
  source: string | null;
  link: string | null;
  created_at: string;
  read: boolean;
  broadcast: boolean;
}
export interface HistoryPage {
  notifications: NotificationView[];
  unread: number;
  last_seq: number;
}

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
  } catch {
    /* notifications unavailable: the live connection still tries */
  }
  if (!client) startLive(since);
}

/**
 * A destructive button that asks in place: the first click arms it ("Confirm?"), a second
 * click within 4 s runs `fn`. No modal dialog.
 */
export function confirmButton(button: HTMLButtonElement, label: string, fn: () => Promise<unknown>): HTMLButtonElement {
  let armed: ReturnType<typeof setTimeout> | null = null;
  const original = button.textContent;
  const disarm = () => {
    armed = null;
    button.textContent = original;
    button.classList.remove('danger');
  };
  button.addEventListener('click', async () => {
    if (!armed) {
      button.textContent = label;
      button.classList.add('danger');
      armed = setTimeout(disarm, 4000);
      return;
    }
    clearTimeout(armed);
    disarm();
    button.disabled = true;
    try {
      await fn();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}
