// One account's API keys and web sessions: the account page's own (GET /api/me/api-keys) and,
// in the users administration, a user's (GET /api/users/:id/api-keys). The markup is
// keyFormAndList() of src/web/pages-keys.ts with a sessions table beside it.
import type { RequestBody, Schemas } from '../../client/api-types.js';
import { $, api, busy, clearOnEdit, confirmButton, copyText, errorText, h, must, say, submitter, text, texts, when } from './app.js';
import { permissionText, type CatalogEntry } from './permission-list.js';

/** A key or session as either list answers it; `current` (only in one's own list) marks this browser's session. */
type KeyView = Schemas['ApiKey'] & { current?: boolean };
type NewKeyBody = RequestBody<'/api/me/api-keys', 'post'>;

export interface KeyPanelOptions {
  /** the collection: `/api/me/api-keys`, or `/api/users/:id/api-keys` of the user shown now */
  path: () => string;
  /** the permissions a key may be scoped to, with their descriptions */
  scopes: () => Promise<CatalogEntry[]>;
  /** the sessions table's body, where the page has one */
  sessions: HTMLElement | null;
  /** what a key without scopes may do, in the list: "all of yours" */
  unscoped: string;
}

export interface KeyPanel {
  /** a key is being created: its token is about to be shown here (the panel must not change owner meanwhile) */
  readonly creating: boolean;
  /** no token on screen or in the page any more, the form emptied */
  clear(): void;
  /** a fresh panel: cleared, the lists and the scopes loaded */
  load(): Promise<void>;
  /** the lists loaded again (after something else revoked keys) */
  refresh(): Promise<void>;
}

/** Fills and drives the key form and lists under `root`; errors show in the form's message. */
export function keyPanel(root: HTMLElement, opts: KeyPanelOptions): KeyPanel {
  const form = must<HTMLFormElement>('[data-key-form]', root);
  const msg = must('[data-msg]', form);
  const keysBody = must('[data-keys] tbody', root);
  const newToken = must('[data-new-token]', root);
  const tokenValue = must<HTMLInputElement>('[data-token-value]', newToken);
  const copy = must<HTMLButtonElement>('[data-copy]', newToken);
  const scopeList = must('[data-scope-list]', form);
  const item = (id: string) => `${opts.path()}/${encodeURIComponent(id)}`;

  const revokeButton = (k: KeyView, label: string, confirm: string) =>
    confirmButton(h('button', { type: 'button', class: 'small secondary', 'data-revoke': k.id }, label), confirm, () => revoke(k));

  async function revoke(k: KeyView): Promise<void> {
    try {
      await api('DELETE', item(k.id));
    } catch (err) {
      say(msg, errorText(err), 'error');
      return;
    }
    // one's own session in this browser: signed out
    if (k.current) return location.assign('/login');
    await loadKeys();
  }

  async function loadKeys(): Promise<void> {
    const path = opts.path();
    const { keys } = await api<{ keys: KeyView[] }>('GET', path);
    // the panel was turned to another owner meanwhile: that owner's answer draws it
    if (opts.path() !== path) return;
    const own = keys.filter((k) => k.kind === 'key');
    keysBody.replaceChildren(
      ...(own.length
        ? own.map((k) =>
            h(
              'tr',
              { dataset: { keyId: k.id, label: k.label } },
              h('td', {}, k.label),
              h('td', {}, h('code', {}, k.prefix)),
              h('td', {}, k.scopes?.length ? k.scopes.map((s) => h('span', { class: 'pill' }, s)) : h('span', { class: 'note' }, opts.unscoped)),
              h('td', {}, when(k.created_at)),
              h('td', {}, k.expires_at ? when(k.expires_at) : 'never'),
              h('td', {}, when(k.last_used_at)),
              h('td', {}, revokeButton(k, 'Revoke', 'Confirm revoke')),
            ),
          )
        : [h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No API keys yet.'))]),
    );
    const sessions = keys.filter((k) => k.kind === 'session');
    opts.sessions?.replaceChildren(
      ...(sessions.length
        ? sessions.map((s) =>
            h(
              'tr',
              { dataset: { keyId: s.id } },
              h('td', {}, s.label, s.current ? [' ', h('span', { class: 'pill on' }, 'this browser')] : ''),
              h('td', {}, when(s.created_at)),
              h('td', {}, when(s.expires_at)),
              h('td', {}, when(s.last_used_at)),
              h('td', {}, revokeButton(s, s.current ? 'Sign out' : 'Revoke', 'Confirm')),
            ),
          )
        : [h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No web sessions.'))]),
    );
  }

  async function loadScopes(): Promise<void> {
    const entries = await opts.scopes();
    scopeList.replaceChildren(
      ...entries.map((e) =>
        h('label', { class: 'perm', title: e.description }, h('input', { type: 'checkbox', name: 'scopes', value: e.id }), permissionText(e)),
      ),
    );
  }

  let creating = false;
  const clear = () => {
    form.reset();
    say(msg, '');
    newToken.hidden = true;
    tokenValue.value = '';
  };

  clearOnEdit(form, msg);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const body: NewKeyBody = { label: text(f, 'label') };
    const scopes = texts(f, 'scopes');
    if (scopes.length) body.scopes = scopes;
    const days = Number(text(f, 'expires'));
    if (days > 0) body.expires_at = new Date(Date.now() + days * 86_400_000).toISOString();
    creating = true;
    const created = await busy(submitter(e), msg, () => api<KeyView & { token: string }>('POST', opts.path(), body)).finally(() => (creating = false));
    if (!created) return;
    say(msg, `Key "${created.label}" created.`);
    form.reset();
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

  return {
    get creating() {
      return creating;
    },
    clear,
    async load() {
      clear();
      await Promise.all([loadKeys(), loadScopes()]).catch((err: unknown) => say(msg, errorText(err), 'error'));
    },
    refresh: () => loadKeys().catch((err: unknown) => say(msg, errorText(err), 'error')),
  };
}

/** The section a key panel is in, if the page has one. */
export const keySection = (): HTMLElement | null => $<HTMLFormElement>('[data-key-form]')?.closest<HTMLElement>('section') ?? null;
