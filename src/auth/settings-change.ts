import type { Logger } from '../log.js';
import { DomainError, fieldError, fieldErrorsText } from '../errors.js';
import type { IamStore } from '../iam/store.js';
import { buildProviders } from './chain.js';
import type { LocalProvider } from './providers/local.js';
import type { AuthSettingsStore } from './settings.js';

/**
 * Checks and stores a change of the auth settings, for the settings API and the CLI alike: read
 * again first (another instance may have changed them), the default SSO groups must exist, and
 * the login chain the result would build must build. Returns the stored changes; the caller
 * rebuilds its chain and tells the other instances.
 */
export async function changeAuthSettings(deps: { settings: AuthSettingsStore; store: IamStore; local: LocalProvider; log: Logger }, patch: Record<string, unknown>): Promise<Record<string, unknown>> {
  await deps.settings.load();
  const { settings, changes } = deps.settings.preview(patch);
  if ('sso_default_groups' in changes && settings.ssoDefaultGroups.length) {
    const found = new Set((await deps.store.groupsNamed(settings.ssoDefaultGroups)).map((g) => g.name));
    const missing = settings.ssoDefaultGroups.filter((g) => !found.has(g));
    if (missing.length) throw fieldError('sso_default_groups', `unknown group ${missing.join(', ')}`);
  }
  const { errors } = buildProviders(settings, deps.local, deps.log);
  if (errors.length) {
    const problems = errors.map((e) => ({ field: e.provider, message: e.message }));
    throw new DomainError('validation_failed', fieldErrorsText(problems), problems);
  }
  await deps.settings.save(changes);
  return changes;
}
