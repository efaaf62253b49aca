/**
 * The service's own settings, as administration pages: Authentication (the login providers) and
 * Integrations (the system API key that machines call with, the webhook secrets forges sign
 * with). Their browser modules (src/web/browser/authentication.ts, integrations.ts) fill them
 * from the API. src/web/pages.ts re-exports them with the other pages.
 */
import type Joi from 'joi';
import type { ApiIdentity } from '../auth/identity.js';
import { setting, type SettingDef } from '../settings-table.js';
import { html, type SafeHtml } from './html.js';

/** A string rule's length limits, as the settings table states them (the input enforces the same). */
function lengthsOf(rule: Joi.Schema): { min: number; max: number } {
  const rules = (rule.describe().rules ?? []) as Array<{ name: string; args?: { limit?: number } }>;
  const limit = (name: string) => rules.find((r) => r.name === name)?.args?.limit;
  return { min: limit('min') ?? 1, max: limit('max') ?? 4096 };
}

/** One env-lockable secret (src/http/secret-routes.ts): its state, a form to set it, generate and clear. */
function secretPanel(o: {
  key: string;
  title: string;
  note: SafeHtml;
  label: string;
  field: string;
  save: string;
  setting: SettingDef;
  wide?: boolean;
}): SafeHtml {
  const { min, max } = lengthsOf(o.setting.rule!);
  return html`<section class="panel${o.wide ? ' wide' : ''}" aria-labelledby="${o.key}-title" data-${o.key}>
<h2 id="${o.key}-title">${o.title}</h2>
<p class="note">${o.note}</p>
<p data-state>…</p>
<form class="stack">
<label>${o.label} (at least ${min} characters) <input name="${o.field}" minlength="${min}" maxlength="${max}" autocomplete="off" spellcheck="false" required></label>
<div class="row"><button type="button" data-generate>Generate</button><button type="submit">${o.save}</button><button type="button" class="danger" data-clear>Clear</button></div>
<p class="form-msg" data-msg role="status"></p>
</form>
</section>`;
}

/**
 * The Integrations page's secret panels, made at its first render (a rule's describe() is not
 * cheap, and a start need not pay it): the system key for every trusted actor (superadmin,
 * system key: it hands out the host), the shared webhook secret for every administrator (beside
 * the system key, the two sharing a row, or without it the whole row), each forge's own webhook
 * secret (rows of the settings table) and what the intake warns about.
 */
let integrationPanels: IntegrationPanels | undefined;
interface IntegrationPanels {
  trusted: SafeHtml;
  others: SafeHtml;
  forges: SafeHtml;
}
function makeIntegrationPanels(): IntegrationPanels {
  const systemKey = secretPanel({
    key: 'system-key',
    title: 'System API key',
    note: html`The machine-to-machine master key: it passes every permission check. Stored encrypted.`,
    label: 'New key',
    field: 'key',
    save: 'Save key',
    setting: setting('SERVICE_SYSTEM_API_KEY'),
  });
  const webhookSecret = (wide: boolean) =>
    secretPanel({
      key: 'webhook-secret',
      title: 'Webhook secret',
      note: html`Verifies deliveries to <code>/api/notifications/webhook/scm</code> from Gitea, GitHub and GitLab.`,
      label: 'New secret',
      field: 'secret',
      save: 'Save secret',
      setting: setting('SERVICE_SCM_WEBHOOK_SECRET'),
      wide,
    });
  const forges = html`<section class="panel wide" aria-labelledby="webhook-warnings-title" data-webhook-warnings hidden>
<h2 id="webhook-warnings-title">Webhook secrets: warnings</h2>
<ul></ul>
</section>
${(
  [
    ['gitea', 'Gitea', html`Verifies only Gitea deliveries; unset, the shared webhook secret does.`],
    ['github', 'GitHub', html`Verifies only GitHub deliveries; unset, the shared webhook secret does.`],
    ['gitlab', 'GitLab', html`GitLab sends its token in clear: with its own secret, the shared one stays a signing key for Gitea and GitHub only.`],
  ] as const
).map(([forge, name, note]) =>
  secretPanel({
    key: `webhook-secret-${forge}`,
    title: `${name} webhook secret`,
    note,
    label: 'New secret',
    field: 'secret',
    save: 'Save secret',
    setting: setting(`SERVICE_SCM_WEBHOOK_SECRET_${forge.toUpperCase()}`),
  }),
)}`;
  return { trusted: html`<div class="pair">${systemKey}${webhookSecret(false)}</div>`, others: webhookSecret(true), forges };
}

/** The provider chain and each provider's settings (src/web/browser/auth-form.ts), with the directory's checks. Made once. */
const AUTHENTICATION_CONTENT = html`<div class="grid">
<section class="panel wide" aria-labelledby="auth-title" data-auth-settings>
<h2 id="auth-title">Authentication providers</h2>
<p class="note">Fields set in the environment are read-only here. Secrets are never shown; leave them masked to keep them.</p>
<p data-chain></p>
<form data-auth-form class="settings-form"></form>
<p class="form-msg" data-msg role="status"></p>
</section>
</div>`;

export function authenticationContent(): SafeHtml {
  return AUTHENTICATION_CONTENT;
}

/** The system key only for a trusted actor (superadmin, system key): it hands out the host. */
export function integrationsContent(id: ApiIdentity): SafeHtml {
  const panels = (integrationPanels ??= makeIntegrationPanels());
  return html`<div class="grid">
${id.isSystem || id.isSuperadmin ? panels.trusted : panels.others}
${panels.forges}
</div>`;
}
