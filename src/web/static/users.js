// Administration of users [feature:admin.users]: list, create, edit (groups, extra
// permissions, profile, disabled, password), delete.
import { $, api, boot, busy, confirmButton, errorText, h, say } from './app.js';

const table = $('[data-users] tbody');
const form = $('[data-user-form]');
const listMsg = $('[data-list-msg]');
const formMsg = $('[data-msg]', form);
let groups = [];
let editing = null; // the user being edited, null = a new one

function groupChecks(selected) {
  $('[data-group-checks]', form).replaceChildren(
    ...groups.map((g) => h('label', {}, h('input', { type: 'checkbox', name: 'groups', value: g.name, checked: selected.includes(g.name) }), g.name)),
  );
}

function openForm(user) {
  editing = user;
  form.hidden = false;
  form.reset();
  say(formMsg, '');
  $('[data-form-title]', form).textContent = user ? `Edit ${user.username}` : 'New user';
  const el = form.elements;
  el.username.value = user?.username ?? '';
  el.username.readOnly = Boolean(user);
  el.display_name.value = user?.display_name ?? '';
  el.email.value = user?.email ?? '';
  el.password.placeholder = user ? 'leave empty to keep' : 'empty: single sign-on only';
  el.extra_permissions.value = (user?.extra_permissions ?? []).join(' ');
  el.disabled.checked = Boolean(user?.disabled);
  groupChecks(user?.groups ?? ['INT_VIEWER']);
  el[user ? 'display_name' : 'username'].focus();
}

function row(u) {
  const edit = h('button', { type: 'button', class: 'small secondary', onclick: () => openForm(u) }, 'Edit');
  const del = confirmButton(h('button', { type: 'button', class: 'small secondary' }, 'Delete'), 'Confirm delete', async () => {
    const ok = await busy(null, listMsg, () => api('DELETE', `/api/users/${u.id}`).then(() => true));
    if (ok) {
      say(listMsg, `Deleted ${u.username}.`);
      await load();
    }
  });
  return h(
    'tr',
    { dataset: { username: u.username } },
    h('td', {}, u.username, ' ', u.roles.map((r) => h('span', { class: 'pill' }, r))),
    h('td', {}, u.display_name ?? ''),
    h('td', {}, u.email ?? ''),
    h('td', {}, u.groups.map((g) => h('span', { class: 'pill' }, g)), u.extra_permissions.map((p) => h('span', { class: 'pill', title: 'extra permission' }, `+${p}`))),
    h('td', {}, u.identities.map((i) => h('span', { class: 'pill', title: i.provider_user_id }, i.provider))),
    h('td', {}, h('span', { class: `pill ${u.disabled ? 'off' : 'on'}` }, u.disabled ? 'disabled' : 'active')),
    h('td', {}, edit, ' ', del),
  );
}

async function load() {
  const [{ users }, g] = await Promise.all([api('GET', '/api/users'), api('GET', '/api/groups').catch(() => ({ groups: [] }))]);
  groups = g.groups;
  table.replaceChildren(...users.map(row));
}

$('[data-new-user]').addEventListener('click', () => openForm(null));
$('[data-cancel]', form).addEventListener('click', () => {
  form.hidden = true;
});

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(form);
  const body = {
    display_name: f.get('display_name') || null,
    email: f.get('email') || null,
    groups: f.getAll('groups'),
    extra_permissions: String(f.get('extra_permissions') ?? '').split(/\s+/).filter(Boolean),
  };
  if (f.get('password')) body.password = f.get('password');
  let done;
  if (editing) {
    body.disabled = form.elements.disabled.checked;
    done = await busy(e.submitter, formMsg, () => api('PATCH', `/api/users/${editing.id}`, body));
  } else {
    body.username = f.get('username');
    if (body.display_name === null) delete body.display_name;
    done = await busy(e.submitter, formMsg, () => api('POST', '/api/users', body));
    if (done && form.elements.disabled.checked) await api('PATCH', `/api/users/${done.id}`, { disabled: true }).catch(() => undefined);
  }
  if (done) {
    form.hidden = true;
    say(listMsg, `Saved ${done.username}.`);
    await load();
  }
});

load().catch((err) => say(listMsg, errorText(err), 'error'));
boot();
