// Administration of groups [feature:admin.groups]: permissions from the catalog, rename,
// delete; members (changing them needs feature:admin.users, as the API does).
import { $, api, boot, busy, can, confirmButton, control, errorText, h, must, say, submitter, text, texts } from './app.js';

/** GET /api/groups, one group. */
interface GroupView {
  name: string;
  description: string | null;
  permissions: string[];
  /** usernames */
  members: string[];
}
interface CatalogEntry {
  id: string;
  description: string;
}
interface UserView {
  id: string;
  username: string;
  groups: string[];
}

const list = must('[data-group-list]');
const editor = must('[data-group-editor]');
const form = must<HTMLFormElement>('[data-group-form]');
const msg = must('[data-msg]', form);
const newForm = must<HTMLFormElement>('[data-new-group]');
const newMsg = must('[data-msg]', newForm);
const addMember = $<HTMLFormElement>('[data-add-member]');
const nameField = control(form, 'name');
const descriptionField = control(form, 'description');
const BUILT_IN = new Set(['INT_ADMIN', 'INT_USER', 'INT_VIEWER']);
let groups: GroupView[] = [];
let catalog: CatalogEntry[] = [];
let users: UserView[] = [];
let current: string | null = null;

/** Permission ids by namespace: feature, api, route, socket, plugin:<id>. */
function namespaces(entries: CatalogEntry[]): Map<string, CatalogEntry[]> {
  const out = new Map<string, CatalogEntry[]>();
  for (const e of entries) {
    const ns = e.id.startsWith('plugin:') ? e.id.split(':').slice(0, 2).join(':') : e.id.split(':')[0]!;
    const items = out.get(ns) ?? [];
    items.push(e);
    out.set(ns, items);
  }
  return out;
}

function renderList(): void {
  list.replaceChildren(
    ...groups.map((g) =>
      h('li', {}, h('button', { type: 'button', 'aria-current': current === g.name ? 'true' : 'false', dataset: { group: g.name }, onclick: () => select(g.name) }, g.name, h('span', { class: 'count' }, ` ${g.members.length}`))),
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
  descriptionField.value = g.description ?? '';
  must('[data-delete-group]', form).hidden = BUILT_IN.has(g.name);
  const granted = new Set(g.permissions);
  const known = new Set(catalog.map((e) => e.id));
  // grants the catalog does not list (e.g. of a removed plugin) stay visible and can be removed
  const entries = [...catalog, ...g.permissions.filter((p) => !known.has(p)).map((id) => ({ id, description: 'not in the catalog' }))];
  must('[data-permission-checks]', form).replaceChildren(
    ...[...namespaces(entries)].map(([ns, items]) =>
      h('div', {}, h('h4', {}, ns), h('div', { class: 'checks' }, items.map((e) => h('label', { title: e.description }, h('input', { type: 'checkbox', name: 'permissions', value: e.id, checked: granted.has(e.id) }), e.id)))),
    ),
  );
  renderMembers(g);
}

function renderMembers(g: GroupView): void {
  must('[data-members]').replaceChildren(
    ...(g.members.length
      ? g.members.map((username) => {
          const u = users.find((x) => x.username === username);
          return h('li', { dataset: { member: username } }, username, can('feature:admin.users') && u ? h('button', { type: 'button', class: 'small secondary', 'aria-label': `Remove ${username}`, onclick: () => setMembership(u, false) }, '×') : null);
        })
      : [h('li', { class: 'empty' }, 'No members.')]),
  );
  $('[data-user-options]')?.replaceChildren(...users.filter((u) => !g.members.includes(u.username)).map((u) => h('option', { value: u.id }, u.username)));
}

async function setMembership(user: UserView, member: boolean): Promise<void> {
  const group = current;
  if (!group) return;
  const next = member ? [...new Set([...user.groups, group])] : user.groups.filter((x) => x !== group);
  const ok = await busy(null, msg, () => api('PATCH', `/api/users/${user.id}`, { groups: next }).then(() => true));
  if (ok) await load(group);
}

async function load(selectName?: string | null): Promise<void> {
  const [g, c, u] = await Promise.all([
    api<{ groups: GroupView[] }>('GET', '/api/groups'),
    api<{ permissions: CatalogEntry[] }>('GET', '/api/permissions'),
    can('feature:admin.users') ? api<{ users: UserView[] }>('GET', '/api/users') : Promise.resolve({ users: [] }),
  ]);
  groups = g.groups;
  catalog = c.permissions.filter((e) => !e.id.endsWith(':*') || e.id === 'feature:*');
  users = u.users;
  renderList();
  select(selectName ?? current ?? groups[0]?.name);
}

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  const group = current;
  if (!group) return;
  const f = new FormData(form);
  const body: { description: string; permissions: string[]; name?: string } = { description: text(f, 'description'), permissions: texts(f, 'permissions') };
  if (text(f, 'name') !== group) body.name = text(f, 'name');
  const saved = await busy(submitter(e), msg, () => api<GroupView>('PATCH', `/api/groups/${encodeURIComponent(group)}`, body));
  if (saved) {
    await load(saved.name);
    say(msg, 'Saved.');
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
    say(newMsg, '');
    await load(created.name);
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
