import type { ApiIdentity } from '../auth/identity.js';
import type { User } from '../iam/store.js';
import { html, type SafeHtml } from './html.js';
import { keyFormAndList } from './pages-keys.js';

export { auditContent, GROUP_RULE, groupsContent, pluginsContent, USERNAME_RULE, usersContent } from './pages-admin.js';
export { authenticationContent, integrationsContent } from './pages-service.js';

/**
 * The content of each signed-in page. The server renders the structure and what it knows
 * (profile, which sections this identity may use); the page's browser module loads the data
 * from the API and keeps it current.
 */

const LEVELS = ['info', 'success', 'warning', 'error'] as const;

export function dashboardContent(id: ApiIdentity): SafeHtml {
  const canBroadcast = id.allows('feature:notifications.broadcast');
  const canSend = id.allows('feature:notifications.send');
  return html`<div class="grid">
<section class="panel wide" id="notifications" aria-labelledby="notifications-title">
<div class="panel-head">
<h2 id="notifications-title">Notifications <span class="count" data-unread-label></span></h2>
<div class="tools">
<label class="check"><input type="checkbox" data-unread-only> Unread only</label>
<button type="button" data-read-all>Mark all read</button>
</div>
</div>
<ol class="feed" data-feed aria-live="off"></ol>
<p class="empty" data-feed-empty hidden>Nothing here yet. New notifications appear as they arrive.</p>
</section>
${
  canBroadcast || canSend
    ? html`<section class="panel" aria-labelledby="send-title">
<h2 id="send-title">Send a notification</h2>
<form data-send-form class="stack">
<label>Title <input name="title" required maxlength="200"></label>
<label>Message <textarea name="message" rows="3" maxlength="4000"></textarea></label>
<label>Level <select name="level">${LEVELS.map((l) => html`<option>${l}</option>`)}</select></label>
<label>Link <input name="link" placeholder="https://… or /path" maxlength="2048"></label>
${canSend ? html`<label>To user <input name="user" placeholder="${canBroadcast ? 'empty: everyone' : 'username'}"${canBroadcast ? '' : html` required`}></label>` : ''}
<button type="submit">Send</button>
<p class="form-msg" data-msg role="status"></p>
</form>
</section>`
    : ''
}
${
  id.allows('feature:dashboard.admin_sections')
    ? html`<section class="panel" aria-labelledby="status-title">
<h2 id="status-title">Service</h2>
<dl class="facts" data-status><dt>Socket providers</dt><dd data-providers>…</dd><dt>Webhook intake</dt><dd data-webhook>…</dd><dt>Live connection</dt><dd data-live>…</dd></dl>
</section>`
    : ''
}
</div>`;
}

/** Where an administrator's bookmark of this page finds what it held before the administration pages. */
const MOVED_NOTE = html`<p class="note" data-moved-note>The service's own settings (login providers, webhook secrets, the system key) are under Administration: <a href="/admin/authentication">Authentication</a> and <a href="/admin/integrations">Integrations</a>.</p>`;

/** The account page: one's profile and password, second factors, API keys and sessions. */
export function accountContent(id: ApiIdentity, user: User | null): SafeHtml {
  return html`${id.allows('feature:admin.settings') ? MOVED_NOTE : ''}
<div class="grid">
<section class="panel wide" aria-labelledby="profile-title">
<h2 id="profile-title">Profile</h2>
${
  user
    ? html`<dl class="facts">
<dt>Username</dt><dd data-profile-username>${user.username}</dd>
<dt>Name</dt><dd>${user.displayName ?? '—'}</dd>
<dt>Email</dt><dd>${user.email ?? '—'}</dd>
<dt>Groups</dt><dd>${user.groups.length ? user.groups.join(', ') : '—'}</dd>
</dl>
${
  user.hashedPassword
    ? html`<details><summary>Change password</summary>
<form data-password-form class="stack" data-user-id="${user.id}">
<label>Current password <input type="password" name="current_password" autocomplete="current-password" required></label>
<label>New password <input type="password" name="new_password" autocomplete="new-password" minlength="8" required></label>
<button type="submit">Change password</button>
<p class="form-msg" data-msg role="status"></p>
</form></details>`
    : html`<p class="note">This account signs in through single sign-on only.</p>`
}`
    : html`<p class="note">Signed in with the system key: it has no profile, keys or sessions.</p>`
}
</section>
${user ? SECURITY_PANEL : ''}
${
  user
    ? html`<section class="panel wide" aria-labelledby="keys-title">
<h2 id="keys-title">API keys</h2>
<p class="note">A key acts as you, limited to the scopes you pick. Send it as <code>X-API-Key</code> or <code>Authorization: Bearer</code>.</p>
${keyFormAndList('everything you may do')}
</section>
<section class="panel wide" aria-labelledby="sessions-title">
<h2 id="sessions-title">Sessions</h2>
<table class="list" data-sessions><thead><tr><th>Session</th><th>Started</th><th>Expires</th><th>Last used</th><th></th></tr></thead><tbody></tbody></table>
</section>`
    : ''
}
</div>`;
}

