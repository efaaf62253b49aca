// The account page: password, my second factors (Security, security.ts), my API keys (token shown once), my sessions.
import type { Answer, RequestBody } from '../../client/api-types.js';
import { $, api, boot, busy, clearOnEdit, confirmButton, copyText, errorText, h, must, say, submitter, text, texts, when } from './app.js';
import { permissionText, type CatalogEntry } from './permission-list.js';
import { securityPanel } from './security.js';

const security = $('[data-security]');
// revoking the keys issued before the first factor there changes the list of keys below
if (security) securityPanel(security, () => void loadKeys().catch((err: unknown) => say(keyMsg, errorText(err), 'error')));

// ---- password ------------------------------------------------------------------------------

const pwForm = $<HTMLFormElement>('[data-password-form]');
if (pwForm) clearOnEdit(pwForm, $('[data-msg]', pwForm));
pwForm?.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(pwForm);
  const msg = $('[data-msg]', pwForm);
  const body = { current_password: text(f, 'current_password'), new_password: text(f, 'new_password') };
  const done = await busy(submitter(e), msg, () =>
    api('POST', `/api/users/${encodeURIComponent(pwForm.dataset.userId ?? '')}/password`, body).then(() => true),
  );
  if (done) {
    say(msg, 'Password changed.');
    pwForm.reset();
  }
});

// ---- API keys and sessions -------------------------------------------------------------------

/** GET /api/me/api-keys: my keys and my web sessions. */
type KeyView = Answer<'/api/me/api-keys', 'get'>['keys'][number];
type NewKeyBody = RequestBody<'/api/me/api-keys', 'post'>;

const keyForm = $<HTMLFormElement>('[data-key-form]');
const keyMsg = keyForm && $('[data-msg]', keyForm);
const keysBody = $('[data-keys] tbody');
const sessionsBody = $('[data-sessions] tbody');
const newToken = $('[data-new-token]');

const revokeButton = (k: KeyView, label: string, confirm: string) =>
  confirmButton(h('button', { type: 'button', class: 'small secondary', 'data-revoke': k.id }, label), confirm, () => revoke(k.id, k.current === true));

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
        h('td', {}, s.label, s.current ? [' ', h('span', { class: 'pill on' }, 'this browser')] : ''),
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

/** My effective access, each permission with its description: the scopes a key may take. */
async function loadScopes(): Promise<void> {
  const list = $('[data-scope-list]');
  if (!list) return;
  const [access, catalog] = await Promise.all([
    api<{ permissions: string[] }>('GET', '/api/me/access'),
    api<{ permissions: CatalogEntry[] }>('GET', '/api/permissions'),
  ]);
  const describe = new Map(catalog.permissions.map((e) => [e.id, e.description]));
  list.replaceChildren(
    ...access.permissions.map((id) =>
      h(
        'label',
        { class: 'perm', title: describe.get(id) ?? '' },
        h('input', { type: 'checkbox', name: 'scopes', value: id }),
        permissionText({ id, description: describe.get(id) ?? '' }),
      ),
    ),
  );
}

if (keyForm && newToken) {
  clearOnEdit(keyForm, keyMsg);
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

Promise.all([loadKeys(), loadScopes()]).catch((err: unknown) => say(keyMsg, errorText(err), 'error'));
void boot();
