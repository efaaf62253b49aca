/**
 * Permission ids and matching rules, in one place.
 */
import { fieldError } from '../errors.js';

export const CORE_FEATURES = [
  'feature:dashboard.view',
  'feature:dashboard.admin_sections',
  'feature:notifications.broadcast',
  'feature:notifications.send',
  'feature:admin.users',
  'feature:admin.groups',
  'feature:admin.settings',
  'feature:admin.plugins',
  'feature:admin.audit',
] as const;

/** Server-rendered UI pages, each gated by route:<ui_route> (the account page /settings and /docs are open to everyone signed in, and to all) */
export const UI_ROUTES = [
  '/',
  '/admin/users',
  '/admin/groups',
  '/admin/authentication',
  '/admin/integrations',
  '/admin/plugins',
  '/admin/audit',
  '/admin/hosts',
] as const;

export interface CatalogEntry {
  id: string;
  description: string;
  plugin?: string;
}

export const CORE_CATALOG: CatalogEntry[] = [
  { id: 'feature:dashboard.view', description: 'see the dashboard' },
  { id: 'feature:dashboard.admin_sections', description: 'see the administrative sections of the dashboard' },
  { id: 'feature:notifications.broadcast', description: 'send a notification to everyone' },
  { id: 'feature:notifications.send', description: 'send a notification to one user' },
  { id: 'feature:admin.users', description: 'manage users and their keys' },
  { id: 'feature:admin.groups', description: 'manage groups and their permissions' },
  { id: 'feature:admin.settings', description: 'manage authentication settings, the system key and the webhook secret' },
  { id: 'feature:admin.plugins', description: 'enable and disable plugins' },
  { id: 'feature:admin.audit', description: 'read the audit trail (and its live tail)' },
  { id: 'feature:*', description: 'every core feature' },
  { id: 'api:read', description: 'read through the API (also satisfies every plugin:<id>:api:read)' },
  { id: 'api:write', description: 'write through the API (also satisfies every plugin:<id>:api:write)' },
  { id: 'socket:container:cleanup', description: 'remove stale runner containers' },
  { id: 'socket:container:spawn', description: 'start runner containers (read-only mounts from the managed dirs)' },
  { id: 'socket:container:mount_rw', description: 'mount a managed directory read-write into a runner' },
  { id: 'socket:mounts:repair', description: 'repair permissions of a managed directory' },
  { id: 'socket:dns:read', description: 'list the DNS records of the zones the service writes in' },
  { id: 'socket:dns:write', description: 'add and remove DNS records in those zones, flush names' },
  { id: 'socket:dhcp:read', description: 'list DHCP leases and reservations' },
  { id: 'socket:dhcp:write', description: 'release leases, add and remove reservations (and their DNS records)' },
  { id: 'socket:init:read', description: 'list the allowed systemd units and their state' },
  { id: 'socket:init:control', description: 'start, stop, restart and reload the allowed systemd units' },
  ...UI_ROUTES.map((r) => ({ id: `route:${r}`, description: `open the ${r} page` })),
];

export const DEFAULT_GROUPS: { name: string; description: string; permissions: string[] }[] = [
  { name: 'INT_VIEWER', description: 'read-only access', permissions: ['feature:dashboard.view', 'api:read'] },
  {
    name: 'INT_USER',
    description: 'everyday users',
    permissions: ['feature:dashboard.view', 'api:read', 'api:write', 'feature:dashboard.admin_sections'],
  },
  { name: 'INT_ADMIN', description: 'administrators', permissions: ['feature:*', 'api:read', 'api:write'] },
];
export const DEFAULT_GROUP_NAMES = DEFAULT_GROUPS.map((g) => g.name);
export const ADMIN_GROUP = 'INT_ADMIN';
/** administering users: creating, changing, deleting them, setting their passwords */
export const ADMIN_USERS_PERMISSION = 'feature:admin.users';

const PLUGIN_API = /^plugin:(.+):api:(read|write)$/;

/** Does a set of granted ids contain `wanted`? Grants ending in `:*` cover their namespace. */
export function grantsInclude(granted: ReadonlySet<string> | readonly string[], wanted: string): boolean {
  const set = granted instanceof Set ? granted : new Set(granted as readonly string[]);
  if (set.has(wanted)) return true;
  // api:read / api:write are the permanent fallback for per-plugin API permissions
  const m = PLUGIN_API.exec(wanted);
  if (m && set.has(`api:${m[2]}`)) return true;
  for (const g of set) {
    if (g.endsWith(':*') && wanted.startsWith(g.slice(0, -1))) return true;
  }
  return false;
}

/** Expands wildcard grants against the catalog, for display (access view). */
export function expandGrants(granted: Iterable<string>, catalog: readonly CatalogEntry[]): string[] {
  const out = new Set<string>();
  const list = [...granted];
  for (const g of list) {
    if (g.endsWith(':*')) {
      const ns = g.slice(0, -1);
      for (const e of catalog) if (e.id.startsWith(ns) && !e.id.endsWith(':*')) out.add(e.id);
    } else out.add(g);
  }
  return [...out].sort();
}

/** Is `p` a permission id that can be granted: a catalog entry, or a wildcard over a catalog namespace? */
export function isKnownPermission(catalog: readonly CatalogEntry[], p: string): boolean {
  if (catalog.some((e) => e.id === p)) return true;
  if (!p.endsWith(':*')) return false;
  const ns = p.slice(0, -1);
  return catalog.some((e) => e.id.startsWith(ns));
}

/** Refuses (validation_failed naming `field`) the permissions of a list that cannot be granted. */
export function requireKnownPermissions(field: string, permissions: readonly string[] | null | undefined, isKnown: (p: string) => boolean): void {
  const unknown = (permissions ?? []).filter((p) => !isKnown(p));
  if (unknown.length) throw fieldError(field, `unknown permission ${unknown.join(', ')}`);
}

export const PERMISSION_ID = /^[a-z][a-z0-9_.-]*(:[A-Za-z0-9_./*-]+)+$/;
