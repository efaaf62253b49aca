/**
 * The administrators' pages (users, groups, plugins, the audit trail): their structure, filled by
 * their browser modules from the API. src/web/pages.ts re-exports them with the other pages.
 */
import type { ApiIdentity } from '../auth/identity.js';
import { AUDIT_ACTIONS } from '../iam/audit.js';
import { GROUP_NAME_WORDS, USERNAME_WORDS } from '../settings-kinds.js';
import { html, type SafeHtml } from './html.js';
import { keyFormAndList } from './pages-keys.js';

/** The name rules of src/iam/schemas.ts in words: the title of the inputs, shown when a name breaks them. */
export const USERNAME_RULE = `A username is ${USERNAME_WORDS}.`;
export const GROUP_RULE = `A group name is ${GROUP_NAME_WORDS}.`;

export function usersContent(): SafeHtml {
  return html`<section class="panel wide">
<div class="panel-head"><h2>All users</h2><button type="button" data-new-user>New user</button></div>
<form data-user-form class="stack editor" hidden>
<h3 data-form-title>New user</h3>
<label>Username <input name="username" required pattern="[A-Za-z0-9._@\\-]{1,64}" title="${USERNAME_RULE}" autocomplete="off" spellcheck="false"></label>
<label>Display name <input name="display_name" maxlength="256"></label>
<label>Email <input name="email" type="email" maxlength="320"></label>
<label>Password <input name="password" type="password" minlength="8" autocomplete="new-password"></label>
<fieldset><legend>Groups</legend><div class="checks" data-group-checks></div></fieldset>
<fieldset><legend>Extra permissions (besides those of the groups)</legend><div data-extra-permissions class="perm-groups"></div></fieldset>
<label class="check"><input type="checkbox" name="disabled"> Disabled</label>
<div class="row"><button type="submit">Save</button><button type="button" data-cancel>Cancel</button></div>
<p class="form-msg" data-msg role="status"></p>
</form>
<p class="form-msg" data-list-msg role="status"></p>
<table class="list" data-users><thead><tr><th>Username</th><th>Name</th><th>Email</th><th>Groups</th><th>Sign-in</th><th>State</th><th>Second factor</th><th></th></tr></thead><tbody></tbody></table>
</section>
<section class="panel wide" data-user-keys hidden aria-labelledby="user-keys-title">
<div class="panel-head"><h2 id="user-keys-title" data-user-keys-title>API keys</h2><button type="button" class="secondary" data-close-keys>Close</button></div>
<p class="note">A key acts as its owner (a program's account, such as <code>bot</code>), limited to the scopes picked. Revoking ends a key or a web session at once.</p>
${keyFormAndList('everything the owner may do; a scope the owner does not hold is refused')}
<h3>Web sessions</h3>
<table class="list" data-sessions><thead><tr><th>Session</th><th>Started</th><th>Expires</th><th>Last used</th><th></th></tr></thead><tbody></tbody></table>
</section>`;
}

export function groupsContent(id: ApiIdentity): SafeHtml {
  return html`<div class="split">
<section class="panel">
<div class="panel-head"><h2>Groups</h2></div>
<ul class="picker" data-group-list></ul>
<form data-new-group class="stack">
<label>New group <input name="name" required pattern="[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}" title="${GROUP_RULE}" placeholder="name" spellcheck="false"></label>
<button type="submit">Create</button>
<p class="form-msg" data-msg role="status"></p>
</form>
</section>
<section class="panel wide" data-group-editor hidden>
<form data-group-form class="stack">
<h2 data-group-title></h2>
<label>Name <input name="name" required pattern="[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}" title="${GROUP_RULE}" spellcheck="false"></label>
<label>Description <input name="description" maxlength="1000"></label>
<fieldset><legend>Permissions</legend><div data-permission-checks class="perm-groups"></div></fieldset>
<div class="row"><button type="submit">Save group</button><button type="button" class="danger" data-delete-group>Delete group</button></div>
<p class="form-msg" data-msg role="status"></p>
</form>
<h3>Members</h3>
<ul class="members" data-members></ul>
${
  id.allows('feature:admin.users')
    ? html`<form data-add-member class="row"><label>Add user <select name="user" data-user-options></select></label><button type="submit">Add</button></form>`
    : html`<p class="note">Changing members needs <code>feature:admin.users</code>.</p>`
}
</section>
</div>`;
}

