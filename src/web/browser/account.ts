// The account page: password, my second factors (Security, security.ts), my API keys (token shown once), my sessions.
import { $, api, boot, busy, clearOnEdit, say, submitter, text } from './app.js';
import { keyPanel, keySection } from './key-panel.js';
import type { CatalogEntry } from './permission-list.js';
import { securityPanel } from './security.js';

const security = $('[data-security]');
// revoking the keys issued before the first factor there changes the list of keys below
if (security) securityPanel(security, () => void keys?.refresh());

// ---- password ------------------------------------------------------------------------------

const pwForm = $<HTMLFormElement>('[data-password-form]');
if (pwForm) clearOnEdit(pwForm, $('[data-msg]', pwForm));
pwForm?.addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = new FormData(pwForm);
  const msg = $('[data-msg]', pwForm);
  const body = { current_password: text(f, 'current_password'), new_password: text(f, 'new_password') };
  const done = await busy(submitter(e), msg, () =>
    api('POST', `/api/users/${encodeURIComponent(pwForm.dataset.userId ?? '')}/password`, body).then(() => true),
  );
  if (done) {
    say(msg, 'Password changed.');
    pwForm.reset();
  }
});

// ---- API keys and sessions -------------------------------------------------------------------

const keyRoot = keySection();
const keys = keyRoot
  ? keyPanel(keyRoot, {
      path: () => '/api/me/api-keys',
      sessions: $('[data-sessions] tbody'),
      unscoped: 'all of yours',
      // my effective access, each permission with its description: the scopes a key of mine may take
      scopes: async () => {
        const [access, catalog] = await Promise.all([
          api<{ permissions: string[] }>('GET', '/api/me/access'),
          api<{ permissions: CatalogEntry[] }>('GET', '/api/permissions'),
        ]);
        const describe = new Map(catalog.permissions.map((e) => [e.id, e.description]));
        return access.permissions.map((id) => ({ id, description: describe.get(id) ?? '' }));
      },
    })
  : null;

void keys?.load();
void boot();
