// Administration of plugins [feature:admin.plugins]: state, errors, enable / disable, and
// the settings each plugin declares.
import { ApiError, api, boot, busy, errorText, h, must, say } from './app.js';
import { settingsForm, type SettingView } from './plugin-config.js';
import type { PluginState, PluginView } from '../../client/api-types.js';

const table = must<HTMLTableSectionElement>('[data-plugins] tbody');
const empty = must('[data-empty]');
const msg = must('[data-msg]');
const settingsPanel = must('[data-settings-panel]');
const settingsArea = must('[data-settings]', settingsPanel);
const STATE_CLASS: Record<PluginState, string> = { loaded: 'on', degraded: 'failed', failed: 'failed', disabled: 'off' };

function row(p: PluginView): HTMLTableRowElement {
  const toggle = h('button', { type: 'button', class: `small ${p.enabled ? 'secondary' : ''}`, dataset: { toggle: p.id } }, p.enabled ? 'Disable' : 'Enable');
  toggle.addEventListener('click', async () => {
    const done = await busy(toggle, msg, () =>
      api<{ state: PluginState; error: string | null }>('POST', `/api/plugins/${encodeURIComponent(p.id)}/${p.enabled ? 'disable' : 'enable'}`),
    );
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
    h(
      'td',
      {},
      h('span', { class: `pill ${STATE_CLASS[p.state] ?? ''}`, 'data-state': p.state }, p.state),
      p.enabled || p.state === 'disabled' ? '' : h('span', { class: 'pill off' }, 'disabled'),
    ),
    h('td', { class: p.error ? 'error' : '' }, p.error ?? ''),
    h(
      'td',
      {},
      provides.map((x) => h('span', { class: 'pill' }, x)),
    ),
    h('td', {}, toggle),
  );
}

async function load(): Promise<PluginView[]> {
  const { plugins } = await api<{ plugins: PluginView[] }>('GET', '/api/plugins');
  table.replaceChildren(...plugins.map(row));
  empty.hidden = plugins.length > 0;
  return plugins;
}

/** The settings of a plugin; none for a plugin without a valid manifest (409). */
async function settingsOf(p: PluginView): Promise<SettingView[]> {
  try {
    return (await api<{ settings: SettingView[] }>('GET', `/api/plugins/${encodeURIComponent(p.id)}/settings`)).settings;
  } catch (err) {
    if (err instanceof ApiError && err.status === 409) return [];
    throw err;
  }
}

async function loadSettings(plugins: PluginView[]): Promise<void> {
  const all = await Promise.all(plugins.map(async (p) => ({ p, settings: await settingsOf(p) })));
  const declared = all.filter((x) => x.settings.length);
  settingsArea.replaceChildren(...declared.map(({ p, settings }) => settingsForm(p, settings, () => load().then(() => undefined))));
  settingsPanel.hidden = declared.length === 0;
}

load()
  .then(loadSettings)
  .catch((err: unknown) => say(msg, errorText(err), 'error'));
void boot();
