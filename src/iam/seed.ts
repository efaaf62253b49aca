import type { Knex } from 'knex';
import type { Config } from '../config.js';
import { DEFAULT_GROUPS, ADMIN_GROUP } from './permissions.js';
import { IamStore } from './store.js';
import { Passwords } from './passwords.js';

type SeedConfig = Pick<Config, 'adminUser' | 'adminPassword' | 'adminPasswordConfigured' | 'botUser' | 'botPassword' | 'botPasswordConfigured' | 'adminForceSuperadmin'>;

/**
 * Idempotent seeding, run on every boot and by `knex seed:run`:
 * default groups are created if missing and never overwritten (operator edits survive);
 * the admin and bot users are created if missing; an explicitly configured password is applied;
 * the superadmin flag follows SERVICE_ADMIN_FORCE_SUPERADMIN.
 * Returns the ids of users whose password changed (their cached verifications must go).
 */
export async function seedIam(db: Knex, config: SeedConfig, passwords: Passwords = new Passwords({ threads: 0 })): Promise<{ passwordChanged: string[]; changed: boolean }> {
  const store = new IamStore(db);
  let changed = false;
  for (const g of DEFAULT_GROUPS) if (await store.createGroupIfMissing(g)) changed = true;

  const passwordChanged: string[] = [];
  const bootstrap = [
    { username: config.adminUser, password: config.adminPassword, configured: config.adminPasswordConfigured, groups: [ADMIN_GROUP], roles: config.adminForceSuperadmin ? ['superadmin'] : [] },
    { username: config.botUser, password: config.botPassword, configured: config.botPasswordConfigured, groups: ['INT_USER'], roles: ['bot'] },
  ];
  for (const b of bootstrap) {
    const existing = await store.userByUsername(b.username);
    if (!existing) {
      const hashed = await passwords.hash(b.password);
      try {
        await store.createUser({ username: b.username, hashedPassword: hashed, groups: b.groups, roles: b.roles });
        await store.linkIdentity((await store.userByUsername(b.username))!.id, 'local', b.username);
      } catch (err) {
        // another instance seeded it first
        if (!(await store.userByUsername(b.username))) throw err;
      }
      changed = true;
      continue;
    }
    const patch: { hashedPassword?: string; roles?: string[] } = {};
    if (b.configured && !(await passwords.verify(b.password, existing.hashedPassword))) {
      patch.hashedPassword = await passwords.hash(b.password);
      passwordChanged.push(existing.id);
    }
    if (b.username === config.adminUser) {
      const has = existing.roles.includes('superadmin');
      if (has !== config.adminForceSuperadmin) {
        patch.roles = config.adminForceSuperadmin ? [...existing.roles, 'superadmin'] : existing.roles.filter((r) => r !== 'superadmin');
      }
    }
    if (Object.keys(patch).length) {
      await store.updateUser(existing.id, patch);
      changed = true;
    }
  }
  return { passwordChanged, changed };
}
