// Integrations: the system API key (for a superadmin) and the webhook secrets, shared and per forge, with the intake's warnings.
import type { Schemas } from '../../client/api-types.js';
import { $, api, boot, busy, clearOnEdit, confirmButton, control, errorText, h, must, randomSecret, say, submitter } from './app.js';

type SecretState = Schemas['SecretStatus'];

const capitalised = (s: string) => `${s.charAt(0).toUpperCase()}${s.slice(1)}`;

function secretSection(
  section: HTMLElement | null,
  { path, field, label, changed }: { path: string; field: string; label: string; changed?: () => void },
): void {
  if (!section) return;
  const state = must('[data-state]', section);
  const form = must<HTMLFormElement>('form', section);
  const msg = must('[data-msg]', section);
  const input = control(form, field);
  clearOnEdit(form, msg);
  const show = async () => {
    const s = await api<SecretState>('GET', path);
    state.replaceChildren(
      h('span', { class: `pill ${s.configured ? 'on' : 'off'}` }, s.configured ? 'configured' : 'not set'),
      s.locked ? ' set in the environment (read-only here)' : '',
    );
    for (const el of form.elements) if (el instanceof HTMLInputElement || el instanceof HTMLButtonElement) el.disabled = s.locked;
  };
  must('[data-generate]', section).addEventListener('click', () => {
    input.value = randomSecret();
    input.type = 'text';
    input.select();
    say(msg, `Copy this ${label} now: it is not shown again after saving.`);
  });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const ok = await busy(submitter(e), msg, () => api('PUT', path, { [field]: input.value }).then(() => true));
    if (ok) {
      say(msg, `${capitalised(label)} saved.`);
      input.value = '';
      await show();
      changed?.();
    }
  });
  confirmButton(must<HTMLButtonElement>('[data-clear]', section), 'Confirm clear', async () => {
    const ok = await busy(null, msg, () => api('DELETE', path).then(() => true));
    if (ok) {
      say(msg, `${capitalised(label)} cleared.`);
      await show();
      changed?.();
    }
  });
  show().catch((err: unknown) => say(msg, errorText(err), 'error'));
}

secretSection($('[data-system-key]'), { path: '/api/settings/system-api-key', field: 'key', label: 'system key' });
// the intake's warnings: a webhook secret GitLab sends, or would send, in clear
const webhookWarnings = $('[data-webhook-warnings]');
const loadWebhookWarnings = () => {
  if (!webhookWarnings) return;
  api<{ warnings?: string[] }>('GET', '/api/notifications/webhook/scm/health')
    .then(({ warnings = [] }) => {
      must('ul', webhookWarnings).replaceChildren(...warnings.map((w) => h('li', {}, w)));
      webhookWarnings.hidden = warnings.length === 0;
    })
    .catch(() => undefined);
};
secretSection($('[data-webhook-secret]'), { path: '/api/settings/webhook-secret', field: 'secret', label: 'webhook secret', changed: loadWebhookWarnings });
for (const [forge, name] of [
  ['gitea', 'Gitea'],
  ['github', 'GitHub'],
  ['gitlab', 'GitLab'],
]) {
  secretSection($(`[data-webhook-secret-${forge}]`), {
    path: `/api/settings/webhook-secret/${forge}`,
    field: 'secret',
    label: `${name} webhook secret`,
    changed: loadWebhookWarnings,
  });
}
loadWebhookWarnings();

void boot();
