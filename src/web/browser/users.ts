// Administration of users [feature:admin.users]: list, create, edit (groups, extra
// permissions, profile, disabled, password), delete; whether each has a second factor, and
// resetting it (a lost device); a user's API keys and web sessions (a program's key for the bot
// account, revoking a lost one).
import type { Schemas } from '../../client/api-types.js';
import {
  api,
  boot,
  busy,
  clearOnEdit,
  confirmButton,
  control,
  errorText,
  explainPattern,
  h,
  markInvalid,
  me,
  must,
  say,
  submitter,
  text,
  texts,
} from './app.js';
import { keyPanel } from './key-panel.js';
import { grantable, grantedIn, permissionChecks, withUnknown, type CatalogEntry, type Grant } from './permission-list.js';

/** GET /api/users, one user. */
type UserView = Schemas['User'];
type CreatedUser = Schemas['CreatedUser'];

interface UserBody {
  username?: string;
  display_name?: string | null;
  email: string | null;
  groups: string[];
  extra_permissions: string[];
  password?: string;
  disabled?: boolean;
}

const table = must<HTMLTableSectionElement>('[data-users] tbody');
const form = must<HTMLFormElement>('[data-user-form]');
const listMsg = must('[data-list-msg]');
const formMsg = must('[data-msg]', form);
const field = {
  username: control(form, 'username'),
  displayName: control(form, 'display_name'),
  email: control(form, 'email'),
  password: control(form, 'password'),
  disabled: control(form, 'disabled'),
};
const groupBox = must('[data-group-checks]', form);
const permissionBox = must('[data-extra-permissions]', form);
const checkUsername = explainPattern(field.username, formMsg);
clearOnEdit(form, formMsg, listMsg);
let groups: Array<{ name: string; permissions: string[] }> = [];
let catalog: CatalogEntry[] = [];
const describe = (id: string) => catalog.find((e) => e.id === id)?.description;
/** the user being edited, null = a new one */
let editing: UserView | null = null;

// the keys panel shows one user's keys at a time
const keysSection = must('[data-user-keys]');
let keysOf: UserView | null = null;
const keys = keyPanel(keysSection, {
  path: () => `/api/users/${encodeURIComponent(keysOf?.id ?? '')}/api-keys`,
  sessions: must<HTMLElement>('[data-sessions] tbody', keysSection),
  // a key narrows its owner's permissions: the server refuses a scope the owner does not hold, naming it
  scopes: async () => catalog,
  unscoped: 'all of the owner’s',
});

async function openKeys(user: UserView): Promise<void> {
  // the token of a key being created is shown under its owner's name, never another's
  if (keys.creating) return say(listMsg, `Wait for the key of ${keysOf?.username ?? 'this user'} to be created.`, 'error');
  keysOf = user;
  must('[data-user-keys-title]', keysSection).textContent = `API keys of ${user.username}`;
  keysSection.hidden = false;
  await keys.load();
  keysSection.scrollIntoView({ block: 'nearest' });
}
must('[data-close-keys]', keysSection).addEventListener('click', () => {
  if (keys.creating) return;
  keys.clear();
  keysSection.hidden = true;
  keysOf = null;
});

function groupChecks(selected: string[]): void {
  groupBox.replaceChildren(
    ...groups.map((g) => h('label', {}, h('input', { type: 'checkbox', name: 'groups', value: g.name, checked: selected.includes(g.name) }), g.name)),
  );
}

/** Extra permissions; what the ticked groups already give shows as granted "via group …". */
function permissionList(extra: string[]): void {
  const selected = new Set(texts(new FormData(form), 'groups'));
  const inherited: Grant[] = groups.filter((g) => selected.has(g.name)).flatMap((g) => g.permissions.map((id) => ({ id, via: `group ${g.name}` })));
  permissionChecks(permissionBox, { name: 'extra_permissions', entries: withUnknown(catalog, extra), granted: extra, inherited });
}
groupBox.addEventListener('change', () => permissionList(grantedIn(permissionBox, 'extra_permissions')));

function openForm(user: UserView | null): void {
  editing = user;
  form.hidden = false;
  form.reset();
  say(formMsg, '');
  must('[data-form-title]', form).textContent = user ? `Edit ${user.username}` : 'New user';
  field.username.value = user?.username ?? '';
  field.username.readOnly = Boolean(user);
  checkUsername();
  field.displayName.value = user?.display_name ?? '';
  field.email.value = user?.email ?? '';
  field.password.placeholder = user ? 'leave empty to keep' : 'empty: no password (single sign-on only)';
  field.disabled.checked = Boolean(user?.disabled);
  groupChecks(user?.groups ?? ['INT_VIEWER']);
  permissionList(user?.extra_permissions ?? []);
  (user ? field.displayName : field.username).focus();
}

