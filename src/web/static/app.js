// Shared by every signed-in page: API calls, DOM helpers, toasts, the bell and the live
// connection. Plain ES module, no build step. Data is always put into the page as text
// (textContent / attributes), never as HTML.
import { LiveClient } from './live.js';

const body = document.body;

/** Who is signed in, as the server rendered it. */
export const me = {
  username: body.dataset.username ?? '',
  userId: body.dataset.userId || null,
  permissions: new Set((body.dataset.permissions ?? '').split(' ').filter(Boolean)),
};
export const can = (permission) => me.permissions.has(permission);

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

function toLogin() {
  location.assign(`/login?${new URLSearchParams({ next: location.pathname + location.search })}`);
}

/** One JSON call with the session cookie; 401 sends the browser to the login page. */
export async function api(method, path, payload) {
  const init = { method, credentials: 'same-origin', headers: { accept: 'application/json' } };
  if (payload !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(payload);
  }
  const res = await fetch(path, init);
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (res.status === 401) {
    toLogin();
    throw new ApiError(401, 'unauthorized', 'your session ended');
  }
  if (!res.ok) {
    const err = data?.error ?? {};
    throw new ApiError(res.status, err.code ?? 'error', err.message ?? `${res.status} ${res.statusText}`, err.details);
  }
  return data;
}

/** Creates an element: h('a', {href: x, class: 'y'}, 'text', child). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export const $ = (sel, root) => (root ?? document).querySelector(sel);
export const $$ = (sel, root) => [...(root ?? document).querySelectorAll(sel)];

/** A link target we are willing to put into href: http(s) or a local path. */
export function safeHref(link) {
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
export function ago(iso) {
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
export const when = (iso) => (iso ? h('time', { datetime: iso, title: new Date(iso).toLocaleString() }, ago(iso)) : '—');

/** Shows a form result under the form. */
export function say(el, text, kind = 'ok') {
  if (!el) return;
  el.textContent = text;
  el.className = `form-msg ${kind}`;
}

export function errorText(err) {
  if (err instanceof ApiError && Array.isArray(err.details) && err.details.length) {
    return err.details.map((d) => `${d.field}: ${d.message}`).join('; ');
  }
  return err?.message ?? String(err);
}

/** Runs an async action for a button: disabled while it runs, errors shown in `msg`. */
export async function busy(button, msg, fn) {
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

/** 32 random bytes, base64url: for generated secrets. */
export function randomSecret() {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false;
  }
}

// ---- toasts --------------------------------------------------------------------------

const toastArea = $('[data-toasts]');
const TOAST_MS = { info: 6000, success: 6000, warning: 9000, error: 12000 };

export function toast(n) {
  if (!toastArea) return;
  const level = ['info', 'success', 'warning', 'error'].includes(n.level) ? n.level : 'info';
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
  while (toastArea.children.length > 5) toastArea.firstElementChild.remove();
  setTimeout(remove, TOAST_MS[level]);
}

// ---- bell ----------------------------------------------------------------------------

const bellCount = $('[data-bell-count]');
let bellTimer = null;

export function setUnread(count) {
  if (!bellCount) return;
  bellCount.textContent = count > 99 ? '99+' : String(count);
  bellCount.hidden = count === 0;
  bellCount.parentElement?.setAttribute('aria-label', `Notifications, ${count} unread`);
  document.dispatchEvent(new CustomEvent('unread', { detail: count }));
}

/** Re-reads the unread count (debounced: bursts of events cost one request). */
export function refreshUnread() {
  clearTimeout(bellTimer);
  bellTimer = setTimeout(async () => {
    try {
      const page = await api('GET', '/api/notifications?limit=1');
      setUnread(page.unread);
    } catch {
      /* the next event tries again */
    }
  }, 120);
}

// ---- live connection -----------------------------------------------------------------

export const live = new LiveClient();
const connBanner = $('[data-conn-state]');

live.addEventListener('state', (e) => {
  if (connBanner) connBanner.hidden = e.detail !== 'offline';
  document.body.dataset.live = e.detail;
});
live.addEventListener('unauthorized', toLogin);
live.addEventListener('notify', (e) => {
  const { payload, replay } = e.detail;
  if (!replay && payload.action !== 'clear' && payload.toast !== false) toast(payload);
  refreshUnread();
});
live.addEventListener('resumed', (e) => {
  const { frames } = e.detail;
  const shown = frames.filter((f) => f.payload.action !== 'clear' && f.payload.toast !== false && !f.payload.read);
  // a few missed ones one by one; many as one summary
  if (shown.length > 0 && shown.length <= 3) shown.forEach((f) => toast(f.payload));
  else if (shown.length > 3) toast({ title: `${shown.length} new notifications`, message: 'arrived while you were offline', level: 'info', link: '/#notifications' });
  refreshUnread();
});

// Sign out with fetch(): a plain form post under this page's no-referrer policy would carry
// "Origin: null" and be refused as cross-origin.
$('[data-logout]')?.form?.addEventListener('submit', async (e) => {
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
export async function boot(page = null) {
  let since = 0;
  try {
    page ??= await api('GET', '/api/notifications?limit=1');
    setUnread(page.unread);
    since = page.last_seq;
  } catch {
    /* notifications unavailable: the live connection still tries */
  }
  live.start(since);
}

/**
 * A destructive button that asks in place: the first click arms it ("Confirm?"), a second
 * click within 4 s runs `fn`. No modal dialog.
 */
export function confirmButton(button, label, fn) {
  let armed = null;
  const original = button.textContent;
  button.addEventListener('click', async () => {
    if (!armed) {
      button.textContent = label;
      button.classList.add('danger');
      armed = setTimeout(() => {
        armed = null;
        button.textContent = original;
        button.classList.remove('danger');
      }, 4000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    button.textContent = original;
    button.classList.remove('danger');
    button.disabled = true;
    try {
      await fn();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}
