import { html, type SafeHtml } from './html.js';

/**
 * Creating an API key (its token shown once) and the list of keys: one's own on the account page,
 * a user's in the users administration (src/web/browser/key-panel.ts fills both).
 */
export function keyFormAndList(allScopes: string): SafeHtml {
  return html`<form data-key-form class="stack">
<label>Label <input name="label" required maxlength="128" placeholder="e.g. deploy script"></label>
<fieldset class="scopes"><legend>Scopes (none: ${allScopes})</legend><div data-scope-list class="checks"></div></fieldset>
<label>Expires <select name="expires"><option value="">never</option><option value="7">in 7 days</option><option value="30" selected>in 30 days</option><option value="90">in 90 days</option><option value="365">in a year</option></select></label>
<button type="submit">Create key</button>
<p class="form-msg" data-msg role="status"></p>
</form>
<div class="secret-once" data-new-token hidden>
<p><strong>Copy the new key now.</strong> It is shown only once.</p>
<div class="copy-row"><input readonly data-token-value aria-label="New API key"><button type="button" data-copy>Copy</button></div>
</div>
<table class="list" data-keys><thead><tr><th>Label</th><th>Prefix</th><th>Scopes</th><th>Created</th><th>Expires</th><th>Last used</th><th></th></tr></thead><tbody></tbody></table>`;
}
