// Settings: password, my API keys (token shown once), my sessions; for administrators the
// system API key, the webhook secret and the authentication provider settings.
import { $, api, boot, busy, confirmButton, copyText, errorText, h, randomSecret, say, when } from './app.js';

// ---- password ------------------------------------------------------------------------------

const pwForm = $('[data-password-form]');
pwForm?.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(pwForm);
  const msg = $('[data-msg]', pwForm);
  const done = await busy(e.submitter, msg, () =>
    api('POST', `/api/users/${encodeURIComponent(pwForm.dataset.userId)}/password`, { current_password: f.get('current_password'), new_password: f.get('new_password') }).then(() => true),
  );
  if (done) {
    say(msg, 'Password changed.');
    pwForm.reset();
  }
});

// ---- API keys and sessions -------------------------------------------------------------------

const keyForm = $('[data-key-form]');
const keysBody = $('[data-keys] tbody');
const sessionsBody = $('[data-sessions] tbody');
const newToken = $('[data-new-token]');

async function loadKeys() {
  if (!keysBody) return;
  const { keys } = await api('GET', '/api/me/api-keys');
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
            h('td', {}, confirmButton(h('button', { type: 'button', class: 'small secondary', 'data-revoke': k.id }, 'Revoke'), 'Confirm revoke', () => revoke(k.id, false))),
          ),
        )
      : [h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No API keys yet.'))]),
  );
  sessionsBody.replaceChildren(
    ...sessions.map((s) =>
      h(
        'tr',
        { dataset: { keyId: s.id } },
        h('td', {}, s.label, s.current ? h('span', { class: 'pill on' }, 'this browser') : ''),
        h('td', {}, when(s.created_at)),
        h('td', {}, when(s.expires_at)),
        h('td', {}, when(s.last_used_at)),
        h('td', {}, confirmButton(h('button', { type: 'button', class: 'small secondary', 'data-revoke': s.id }, s.current ? 'Sign out' : 'Revoke'), 'Confirm', () => revoke(s.id, s.current))),
      ),
    ),
  );
}

async function revoke(id, current) {
  try {
    await api('DELETE', `/api/me/api-keys/${encodeURIComponent(id)}`);
  } catch (err) {
    say($('[data-msg]', keyForm), errorText(err), 'error');
    return;
  }
  if (current) {
    location.assign('/login');
    return;
  }
  await loadKeys();
}

async function loadScopes() {
  const list = $('[data-scope-list]');
  if (!list) return;
  const access = await api('GET', '/api/me/access');
  list.replaceChildren(...access.permissions.map((p) => h('label', {}, h('input', { type: 'checkbox', name: 'scopes', value: p }), p)));
}

keyForm?.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(keyForm);
  const msg = $('[data-msg]', keyForm);
  const body = { label: f.get('label') };
  const scopes = f.getAll('scopes');
  if (scopes.length) body.scopes = scopes;
  const days = Number(f.get('expires'));
  if (days > 0) body.expires_at = new Date(Date.now() + days * 86_400_000).toISOString();
  const created = await busy(e.submitter, msg, () => api('POST', '/api/me/api-keys', body));
  if (!created) return;
  say(msg, `Key "${created.label}" created.`);
  keyForm.reset();
  $('[data-token-value]', newToken).value = created.token;
  $('[data-copy]', newToken).textContent = 'Copy';
  newToken.hidden = false;
  await loadKeys();
});

$('[data-copy]', newToken)?.addEventListener('click', async (e) => {
  const button = e.currentTarget;
  const input = $('[data-token-value]', newToken);
  input.select();
  const ok = await copyText(input.value);
  button.textContent = ok ? 'Copied' : 'Press Ctrl+C to copy';
});

// ---- administrators: system key and webhook secret -------------------------------------------

function secretSection(section, { path, field, label }) {
  if (!section) return;
  const state = $('[data-state]', section);
  const form = $('form', section);
  const msg = $('[data-msg]', section);
  const input = form.elements[field];
  const show = async () => {
    const s = await api('GET', path);
    state.replaceChildren(h('span', { class: `pill ${s.configured ? 'on' : 'off'}` }, s.configured ? 'configured' : 'not set'), s.locked ? ' set in the environment (read-only here)' : '');
    for (const el of form.elements) el.disabled = s.locked;
  };
  $('[data-generate]', section).addEventListener('click', () => {
    input.value = randomSecret();
    input.type = 'text';
    input.select();
    say(msg, `Copy this ${label} now: it is not shown again after saving.`);
  });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const ok = await busy(e.submitter, msg, () => api('PUT', path, { [field]: input.value }).then(() => true));
    if (ok) {
      say(msg, `${label[0].toUpperCase()}${label.slice(1)} saved.`);
      input.value = '';
      await show();
    }
  });
  confirmButton($('[data-clear]', section), 'Confirm clear', async () => {
    const ok = await busy(null, msg, () => api('DELETE', path).then(() => true));
    if (ok) {
      say(msg, `${label[0].toUpperCase()}${label.slice(1)} cleared.`);
      await show();
    }
  });
  show().catch((err) => say(msg, errorText(err), 'error'));
}