/**
 * Security: one's second factors (src/web/browser/security.ts fills it from GET /api/me/mfa):
 * each factor with its last use, enrolling an authenticator app (QR code, key as text, a code to
 * confirm), adding passkeys, removing, recovery codes shown once with a download, the API keys
 * issued before the first factor with one revoke. Made once.
 */
const SECURITY_PANEL = html`<section class="panel wide" id="security" aria-labelledby="security-title" data-security>
<h2 id="security-title">Security</h2>
<p class="notice" data-mfa-required role="alert" hidden>Your groups require a second factor: set one up here to use the service.</p>
<p class="note">A second factor protects your account beyond your password: sign-ins ask for it, and so do actions that reach the host or change who is trusted (again after a while).</p>
<table class="list" data-factors><thead><tr><th>Factor</th><th>Added</th><th>Last used</th><th></th></tr></thead><tbody></tbody></table>
<form data-totp-remove class="row" hidden>
<label>Code from the app, or a recovery code <input name="code" autocomplete="one-time-code" maxlength="64" required spellcheck="false"></label>
<button type="submit" class="danger">Remove the app</button><button type="button" data-cancel>Cancel</button>
</form>
<p class="form-msg" data-security-msg role="status"></p>
<div class="secret-once" data-recovery-codes hidden>
<p><strong>Save your recovery codes now.</strong> They are shown only this once. Each signs you in once when your app or passkey is not at hand.</p>
<ol class="codes" data-codes></ol>
<div class="row"><button type="button" data-download>Download</button><button type="button" data-copy-codes>Copy</button><button type="button" data-codes-done>Done</button></div>
</div>
<div class="secret-once" data-keys-before-factor hidden>
<p><strong>These API keys were issued before your second factor.</strong> They keep working without it. Revoke them unless a program of yours needs them; new keys are issued from a signed-in session like this one.</p>
<table class="list"><thead><tr><th>Label</th><th>Prefix</th><th>Created</th><th></th></tr></thead><tbody></tbody></table>
<div class="row"><button type="button" class="danger" data-revoke-before-factor>Revoke these keys</button><button type="button" data-keys-kept>Keep them</button></div>
</div>
<form data-reauth class="row" hidden>
<label>Your current password <input name="current_password" type="password" autocomplete="current-password" maxlength="1024"></label>
<p class="note">A first second factor needs it (or a sign-in within the last 5 minutes): then set one up below.</p>
</form>
<div class="security-add">
<div data-totp-block>
<h3>Authenticator app</h3>
<p class="note">An app such as FreeOTP, Aegis or Google Authenticator shows a new 6-digit code every 30 seconds.</p>
<button type="button" data-totp-start>Set up an authenticator app</button>
<div class="totp-enrol" data-totp-enrol hidden>
<img class="qr" data-totp-qr alt="QR code of the key for your authenticator app">
<form data-totp-confirm class="stack">
<p>Scan the code with the app, or type this key into it:</p>
<p class="totp-secret" data-totp-secret></p>
<label>Code the app shows <input name="code" inputmode="numeric" autocomplete="one-time-code" maxlength="64" required spellcheck="false"></label>
<div class="row"><button type="submit">Confirm</button><button type="button" data-cancel>Cancel</button></div>
</form>
</div>
</div>
<div data-passkey-block>
<h3>Passkeys and security keys</h3>
<p class="note">Your device's screen lock, a phone or a USB key. A passkey also signs you in without your password.</p>
<form data-passkey-add class="stack">
<label>Label <input name="label" value="Passkey" required maxlength="100" autocomplete="off"></label>
<button type="submit">Add a passkey</button>
</form>
<p class="note" data-passkey-unsupported hidden>This browser cannot use passkeys here.</p>
</div>
</div>
</section>`;

/** Swagger UI fills this; its files come first in the head (see DOCS_HEAD in routes.ts). */
export function docsContent(): SafeHtml {
  return html`<p class="note">The HTTP API of this service, from <a href="/openapi.json">/openapi.json</a>. Calls made here are authenticated like any other: with your session, or with what you enter under Authorize.</p>
<div id="swagger-ui"></div>`;
}
