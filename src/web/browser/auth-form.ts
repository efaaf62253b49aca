// The authentication provider settings on the Authentication page (feature:admin.settings): each
// field under a human label, env-set fields read-only, secrets masked, only changes sent.
import type { Answer, AuthSettingView as FieldView, SettingKind as FieldKind } from '../../client/api-types.js';
import { api, busy, clearOnEdit, control, errorText, fieldProblems, h, markInvalid, must, say, submitter } from './app.js';
import { ldapChecks } from './ldap-tests.js';

type AuthView = Answer<'/api/settings/auth', 'get'>;
type FieldControl = HTMLInputElement | HTMLTextAreaElement;

const HINTS: Partial<Record<FieldKind, string>> = {
  list: 'comma separated',
  mapping: 'JSON: {"external group": ["local group", …]}',
};

const listOf = (v: unknown): string[] => (Array.isArray(v) ? v.map(String) : []);
const stringOf = (v: unknown): string => (typeof v === 'string' ? v : v == null ? '' : String(v));
const mappingOf = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {});

function fieldControl(name: string, f: FieldView): HTMLLabelElement {
  const kind = f.kind;
  const attrs = { name, 'data-kind': kind, readonly: f.locked, disabled: f.locked && kind === 'boolean' };
  let input: FieldControl;
  if (kind === 'boolean') input = h('input', { ...attrs, type: 'checkbox', checked: f.value === true });
  else if (kind === 'mapping')
    input = h('textarea', { ...attrs, rows: 3, spellcheck: 'false' }, Object.keys(mappingOf(f.value)).length ? JSON.stringify(f.value) : '');
  else if (kind === 'secret')
    input = h('input', { ...attrs, type: 'password', autocomplete: 'off', placeholder: f.configured ? 'set (unchanged)' : 'not set' });
  else if (kind === 'list') input = h('input', { ...attrs, value: listOf(f.value).join(', '), spellcheck: 'false' });
  else input = h('input', { ...attrs, value: stringOf(f.value), spellcheck: 'false' });
  const source = f.locked ? 'environment (locked)' : f.source === 'store' ? 'saved here' : 'default';
  const hint = HINTS[kind];
  return h(
    'label',
    { class: `${kind === 'boolean' ? 'check-field' : ''}${f.locked ? ' locked' : ''}`, title: name, dataset: { field: name } },
    f.label,
    kind === 'boolean' ? ' ' : '',
    input,
    h('span', { class: 'src' }, source, hint && !f.locked ? ` · ${hint}` : ''),
  );
}

class MappingError extends Error {}

/** The changed fields only; throws MappingError (naming the field) when a mapping is not valid JSON. */
function readPatch(form: HTMLFormElement, fields: Record<string, FieldView>): Record<string, unknown> {
  const patch: Record<string, unknown> = {};
  for (const [name, f] of Object.entries(fields)) {
    if (f.locked) continue;
    const el = control<FieldControl>(form, name);
    const kind = f.kind;
    if (kind === 'boolean' && el instanceof HTMLInputElement) {
      if (el.checked !== (f.value === true)) patch[name] = el.checked;
    } else if (kind === 'secret') {
      if (el.value) patch[name] = el.value;
    } else if (kind === 'list') {
      const list = el.value
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      if (JSON.stringify(list) !== JSON.stringify(listOf(f.value))) patch[name] = list.length ? list : null;
    } else if (kind === 'mapping') {
      const raw = el.value.trim();
      let value: unknown;
      try {
        value = raw ? JSON.parse(raw) : null;
      } catch (err) {
        el.setAttribute('aria-invalid', 'true');
        throw new MappingError(`${f.label} is not valid JSON: ${errorText(err)}`);
      }
      if (JSON.stringify(value ?? {}) !== JSON.stringify(f.value ?? {})) patch[name] = value;
    } else {
      const v = el.value.trim();
      if (v !== stringOf(f.value)) patch[name] = v === '' ? null : v;
    }
  }
  return patch;
}

/** The server's field errors under the labels the form shows ("LDAP URL: must be a valid uri …"). */
function problemText(err: unknown, fields: Record<string, FieldView>): string {
  const problems = fieldProblems(err);
  if (!problems.length) return errorText(err);
  return problems.map((p) => `${fields[p.field]?.label ?? p.field}: ${p.message.replace(`"${p.field}" `, '')}`).join('; ');
}

export function authSettings(section: HTMLElement): void {
  const form = must<HTMLFormElement>('[data-auth-form]', section);
  const msg = must('[data-msg]', section);
  let fields: Record<string, FieldView> = {};
  clearOnEdit(form, msg);
  const load = async () => {
    const view = await api<AuthView>('GET', '/api/settings/auth');
    fields = view.settings;
    must('[data-chain]', section).textContent = `Sign-in chain: ${view.chain.map((c) => `${c.label} (${c.id})`).join(' → ') || 'empty'}`;
    const current = fields;
    form.replaceChildren(
      ...Object.entries(fields).map(([name, f]) => fieldControl(name, f)),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save provider settings')),
      ldapChecks(view, () => readPatch(form, current)),
    );
  };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    let patch: Record<string, unknown>;
    try {
      patch = readPatch(form, fields);
    } catch (err) {
      say(msg, err instanceof MappingError ? err.message : errorText(err), 'error');
      return;
    }
    if (!Object.keys(patch).length) {
      say(msg, 'Nothing changed.');
      return;
    }
    const ok = await busy(submitter(e), null, () =>
      api('PATCH', '/api/settings/auth', patch).then(
        () => true,
        (err: unknown) => {
          markInvalid(form, err);
          say(msg, problemText(err, fields), 'error');
          return false;
        },
      ),
    );
    if (ok) {
      say(msg, 'Saved; the sign-in chain was rebuilt.');
      await load();
    }
  });
  load().catch((err: unknown) => say(msg, errorText(err), 'error'));
}