function row(u: UserView): HTMLTableRowElement {
  const edit = h('button', { type: 'button', class: 'small secondary', onclick: () => openForm(u) }, 'Edit');
  const keyList = h('button', { type: 'button', class: 'small secondary', 'data-user-keys-of': u.username, onclick: () => void openKeys(u) }, 'Keys');
  const del = confirmButton(h('button', { type: 'button', class: 'small secondary' }, 'Delete'), 'Confirm delete', async () => {
    const ok = await busy(null, listMsg, () => api('DELETE', `/api/users/${u.id}`).then(() => true));
    if (ok) {
      say(listMsg, `Deleted ${u.username}.`);
      if (keysOf?.id === u.id) must('[data-close-keys]', keysSection).click();
      await load();
    }
  });
  // every factor and recovery code goes, and the user's sessions end: they sign in with the password and enrol again
  // one's own factors go one by one on the account page: the reset is for another account
  const reset =
    u.mfa && u.id !== me.userId
      ? confirmButton(h('button', { type: 'button', class: 'small secondary', 'data-reset-mfa': '' }, 'Reset second factor'), 'Confirm reset', async () => {
          const ok = await busy(null, listMsg, () => api('DELETE', `/api/users/${u.id}/mfa`).then(() => true));
          if (ok) {
            say(listMsg, `Reset the second factor of ${u.username}: their sessions ended; they sign in with the password and enrol again.`);
            if (keysOf?.id === u.id) await keys.refresh();
            await load();
          }
        })
      : null;
  return h(
    'tr',
    { dataset: { username: u.username } },
    h(
      'td',
      {},
      u.username,
      ' ',
      u.roles.map((r) => h('span', { class: 'pill' }, r)),
    ),
    h('td', {}, u.display_name ?? ''),
    h('td', {}, u.email ?? ''),
    h(
      'td',
      {},
      u.groups.map((g) => h('span', { class: 'pill' }, g)),
      u.extra_permissions.map((p) => h('span', { class: 'pill', title: `extra permission: ${describe(p) ?? p}` }, `+${p}`)),
    ),
    h(
      'td',
      {},
      u.identities.map((i) => h('span', { class: 'pill', title: i.provider_user_id }, i.provider)),
    ),
    h('td', {}, h('span', { class: `pill ${u.disabled ? 'off' : 'on'}` }, u.disabled ? 'disabled' : 'active')),
    h('td', { 'data-mfa': u.mfa ? 'on' : 'off' }, u.mfa ? h('span', { class: 'pill on' }, 'on') : h('span', { class: 'note' }, 'none')),
    h('td', {}, edit, ' ', keyList, ' ', del, reset ? [' ', reset] : null),
  );
}

async function load(): Promise<void> {
  const [{ users }, g, c] = await Promise.all([
    api<{ users: UserView[] }>('GET', '/api/users'),
    api<{ groups: Array<{ name: string; permissions: string[] }> }>('GET', '/api/groups').catch(() => ({ groups: [] })),
    api<{ permissions: CatalogEntry[] }>('GET', '/api/permissions'),
  ]);
  groups = g.groups;
  catalog = grantable(c.permissions);
  table.replaceChildren(...users.map(row));
}

must('[data-new-user]').addEventListener('click', () => openForm(null));
must('[data-cancel]', form).addEventListener('click', () => {
  form.hidden = true;
});

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(form);
  const body: UserBody = {
    display_name: text(f, 'display_name') || null,
    email: text(f, 'email') || null,
    groups: texts(f, 'groups'),
    extra_permissions: grantedIn(permissionBox, 'extra_permissions'),
  };
  if (text(f, 'password')) body.password = text(f, 'password');
  let done: CreatedUser | undefined;
  const target = editing;
  const send = (method: string, path: string) => () =>
    api<CreatedUser>(method, path, body).catch((err: unknown) => {
      markInvalid(form, err);
      throw err;
    });
  if (target) {
    body.disabled = field.disabled.checked;
    done = await busy(submitter(e), formMsg, send('PATCH', `/api/users/${target.id}`));
  } else {
    body.username = text(f, 'username');
    if (body.display_name === null) delete body.display_name;
    done = await busy(submitter(e), formMsg, send('POST', '/api/users'));
    if (done && field.disabled.checked) await api('PATCH', `/api/users/${done.id}`, { disabled: true }).catch(() => undefined);
  }
  if (done) {
    form.hidden = true;
    // an account nobody can sign in to yet (no password, and no single sign-on that reaches it) is said, not hidden
    const warnings = done.warnings ?? [];
    if (warnings.length) say(listMsg, `Saved, but ${warnings.join(' ')}. Edit the user to give them one.`, 'error');
    else say(listMsg, `Saved ${done.username}.`);
    // disabling an account ends its keys and sessions: an open list of them shows it
    if (keysOf?.id === done.id) await keys.refresh();
    await load();
  }
});

load().catch((err: unknown) => say(listMsg, errorText(err), 'error'));
void boot();