secretSection($('[data-system-key]'), { path: '/api/settings/system-api-key', field: 'key', label: 'system key' });
secretSection($('[data-webhook-secret]'), { path: '/api/settings/webhook-secret', field: 'secret', label: 'webhook secret' });

// ---- administrators: authentication providers ------------------------------------------------

const authSection = $('[data-auth-settings]');
const LISTS = new Set(['auth_providers', 'sso_default_groups']);
let authFields = {};

function kindOf(name, f) {
  if (f.secret) return 'secret';
  if (LISTS.has(name) || Array.isArray(f.value)) return 'list';
  if (name.endsWith('_mapping')) return 'mapping';
  if (typeof f.value === 'boolean') return 'boolean';
  return 'string';
}

function fieldControl(name, f) {
  const kind = kindOf(name, f);
  const attrs = { name, 'data-kind': kind, readonly: f.locked, disabled: f.locked && kind === 'boolean' };
  let control;
  if (kind === 'boolean') control = h('input', { ...attrs, type: 'checkbox', checked: f.value === true });
  else if (kind === 'mapping') control = h('textarea', { ...attrs, rows: 3, spellcheck: 'false' }, f.value && Object.keys(f.value).length ? JSON.stringify(f.value) : '');
  else if (kind === 'secret') control = h('input', { ...attrs, type: 'password', autocomplete: 'off', placeholder: f.configured ? 'set (unchanged)' : 'not set' });
  else if (kind === 'list') control = h('input', { ...attrs, value: (f.value ?? []).join(', '), spellcheck: 'false' });
  else control = h('input', { ...attrs, value: f.value ?? '', spellcheck: 'false' });
  const source = f.locked ? 'environment (locked)' : f.source === 'store' ? 'saved here' : 'default';
  return h('label', { class: f.locked ? 'locked' : '' }, name.replace(/_/g, ' '), kind === 'boolean' ? ' ' : '', control, h('span', { class: 'src' }, source));
}

function readPatch(form) {
  const patch = {};
  for (const [name, f] of Object.entries(authFields)) {
    if (f.locked) continue;
    const el = form.elements[name];
    const kind = el.dataset.kind;
    if (kind === 'boolean') {
      if (el.checked !== (f.value === true)) patch[name] = el.checked;
    } else if (kind === 'secret') {
      if (el.value) patch[name] = el.value;
    } else if (kind === 'list') {
      const list = el.value.split(',').map((s) => s.trim()).filter(Boolean);
      if (JSON.stringify(list) !== JSON.stringify(f.value ?? [])) patch[name] = list.length ? list : null;
    } else if (kind === 'mapping') {
      const text = el.value.trim();
      const value = text ? JSON.parse(text) : null;
      if (JSON.stringify(value ?? {}) !== JSON.stringify(f.value ?? {})) patch[name] = value;
    } else {
      const v = el.value.trim();
      if (v !== (f.value ?? '')) patch[name] = v === '' ? null : v;
    }
  }
  return patch;
}

async function loadAuth() {
  const view = await api('GET', '/api/settings/auth');
  authFields = view.settings;
  $('[data-chain]', authSection).textContent = `Sign-in chain: ${view.chain.map((c) => `${c.label} (${c.id})`).join(' → ') || 'empty'}`;
  const form = $('[data-auth-form]', authSection);
  form.replaceChildren(...Object.entries(authFields).map(([name, f]) => fieldControl(name, f)), h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save provider settings')));
}

if (authSection) {
  const form = $('[data-auth-form]', authSection);
  const msg = $('[data-msg]', authSection);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    let patch;
    try {
      patch = readPatch(form);
    } catch (err) {
      say(msg, `A mapping is not valid JSON: ${err.message}`, 'error');
      return;
    }
    if (!Object.keys(patch).length) {
      say(msg, 'Nothing changed.');
      return;
    }
    const ok = await busy(e.submitter, msg, () => api('PATCH', '/api/settings/auth', patch).then(() => true));
    if (ok) {
      say(msg, 'Saved; the sign-in chain was rebuilt.');
      await loadAuth();
    }
  });
  loadAuth().catch((err) => say(msg, errorText(err), 'error'));
}

Promise.all([loadKeys(), loadScopes()]).catch((err) => say($('[data-msg]', keyForm), errorText(err), 'error'));
boot();
