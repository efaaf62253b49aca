// The settings form of one plugin on the plugins page: what the manifest declares, each value
// with where it comes from; environment values read-only, secrets never shown.
import type { Answer, Schemas } from '../../client/api-types.js';
import { api, busy, clearOnEdit, control, h, markInvalid, say, submitter } from './app.js';

/** GET /api/plugins/:id/settings, one setting. */
export type SettingView = Schemas['PluginSettingView'];

const SOURCES: Record<SettingView['source'], string> = { env: 'environment (locked)', store: 'saved here', default: 'manifest default', unset: 'not set' };
const CLEAR = (key: string) => `clear:${key}`;

function field(pluginId: string, s: SettingView): HTMLElement {
  const srcId = `src-${pluginId}-${s.key}`;
  const attrs = { name: s.key, readonly: s.locked, spellcheck: 'false', autocomplete: 'off', 'aria-describedby': srcId };
  const input = s.secret
    ? h('input', { ...attrs, type: 'password', placeholder: s.configured ? 'set (unchanged)' : 'not set' })
    : h('input', { ...attrs, value: s.value ?? '', placeholder: s.source === 'unset' ? 'not set' : null });
  // a stored secret is removed on purpose, never by leaving the field empty
  const clear =
    s.secret && s.source === 'store' ? h('label', { class: 'check' }, h('input', { type: 'checkbox', name: CLEAR(s.key) }), 'remove the saved value') : null;
  return h(
    'div',
    { class: `setting${s.locked ? ' locked' : ''}`, dataset: { setting: s.key } },
    h('label', {}, h('code', {}, s.key), s.description ? h('span', { class: 'desc' }, s.description) : null, input),
    h('span', { class: 'src', id: srcId, 'data-source': s.source }, SOURCES[s.source], s.secret && s.configured ? ' · configured' : ''),
    clear,
  );
}

/** The changed settings only: an emptied field goes back to the default (null), an empty secret is kept. */
function readPatch(form: HTMLFormElement, settings: SettingView[]): Record<string, string | null> {
  const patch: Record<string, string | null> = {};
  for (const s of settings) {
    if (s.locked) continue;
    const value = control(form, s.key).value;
    if (s.secret) {
      if (value) patch[s.key] = value;
      else if (form.elements.namedItem(CLEAR(s.key)) instanceof HTMLInputElement && control(form, CLEAR(s.key)).checked) patch[s.key] = null;
    } else if (value !== (s.value ?? '')) patch[s.key] = value === '' ? null : value;
  }
  return patch;
}

type Saved = Answer<'/api/plugins/{id}/settings', 'patch'>;

/** A form for one plugin; `saved` runs after a save (the plugin restarted: its state may differ). */
export function settingsForm(plugin: { id: string; name: string | null }, initial: SettingView[], saved: () => Promise<void>): HTMLFormElement {
  const title = plugin.name ?? plugin.id;
  const msg = h('p', { class: 'form-msg', role: 'status', 'data-msg': true });
  const form = h('form', { class: 'settings-form', dataset: { pluginSettings: plugin.id }, 'aria-label': `Settings of ${title}` });
  let settings = initial;
  const render = () =>
    form.replaceChildren(
      h('h3', {}, title),
      ...settings.map((s) => field(plugin.id, s)),
      h('div', { class: 'actions' }, h('button', { type: 'submit', disabled: settings.every((s) => s.locked) }, 'Save settings'), msg),
    );
  render();
  clearOnEdit(form, msg);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const patch = readPatch(form, settings);
    if (!Object.keys(patch).length) {
      say(msg, 'Nothing changed.');
      return;
    }
    const res = await busy(submitter(e), msg, () =>
      api<Saved>('PATCH', `/api/plugins/${encodeURIComponent(plugin.id)}/settings`, patch).catch((err: unknown) => {
        markInvalid(form, err);
        throw err;
      }),
    );
    if (!res) return;
    settings = res.settings;
    render();
    const state = res.plugin.error ? `${res.plugin.state}: ${res.plugin.error}` : res.plugin.state;
    say(msg, `Saved; ${title} restarted (${state}).`, res.plugin.error ? 'error' : 'ok');
    await saved();
  });
  return form;
}
