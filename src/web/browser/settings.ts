// Settings: password, my API keys (token shown once), my sessions; for administrators the
// system API key, the webhook secret and the authentication provider settings.
import { $, api, boot, busy, confirmButton, control, copyText, errorText, h, must, randomSecret, say, submitter, text, texts, when } from './app.js';

// ---- password ------------------------------------------------------------------------------

const pwForm = $<HTMLFormElement>('[data-password-form]');
pwForm?.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(pwForm);
  const msg = $('[data-msg]', pwForm);
  const body = { current_password: text(f, 'current_password'), new_password: text(f, 'new_password') };
  const done = await busy(submitter(e), msg, () => api('POST', `/api/users/${encodeURIComponent(pwForm.dataset.userId ?? '')}/password`, body).then(() => true));
  if (done) {
    say(msg, 'Password changed.');
    pwForm.reset();
  }
});

// ---- API keys and sessions -------------------------------------------------------------------

/** GET /api/me/api-keys: my keys and my web sessions. */
interface KeyView {
  id: string;
  kind: 'key' | 'session';
  label: string;
  prefix: string;
  scopes: string[] | null;
  created_at: string;
  expires_at: string | null;
  last_used_at: string | null;
  /** a session: the one of this browser */
  current?: boolean;
}
interface NewKeyBody {
  label: string;
  scopes?: string[];
  expires_at?: string;
}

const keyForm = $<HTMLFormElement>('[data-key-form]');
const keyMsg = keyForm && $('[data-msg]', keyForm);
const keysBody = $('[data-keys] tbody');
const sessionsBody = $('[data-sessions] tbody');
const newToken = $('[data-new-token]');

const revokeButton = (k: KeyView, label: string, confirm: string) => confirmButton(h('button', { type: 'button', class: 'small secondary', 'data-revoke': k.id }, label), confirm, () => revoke(k.id, k.current === true));

async function loadKeys(): Promise<void> {
  if (!keysBody) return;
  const { keys } = await api<{ keys: KeyView[] }>('GET', '/api/me/api-keys');
  const own = keys.filter((k) => k.kind === 'key');
  const sessions = keys.filter((k) => k.kind === 'session');
  keysBody.replaceChildren(
    ...(own.length
      ? own.map((k) =>
          h(
            'tr',
            { dataset: { keyId: k.id, label: k.label } },
            h('td', {}, k.label),
            h('td', {}, h('code', {}, k.prefix)),
            h('td', {}, k.scopes?.length ? k.scopes.map((s) => h('span', { class: 'pill' }, s)) : h('span', { class: 'note' }, 'all of yours')),
            h('td', {}, when(k.created_at)),
            h('td', {}, k.expires_at ? when(k.expires_at) : 'never'),
            h('td', {}, when(k.last_used_at)),
            h('td', {}, revokeButton(k, 'Revoke', 'Confirm revoke')),
          ),
        )
      : [h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No API keys yet.'))]),
  );
  sessionsBody?.replaceChildren(
    ...sessions.map((s) =>
      h(
        'tr',
        { dataset: { keyId: s.id } },
        h('td', {}, s.label, s.current ? h('span', { class: 'pill on' }, 'this browser') : ''),
        h('td', {}, when(s.created_at)),
        h('td', {}, when(s.expires_at)),
        h('td', {}, when(s.last_used_at)),
        h('td', {}, revokeButton(s, s.current ? 'Sign out' : 'Revoke', 'Confirm')),
      ),
    ),
  );
}

async function revoke(id: string, current: boolean): Promise<void> {
  try {
    await api('DELETE', `/api/me/api-keys/${encodeURIComponent(id)}`);
  } catch (err) {
    say(keyMsg, errorText(err), 'error');
    return;
  }
  if (current) {
    location.assign('/login');
    return;
  }
  await loadKeys();
}

async function loadScopes(): Promise<void> {
  const list = $('[data-scope-list]');
  if (!list) return;
  const access = await api<{ permissions: string[] }>('GET', '/api/me/access');
  list.replaceChildren(...access.permissions.map((p) => h('label', {}, h('input', { type: 'checkbox', name: 'scopes', value: p }), p)));
}

if (keyForm && newToken) {
  const tokenValue = must<HTMLInputElement>('[data-token-value]', newToken);
  const copy = must<HTMLButtonElement>('[data-copy]', newToken);
  keyForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = new FormData(keyForm);
    const body: NewKeyBody = { label: text(f, 'label') };
    const scopes = texts(f, 'scopes');
    if (scopes.length) body.scopes = scopes;
    const days = Number(text(f, 'expires'));
    if (days > 0) body.expires_at = new Date(Date.now() + days * 86_400_000).toISOString();
    const created = await busy(submitter(e), keyMsg, () => api<KeyView & { token: string }>('POST', '/api/me/api-keys', body));
    if (!created) return;
    say(keyMsg, `Key "${created.label}" created.`);
    keyForm.reset();
    tokenValue.value = created.token;
    copy.textContent = 'Copy';
    newToken.hidden = false;
    await loadKeys();
  });
  copy.addEventListener('click', async () => {
    tokenValue.select();
    const ok = await copyText(tokenValue.value);
    copy.textContent = ok ? 'Copied' : 'Press Ctrl+C to copy';
  });
}