export function pluginsContent(): SafeHtml {
  return html`<div class="grid">
<section class="panel wide" aria-labelledby="plugins-title">
<h2 id="plugins-title">Installed plugins</h2>
<p class="form-msg" data-msg role="status"></p>
<table class="list" data-plugins><thead><tr><th>Plugin</th><th>Version</th><th>State</th><th>Error</th><th>Provides</th><th></th></tr></thead><tbody></tbody></table>
<p class="empty" data-empty hidden>No plugins are installed (folders under SERVICE_PLUGINS_DIR).</p>
</section>
<section class="panel wide" aria-labelledby="plugin-settings-title" data-settings-panel hidden>
<h2 id="plugin-settings-title">Plugin settings</h2>
<p class="note">What each plugin declares in its manifest. Values set in the environment (<code>SERVICE_PLUGIN_&lt;ID&gt;_&lt;KEY&gt;</code>) are read-only here. Secrets are never shown: leave one empty to keep it. Empty a field to go back to its default. Saving restarts an enabled plugin.</p>
<div data-settings class="stack"></div>
</section>
</div>`;
}

/** The families of audit actions with more than one member (`user.` …): filtering by one takes them all. */
const AUDIT_PREFIXES = [...new Set(AUDIT_ACTIONS.map((a) => a.slice(0, a.indexOf('.') + 1)))]
  .map((prefix) => ({ prefix, count: AUDIT_ACTIONS.filter((a) => a.startsWith(prefix)).length }))
  .filter((p) => p.count > 1);

/**
 * The audit trail (src/web/browser/audit.ts fills it from GET /api/audit and the live
 * `audit:event` frames): filters, the events newest first, each one's details on demand. Made once.
 */
const AUDIT_CONTENT = html`<section class="panel wide" aria-labelledby="audit-title">
<div class="panel-head">
<h2 id="audit-title">Events</h2>
<div class="tools">
<span class="live-state" data-live-state data-state="connecting" role="status">connecting</span>
<button type="button" class="small secondary" data-pause aria-pressed="false">Pause</button>
</div>
</div>
<form data-filters class="audit-filters">
<label>Action <select name="action">
<option value="">any action</option>
<optgroup label="Every action of">${AUDIT_PREFIXES.map((p) => html`<option value="${p.prefix}">${p.prefix}* (${p.count} actions)</option>`)}</optgroup>
<optgroup label="One action">${AUDIT_ACTIONS.map((a) => html`<option>${a}</option>`)}</optgroup>
</select></label>
<label>Outcome <select name="outcome"><option value="">any outcome</option><option>success</option><option>failure</option><option>denied</option></select></label>
<label>Actor <input name="actor" maxlength="256" placeholder="username or user id" autocomplete="off" spellcheck="false"></label>
<label>Target <input name="target" maxlength="256" placeholder="name or id" autocomplete="off" spellcheck="false"></label>
<label>Since <input name="since" type="datetime-local" step="1"></label>
<div class="row"><button type="submit">Filter</button><button type="button" data-clear-filters>Clear</button></div>
</form>
<p class="form-msg" data-msg role="status"></p>
<table class="list audit-events" data-events><thead><tr><th>Time</th><th>Actor</th><th>Action</th><th>Target</th><th>Outcome</th><th>Summary</th><th></th></tr></thead><tbody></tbody></table>
<p class="empty" data-empty hidden>No events match these filters.</p>
<button type="button" class="secondary" data-load-older hidden>Load older</button>
</section>`;

export function auditContent(): SafeHtml {
  return AUDIT_CONTENT;
}
