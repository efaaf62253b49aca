// Administration of groups [feature:admin.groups]: permissions from the catalog, rename,
// delete; members (changing them needs feature:admin.users, as the API does).
import type { Schemas } from '../../client/api-types.js';
import { $, api, boot, busy, can, clearOnEdit, confirmButton, control, errorText, explainPattern, h, markInvalid, must, say, submitter, text } from './app.js';
import { grantable, grantedIn, permissionChecks, withUnknown, type CatalogEntry } from './permission-list.js';

type GroupView = Schemas['Group'];
type ChangedGroup = Schemas['ChangedGroup'];
type UserView = Schemas['User'];

const list = must('[data-group-list]');
const editor = must('[data-group-editor]');
const form = must<HTMLFormElement>('[data-group-form]');
const msg = must('[data-msg]', form);
const newForm = must<HTMLFormElement>('[data-new-group]');
const newMsg = must('[data-msg]', newForm);
const addMember = $<HTMLFormElement>('[data-add-member]');
const nameField = control(form, 'name');
const descriptionField = control(form, 'description');
const permissionBox = must('[data-permission-checks]', form);
const checkName = explainPattern(nameField, msg);
explainPattern(control(newForm, 'name'), newMsg);
clearOnEdit(form, msg);
clearOnEdit(newForm, newMsg);
const BUILT_IN = new Set(['INT_ADMIN', 'INT_USER', 'INT_VIEWER']);
let groups: GroupView[] = [];
let catalog: CatalogEntry[] = [];
let users: UserView[] = [];
let current: string | null = null;

function renderList(): void {
  list.replaceChildren(
    ...groups.map((g) =>
      h(
        'li',
        {},
        h(
          'button',
          { type: 'button', 'aria-current': current === g.name ? 'true' : 'false', dataset: { group: g.name }, onclick: () => select(g.name) },
          g.name,
          h('span', { class: 'count' }, ` ${g.members.length}`),
        ),
      ),
    ),
  );
}

function select(name: string | null | undefined): void {
  current = name ?? null;
  const g = groups.find((x) => x.name === name);
  renderList();
  if (!g) {
    editor.hidden = true;
    return;
  }
  editor.hidden = false;
  say(msg, '');
  must('[data-group-title]', form).textContent = g.name;
  nameField.value = g.name;
  nameField.readOnly = BUILT_IN.has(g.name);
  checkName();
  descriptionField.value = g.description ?? '';
  must('[data-delete-group]', form).hidden = BUILT_IN.has(g.name);
  permissionChecks(permissionBox, { name: 'permissions', entries: withUnknown(catalog, g.permissions), granted: g.permissions });
  renderMembers(g);
}

function renderMembers(g: GroupView): void {
  must('[data-members]').replaceChildren(
    ...(g.members.length
      ? g.members.map((username) => {
          const u = users.find((x) => x.username === username);
          return h(
            'li',
            { dataset: { member: username } },
            username,
            can('feature:admin.users') && u
              ? h('button', { type: 'button', class: 'small secondary', 'aria-label': `Remove ${username}`, onclick: () => setMembership(u, false) }, '×')
              : null,
          );
        })
      : [h('li', { class: 'empty' }, 'No members.')]),
  );
  $('[data-user-options]')?.replaceChildren(...users.filter((u) => !g.members.includes(u.username)).map((u) => h('option', { value: u.id }, u.username)));
}

async function setMembership(user: UserView, member: boolean): Promise<void> {
  const group = current;
  if (!group) return;
  const next = member ? [...new Set([...user.groups, group])] : user.groups.filter((x) => x !== group);
  const done = await busy(null, msg, () => api<{ warnings?: string[] }>('PATCH', `/api/users/${user.id}`, { groups: next }));
  if (!done) return;
  await load(group);
  // joining a group that reaches the host starts the account afresh: a password it lost is said
  if (done.warnings?.length) say(msg, done.warnings.join(' '), 'error');
}

async function load(selectName?: string | null): Promise<void> {
  const [g, c, u] = await Promise.all([
    api<{ groups: GroupView[] }>('GET', '/api/groups'),
    api<{ permissions: CatalogEntry[] }>('GET', '/api/permissions'),
    can('feature:admin.users') ? api<{ users: UserView[] }>('GET', '/api/users') : Promise.resolve({ users: [] }),
  ]);
  groups = g.groups;
  catalog = grantable(c.permissions);
  users = u.users;
  renderList();
  select(selectName ?? current ?? groups[0]?.name);
}

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  const group = current;
  if (!group) return;
  const f = new FormData(form);
  const body: { description: string; permissions: string[]; name?: string } = {
    description: text(f, 'description'),
    permissions: grantedIn(permissionBox, 'permissions'),
  };
  if (text(f, 'name') !== group) body.name = text(f, 'name');
  const saved = await busy(submitter(e), msg, () =>
    api<ChangedGroup>('PATCH', `/api/groups/${encodeURIComponent(group)}`, body).catch((err: unknown) => {
      markInvalid(form, err);
      throw err;
    }),
  );
  if (saved) {
    await load(saved.name);
    // members the change first brought to the host and who lost a password: said, not hidden
    if (saved.warnings?.length) say(msg, `Saved, but ${saved.warnings.join(' ')}`, 'error');
    else say(msg, 'Saved.');
  }
});

confirmButton(must<HTMLButtonElement>('[data-delete-group]', form), 'Confirm delete', async () => {
  const group = current;
  if (!group) return;
  const ok = await busy(null, msg, () => api('DELETE', `/api/groups/${encodeURIComponent(group)}`).then(() => true));
  if (ok) {
    current = null;
    await load();
  }
});

newForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const name = text(new FormData(newForm), 'name');
  const created = await busy(submitter(e), newMsg, () => api<GroupView>('POST', '/api/groups', { name, permissions: [] }));
  if (created) {
    newForm.reset();
    await load(created.name);
    say(newMsg, `Created ${created.name}.`);
  }
});

addMember?.addEventListener('submit', async (e) => {
  e.preventDefault();
  const id = text(new FormData(addMember), 'user');
  const u = users.find((x) => x.id === id);
  if (u) await setMembership(u, true);
});

load().catch((err: unknown) => say(newMsg, errorText(err), 'error'));
void boot();