// ---- administrators: system key and webhook secret -------------------------------------------

interface SecretState {
  configured: boolean;
  locked: boolean;
}

const capitalised = (s: string) => `${s.charAt(0).toUpperCase()}${s.slice(1)}`;

function secretSection(section: HTMLElement | null, { path, field, label }: { path: string; field: string; label: string }): void {
  if (!section) return;
  const state = must('[data-state]', section);
  const form = must<HTMLFormElement>('form', section);
  const msg = must('[data-msg]', section);
  const input = control(form, field);
  const show = async () => {
    const s = await api<SecretState>('GET', path);
    state.replaceChildren(h('span', { class: `pill ${s.configured ? 'on' : 'off'}` }, s.configured ? 'configured' : 'not set'), s.locked ? ' set in the environment (read-only here)' : '');
    for (const el of form.elements) if (el instanceof HTMLInputElement || el instanceof HTMLButtonElement) el.disabled = s.locked;
  };
  must('[data-generate]', section).addEventListener('click', () => {
    input.value = randomSecret();
    input.type = 'text';
    input.select();
    say(msg, `Copy this ${label} now: it is not shown again after saving.`);
  });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const ok = await busy(submitter(e), msg, () => api('PUT', path, { [field]: input.value }).then(() => true));
    if (ok) {
      say(msg, `${capitalised(label)} saved.`);
      input.value = '';
      await show();
    }
  });
  confirmButton(must<HTMLButtonElement>('[data-clear]', section), 'Confirm clear', async () => {
    const ok = await busy(null, msg, () => api('DELETE', path).then(() => true));
    if (ok) {
      say(msg, `${capitalised(label)} cleared.`);
      await show();
    }
  });
  show().catch((err: unknown) => say(msg, errorText(err), 'error'));
}

secretSection($('[data-system-key]'), { path: '/api/settings/system-api-key', field: 'key', label: 'system key' });
secretSection($('[data-webhook-secret]'), { path: '/api/settings/webhook-secret', field: 'secret', label: 'webhook secret' });

// ---- administrators: authentication providers ------------------------------------------------

/** GET /api/settings/auth, one field. */
interface FieldView {
  value: unknown;
  source: 'env' | 'store' | 'default';
  locked: boolean;
  secret: boolean;
  configured: boolean;
}
interface AuthView {
  settings: Record<string, FieldView>;
  chain: Array<{ id: string; label: string }>;
}
type FieldKind = 'secret' | 'list' | 'mapping' | 'boolean' | 'string';
type FieldControl = HTMLInputElement | HTMLTextAreaElement;

const LISTS = new Set(['auth_providers', 'sso_default_groups']);
let authFields: Record<string, FieldView> = {};

function kindOf(name: string, f: FieldView): FieldKind {
  if (f.secret) return 'secret';
  if (LISTS.has(name) || Array.isArray(f.value)) return 'list';
  if (name.endsWith('_mapping')) return 'mapping';
  if (typeof f.value === 'boolean') return 'boolean';
  return 'string';
}

