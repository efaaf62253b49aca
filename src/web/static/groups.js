// Administration of groups [feature:admin.groups]: permissions from the catalog, rename,
// delete; members (changing them needs feature:admin.users, as the API does).
import { $, api, boot, busy, can, confirmButton, errorText, h, say } from './app.js';

const list = $('[data-group-list]');
const editor = $('[data-group-editor]');
const form = $('[data-group-form]');
const msg = $('[data-msg]', form);
const newForm = $('[data-new-group]');
const addMember = $('[data-add-member]');
const BUILT_IN = new Set(['INT_ADMIN', 'INT_USER', 'INT_VIEWER']);
let groups = [];
let catalog = [];
let users = [];
let current = null;

/** Permission ids by namespace: feature, api, route, socket, plugin:<id>. */
function namespaces(entries) {
  const out = new Map();
  for (const e of entries) {
    const ns = e.id.startsWith('plugin:') ? e.id.split(':').slice(0, 2).join(':') : e.id.split(':')[0];
    if (!out.has(ns)) out.set(ns, []);
    out.get(ns).push(e);
  }
  return out;
}

function renderList() {
  list.replaceChildren(
    ...groups.map((g) =>
      h('li', {}, h('button', { type: 'button', 'aria-current': current === g.name ? 'true' : 'false', dataset: { group: g.name }, onclick: () => select(g.name) }, g.name, h('span', { class: 'count' }, ` ${g.members.length}`))),
    ),
  );
}

function select(name) {
  current = name;
  const g = groups.find((x) => x.name === name);
  renderList();
  if (!g) {
    editor.hidden = true;
    return;
  }
  editor.hidden = false;
  say(msg, '');
  $('[data-group-title]', form).textContent = g.name;
  form.elements.name.value = g.name;
  form.elements.name.readOnly = BUILT_IN.has(g.name);
  form.elements.description.value = g.description ?? '';
  $('[data-delete-group]', form).hidden = BUILT_IN.has(g.name);
  const granted = new Set(g.permissions);
  const known = new Set(catalog.map((e) => e.id));
  // grants the catalog does not list (e.g. of a removed plugin) stay visible and can be removed
  const entries = [...catalog, ...g.permissions.filter((p) => !known.has(p)).map((id) => ({ id, description: 'not in the catalog' }))];
  $('[data-permission-checks]', form).replaceChildren(
    ...[...namespaces(entries)].map(([ns, items]) =>
      h('div', {}, h('h4', {}, ns), h('div', { class: 'checks' }, items.map((e) => h('label', { title: e.description }, h('input', { type: 'checkbox', name: 'permissions', value: e.id, checked: granted.has(e.id) }), e.id)))),
    ),
  );
  renderMembers(g);
}

function renderMembers(g) {
  const members = $('[data-members]');
  members.replaceChildren(
    ...(g.members.length
      ? g.members.map((username) => {
          const u = users.find((x) => x.username === username);
          return h('li', { dataset: { member: username } }, username, can('feature:admin.users') && u ? h('button', { type: 'button', class: 'small secondary', 'aria-label': `Remove ${username}`, onclick: () => setMembership(u, false) }, '×') : null);
        })
      : [h('li', { class: 'empty' }, 'No members.')]),
  );
  const options = $('[data-user-options]');
  if (options) options.replaceChildren(...users.filter((u) => !g.members.includes(u.username)).map((u) => h('option', { value: u.id }, u.username)));
}

async function setMembership(user, member) {
  const next = member ? [...new Set([...user.groups, current])] : user.groups.filter((x) => x !== current);
  const ok = await busy(null, msg, () => api('PATCH', `/api/users/${user.id}`, { groups: next }).then(() => true));
  if (ok) await load(current);
}

async function load(selectName) {
  const [g, c, u] = await Promise.all([
    api('GET', '/api/groups'),
    api('GET', '/api/permissions'),
    can('feature:admin.users') ? api('GET', '/api/users') : Promise.resolve({ users: [] }),
  ]);
  groups = g.groups;
  catalog = c.permissions.filter((e) => !e.id.endsWith(':*') || e.id === 'feature:*');
  users = u.users;
  renderList();
  select(selectName ?? current ?? groups[0]?.name);
}

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(form);
  const body = { description: f.get('description') ?? '', permissions: f.getAll('permissions') };
  if (f.get('name') !== current) body.name = f.get('name');
  const saved = await busy(e.submitter, msg, () => api('PATCH', `/api/groups/${encodeURIComponent(current)}`, body));
  if (saved) {
    await load(saved.name);
    say(msg, 'Saved.');
  }
});

confirmButton($('[data-delete-group]', form), 'Confirm delete', async () => {
  const ok = await busy(null, msg, () => api('DELETE', `/api/groups/${encodeURIComponent(current)}`).then(() => true));
  if (ok) {
    current = null;
    await load();
  }
});

newForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const name = new FormData(newForm).get('name');
  const created = await busy(e.submitter, $('[data-msg]', newForm), () => api('POST', '/api/groups', { name, permissions: [] }));
  if (created) {
    newForm.reset();
    say($('[data-msg]', newForm), '');
    await load(created.name);
  }
});

addMember?.addEventListener('submit', async (e) => {
  e.preventDefault();
  const id = new FormData(addMember).get('user');
  const u = users.find((x) => x.id === id);
  if (u) await setMembership(u, true);
});

load().catch((err) => say($('[data-msg]', newForm), errorText(err), 'error'));
boot();
