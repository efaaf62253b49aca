import type { ApiIdentity } from '../auth/identity.js';
import { CORE_FEATURES } from '../iam/permissions.js';

/**
 * Which permission opens which server-rendered page (docs/web.md). A page opens with its
 * feature permission or with its route:<ui_route> permission; the data on it still comes from
 * the API, which checks its own permission on every call.
 */
export interface PageDef {
  key: string;
  path: string;
  title: string;
  /** any one of these opens the page; none: every signed-in identity (the account page) */
  anyOf: readonly string[];
  /** the browser module of the page, under /static */
  module: string;
  admin: boolean;
  /**
   * the permission its panels read their data with from the API: one who opened the page by its
   * route permission alone is told so once, instead of seeing every panel answer 403
   */
  data?: string;
}

export const PAGES = {
  dashboard: { key: 'dashboard', path: '/', title: 'Dashboard', anyOf: ['feature:dashboard.view', 'route:/'], module: 'dashboard.js', admin: false },
  // one's own profile, second factors, keys and sessions: every signed-in person has an account to look after
  account: { key: 'account', path: '/settings', title: 'Account', anyOf: [], module: 'account.js', admin: false },
  users: {
    key: 'users',
    path: '/admin/users',
    title: 'Users',
    anyOf: ['feature:admin.users', 'route:/admin/users'],
    module: 'users.js',
    admin: true,
    data: 'feature:admin.users',
  },
  groups: {
    key: 'groups',
    path: '/admin/groups',
    title: 'Groups',
    anyOf: ['feature:admin.groups', 'route:/admin/groups'],
    module: 'groups.js',
    admin: true,
    data: 'feature:admin.groups',
  },
  authentication: {
    key: 'authentication',
    path: '/admin/authentication',
    title: 'Authentication',
    anyOf: ['feature:admin.settings', 'route:/admin/authentication'],
    module: 'authentication.js',
    admin: true,
    data: 'feature:admin.settings',
  },
  integrations: {
    key: 'integrations',
    path: '/admin/integrations',
    title: 'Integrations',
    anyOf: ['feature:admin.settings', 'route:/admin/integrations'],
    module: 'integrations.js',
    admin: true,
    data: 'feature:admin.settings',
  },
  plugins: {
    key: 'plugins',
    path: '/admin/plugins',
    title: 'Plugins',
    anyOf: ['feature:admin.plugins', 'route:/admin/plugins'],
    module: 'plugins.js',
    admin: true,
    data: 'feature:admin.plugins',
  },
  audit: {
    key: 'audit',
    path: '/admin/audit',
    title: 'Audit',
    anyOf: ['feature:admin.audit', 'route:/admin/audit'],
    module: 'audit.js',
    admin: true,
    data: 'feature:admin.audit',
  },
  // the providers' health is for plugin administrators too; records, leases and units come with the host services' own read permissions
  hosts: {
    key: 'hosts',
    path: '/admin/hosts',
    title: 'Host services',
    anyOf: ['route:/admin/hosts', 'socket:dns:read', 'socket:dhcp:read', 'socket:init:read', 'feature:admin.plugins'],
    module: 'hosts.js',
    admin: true,
  },
} as const satisfies Record<string, PageDef>;

export type PageKey = keyof typeof PAGES;

/** Swagger UI: public (like /openapi.json), so not in PAGES; it shares their top bar. */
export const DOCS_PAGE: PageDef = { key: 'docs', path: '/docs', title: 'API docs', anyOf: [], module: 'docs.js', admin: false };

export function pageAllowed(id: ApiIdentity, page: PageDef): boolean {
  return page.anyOf.length === 0 || page.anyOf.some((p) => id.allows(p));
}

/** The pages this identity may open, in navigation order. */
export function allowedPages(id: ApiIdentity): PageDef[] {
  return Object.values(PAGES).filter((p) => pageAllowed(id, p));
}

export const ADMIN_PAGES: PageDef[] = Object.values(PAGES).filter((p) => p.admin);

/**
 * /admin, the top bar's "Administration": it opens the first administration page this identity
 * may open, so it opens with anything that opens one of them.
 */
export const ADMIN_INDEX: PageDef = {
  key: 'admin',
  path: '/admin',
  title: 'Administration',
  anyOf: [...new Set(ADMIN_PAGES.flatMap((p) => p.anyOf))],
  module: '',
  admin: true,
};

/** The core features this identity holds: the browser modules show or hide controls by them (the API enforces them anyway). */
export function uiPermissions(id: ApiIdentity): string[] {
  return CORE_FEATURES.filter((p) => id.allows(p));
}