const listOf = (v: unknown): string[] => (Array.isArray(v) ? v.map(String) : []);
const stringOf = (v: unknown): string => (typeof v === 'string' ? v : v == null ? '' : String(v));
const mappingOf = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {});

function fieldControl(name: string, f: FieldView): HTMLLabelElement {
  const kind = kindOf(name, f);
  const attrs = { name, 'data-kind': kind, readonly: f.locked, disabled: f.locked && kind === 'boolean' };
  let input: FieldControl;
  if (kind === 'boolean') input = h('input', { ...attrs, type: 'checkbox', checked: f.value === true });
  else if (kind === 'mapping') input = h('textarea', { ...attrs, rows: 3, spellcheck: 'false' }, Object.keys(mappingOf(f.value)).length ? JSON.stringify(f.value) : '');
  else if (kind === 'secret') input = h('input', { ...attrs, type: 'password', autocomplete: 'off', placeholder: f.configured ? 'set (unchanged)' : 'not set' });
  else if (kind === 'list') input = h('input', { ...attrs, value: listOf(f.value).join(', '), spellcheck: 'false' });
  else input = h('input', { ...attrs, value: stringOf(f.value), spellcheck: 'false' });
  const source = f.locked ? 'environment (locked)' : f.source === 'store' ? 'saved here' : 'default';
  return h('label', { class: f.locked ? 'locked' : '' }, name.replace(/_/g, ' '), kind === 'boolean' ? ' ' : '', input, h('span', { class: 'src' }, source));
}

/** The changed fields only; throws when a mapping is not valid JSON. */
function readPatch(form: HTMLFormElement): Record<string, unknown> {
  const patch: Record<string, unknown> = {};
  for (const [name, f] of Object.entries(authFields)) {
    if (f.locked) continue;
    const el = control<FieldControl>(form, name);
    const kind = el.dataset.kind as FieldKind;
    if (kind === 'boolean' && el instanceof HTMLInputElement) {
      if (el.checked !== (f.value === true)) patch[name] = el.checked;
    } else if (kind === 'secret') {
      if (el.value) patch[name] = el.value;
    } else if (kind === 'list') {
      const list = el.value.split(',').map((s) => s.trim()).filter(Boolean);
      if (JSON.stringify(list) !== JSON.stringify(listOf(f.value))) patch[name] = list.length ? list : null;
    } else if (kind === 'mapping') {
      const raw = el.value.trim();
      const value: unknown = raw ? JSON.parse(raw) : null;
      if (JSON.stringify(value ?? {}) !== JSON.stringify(f.value ?? {})) patch[name] = value;
    } else {
      const v = el.value.trim();
      if (v !== stringOf(f.value)) patch[name] = v === '' ? null : v;
    }
  }
  return patch;
}

const authSection = $('[data-auth-settings]');
if (authSection) {
  const form = must<HTMLFormElement>('[data-auth-form]', authSection);
  const msg = must('[data-msg]', authSection);
  const loadAuth = async () => {
    const view = await api<AuthView>('GET', '/api/settings/auth');
    authFields = view.settings;
    must('[data-chain]', authSection).textContent = `Sign-in chain: ${view.chain.map((c) => `${c.label} (${c.id})`).join(' → ') || 'empty'}`;
    form.replaceChildren(...Object.entries(authFields).map(([name, f]) => fieldControl(name, f)), h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save provider settings')));
  };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    let patch: Record<string, unknown>;
    try {
      patch = readPatch(form);
    } catch (err) {
      say(msg, `A mapping is not valid JSON: ${errorText(err)}`, 'error');
      return;
    }
    if (!Object.keys(patch).length) {
      say(msg, 'Nothing changed.');
      return;
    }
    const ok = await busy(submitter(e), msg, () => api('PATCH', '/api/settings/auth', patch).then(() => true));
    if (ok) {
      say(msg, 'Saved; the sign-in chain was rebuilt.');
      await loadAuth();
    }
  });
  loadAuth().catch((err: unknown) => say(msg, errorText(err), 'error'));
}

Promise.all([loadKeys(), loadScopes()]).catch((err: unknown) => say(keyMsg, errorText(err), 'error'));
void boot();
