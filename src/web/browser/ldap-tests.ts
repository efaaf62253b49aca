// The LDAP part of the authentication settings panel (auth-form.ts): the settings' warnings
// (certificate checks off, a plain ldap:// server) and the directory's two tests, test connection
// and test login (POST /api/settings/auth/ldap/test-connection and /test-login), run with the
// form's unsaved changes laid over the saved settings (nothing is saved). Test login may ask for
// the second factor again (step-up: the shared api() opens the dialog).
import type { Answer } from '../../client/api-types.js';
import { api, busy, errorText, h, say } from './app.js';

type AuthView = Answer<'/api/settings/auth', 'get'>;
type ConnectionTest = Answer<'/api/settings/auth/ldap/test-connection', 'post'>;
type LoginTest = Answer<'/api/settings/auth/ldap/test-login', 'post'>;

const SERVER: Record<string, string> = { active_directory: 'Active Directory', openldap: 'OpenLDAP', unknown: 'an LDAP server' };

const OUTCOME: Record<string, string> = {
  signed_in: 'would sign in',
  invalid_credentials: 'would not sign in: unknown name or wrong password',
  account_disabled: 'would not sign in: the account is disabled in the directory',
  account_expired: 'would not sign in: the account has expired in the directory',
  password_expired: 'would not sign in: the password has expired',
  password_must_change: 'would not sign in: the password must be changed first',
  logon_restricted: 'would not sign in: not allowed at this time or from here',
  account_locked: 'would not sign in: the account is locked in the directory',
  directory_unavailable: 'could not be checked: the directory is unavailable',
};

function connectionLines(t: ConnectionTest): string[] {
  const lines = t.ok
    ? [
        `Connected to ${t.url} (${SERVER[t.server ?? 'unknown'] ?? t.server}${t.vendor ? `, ${t.vendor}` : ''}) in ${t.ms} ms: the service account bound and the base DN was found.`,
      ]
    : [`Failed after ${t.ms} ms: ${t.reason}`];
  for (const f of t.failures ?? []) lines.push(`Skipped ${f.url}: ${f.reason}`);
  return lines;
}

function loginLines(t: LoginTest): string[] {
  const lines = [`${OUTCOME[t.outcome ?? ''] ?? t.outcome} (${t.ms} ms${t.url ? `, ${t.url}` : ''})`];
  if (t.reason) lines.push(t.reason);
  if (t.would_sign_in) {
    lines.push(`Local user name: ${t.username}; entry: ${t.dn}`);
    lines.push(
      t.groups
        ? `Local groups from the mapping: ${t.groups.length ? t.groups.join(', ') : 'none'}`
        : 'No group mapping: groups are not managed by the directory.',
    );
    if (t.directory_groups?.length) lines.push(`Directory groups: ${t.directory_groups.join('; ')}`);
  }
  if (!t.in_chain) lines.push('Note: LDAP is not in the sign-in chain of these settings, so no sign-in reaches it.');
  return lines;
}

const show = (out: HTMLElement, lines: string[], ok: boolean): void => {
  out.className = `form-msg ${ok ? 'ok' : 'error'}`;
  out.replaceChildren(...lines.map((l) => h('div', {}, l)));
};

/**
 * The LDAP checks under the settings form: `warnings` of the saved settings, and the tests run
 * with `unsaved()` (the form's changes; throws with a message when the form cannot be read).
 */
export function ldapChecks(view: AuthView, unsaved: () => Record<string, unknown>): HTMLElement {
  const warnings = view.warnings ?? [];
  const out = h('div', { class: 'form-msg', role: 'status', dataset: { ldapResult: '' } });
  const username = h('input', { name: 'ldap_test_username', autocomplete: 'off', spellcheck: 'false', placeholder: 'user name' });
  const password = h('input', { name: 'ldap_test_password', type: 'password', autocomplete: 'new-password', placeholder: 'password' });
  const settings = (): Record<string, unknown> | null => {
    try {
      const patch = unsaved();
      return Object.keys(patch).length ? { settings: patch } : {};
    } catch (err) {
      say(out, errorText(err), 'error');
      return null;
    }
  };
  const connect = h('button', { type: 'button', dataset: { ldapTest: 'connection' } }, 'Test connection');
  connect.addEventListener('click', async () => {
    const body = settings();
    if (!body) return;
    await busy(connect, null, () =>
      api<ConnectionTest>('POST', '/api/settings/auth/ldap/test-connection', body).then(
        (t) => show(out, connectionLines(t), t.ok === true),
        (err: unknown) => say(out, errorText(err), 'error'),
      ),
    );
  });
  const login = h('button', { type: 'button', dataset: { ldapTest: 'login' } }, 'Test login');
  login.addEventListener('click', async () => {
    const body = settings();
    if (!body) return;
    if (!username.value.trim() || !password.value) {
      say(out, 'Enter a user name and a password to test.', 'error');
      return;
    }
    await busy(login, null, () =>
      api<LoginTest>('POST', '/api/settings/auth/ldap/test-login', { ...body, username: username.value.trim(), password: password.value }).then(
        (t) => show(out, loginLines(t), t.would_sign_in === true),
        (err: unknown) => say(out, errorText(err), 'error'),
      ),
    );
    password.value = '';
  });
  return h(
    'fieldset',
    { class: 'stack', dataset: { ldapChecks: '' } },
    h('legend', {}, 'Directory (LDAP) checks'),
    warnings.length ? h('ul', { class: 'error', dataset: { ldapWarnings: '' } }, ...warnings.map((w) => h('li', {}, w.message))) : h('span', { hidden: true }),
    h(
      'p',
      { class: 'note' },
      'The tests use the changes in the form above, if any, without saving them. Test login signs nobody in and counts toward no lockout.',
    ),
    h('div', { class: 'actions' }, connect),
    h('div', { class: 'actions' }, username, password, login),
    out,
  );
}
