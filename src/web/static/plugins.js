// Administration of plugins [feature:admin.plugins]: state, errors, enable / disable.
import { $, api, boot, busy, errorText, h, say } from './app.js';

const table = $('[data-plugins] tbody');
const empty = $('[data-empty]');
const msg = $('[data-msg]');
const STATE_CLASS = { loaded: 'on', degraded: 'failed', failed: 'failed', disabled: 'off' };

function row(p) {
  const toggle = h(
    'button',
    { type: 'button', class: `small ${p.enabled ? 'secondary' : ''}`, dataset: { toggle: p.id } },
    p.enabled ? 'Disable' : 'Enable',
  );
  toggle.addEventListener('click', async () => {
    const done = await busy(toggle, msg, () => api('POST', `/api/plugins/${encodeURIComponent(p.id)}/${p.enabled ? 'disable' : 'enable'}`));
    if (done) {
      say(msg, `${p.name ?? p.id}: ${done.state}${done.error ? ` (${done.error})` : ''}`, done.error ? 'error' : 'ok');
      await load();
    }
  });
  const provides = [...p.socket_providers.registered.map((n) => `socket ${n}`), ...p.auth_providers.map((n) => `auth ${n}`)];
  return h(
    'tr',
    { dataset: { plugin: p.id } },
    h('td', {}, h('strong', {}, p.name ?? p.id), h('div', { class: 'note' }, p.description ?? p.folder)),
    h('td', {}, p.version ?? '—'),
    h('td', {}, h('span', { class: `pill ${STATE_CLASS[p.state] ?? ''}`, 'data-state': p.state }, p.state), p.enabled || p.state === 'disabled' ? '' : h('span', { class: 'pill off' }, 'disabled')),
    h('td', { class: p.error ? 'error' : '' }, p.error ?? ''),
    h('td', {}, provides.map((x) => h('span', { class: 'pill' }, x))),
    h('td', {}, toggle),
  );
}

async function load() {
  const { plugins } = await api('GET', '/api/plugins');
  table.replaceChildren(...plugins.map(row));
  empty.hidden = plugins.length > 0;
}

load().catch((err) => say(msg, errorText(err), 'error'));
boot();
