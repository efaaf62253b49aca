// Permissions as people read them: each id with its description from the catalog, grouped by
// namespace; what another grant already covers (a wildcard, a group) shows as granted, with
// where it comes from. Used by the group editor, the user editor and the access view.
import type { Schemas } from '../../client/api-types.js';
import { h } from './app.js';

/** GET /api/permissions, one entry. */
export type CatalogEntry = Schemas['Permission'];

/** A grant that may cover other ids, and how to name it to the reader ("feature:*", "group INT_ADMIN"). */
export interface Grant {
  id: string;
  via: string;
}

/** The catalog without namespace wildcards other than feature:* (the only one the UI offers). */
export const grantable = (catalog: CatalogEntry[]): CatalogEntry[] => catalog.filter((e) => !e.id.endsWith(':*') || e.id === 'feature:*');

/** Does `grant` give `id`? The server's rule: equal, a `:*` namespace, or api:read/write for a plugin's API. */
export function covers(grant: string, id: string): boolean {
  if (grant === id) return true;
  if (grant.endsWith(':*') && id.startsWith(grant.slice(0, -1))) return true;
  const m = /^plugin:.+:api:(read|write)$/.exec(id);
  return m !== null && grant === `api:${m[1]}`;
}

const namespaceOf = (id: string): string => (id.startsWith('plugin:') ? id.split(':').slice(0, 2).join(':') : id.split(':')[0]!);

/** Catalog entries plus granted ids it does not list (e.g. of a removed plugin), so they stay visible and removable. */
export function withUnknown(catalog: CatalogEntry[], granted: Iterable<string>): CatalogEntry[] {
  const known = new Set(catalog.map((e) => e.id));
  return [...catalog, ...[...granted].filter((p) => !known.has(p)).map((id) => ({ id, description: 'not in the catalog' }))];
}

/** One permission as text: the id and, under it, its description (and where it comes from). */
export function permissionText(e: CatalogEntry, via?: string): HTMLElement {
  return h(
    'span',
    { class: 'perm-text' },
    h('code', {}, e.id),
    e.description ? h('span', { class: 'desc' }, e.description) : null,
    via ? h('span', { class: 'via' }, via) : null,
  );
}

export interface CheckListOptions {
  /** the checkbox name, read with FormData */
  name: string;
  entries: CatalogEntry[];
  /** granted here: ticked and editable */
  granted: Iterable<string>;
  /** grants from elsewhere (e.g. the user's groups), besides the wildcards among `granted` */
  inherited?: Grant[];
}

/**
 * Checkboxes by namespace. An id covered by another grant is ticked and disabled with a note
 * ("via feature:*"); a disabled box is not part of FormData, so saving never copies it.
 * Re-renders itself when a box changes (unticking a wildcard frees what it covered).
 */
export function permissionChecks(container: HTMLElement, opts: CheckListOptions): void {
  const render = (granted: Set<string>) => {
    const grants: Grant[] = [...[...granted].filter((g) => g.endsWith(':*') || g.startsWith('api:')).map((id) => ({ id, via: id })), ...(opts.inherited ?? [])];
    const byNs = new Map<string, HTMLElement[]>();
    for (const e of opts.entries) {
      const own = granted.has(e.id);
      const from = own ? undefined : grants.find((g) => covers(g.id, e.id));
      const box = h('input', { type: 'checkbox', name: opts.name, value: e.id, checked: own || Boolean(from), disabled: Boolean(from) });
      const via = from ? `via ${from.via}${from.via !== from.id && from.id !== e.id ? ` (${from.id})` : ''}` : undefined;
      const label = h('label', { class: `perm${from ? ' covered' : ''}`, title: e.description }, box, permissionText(e, via));
      const ns = namespaceOf(e.id);
      byNs.set(ns, [...(byNs.get(ns) ?? []), label]);
    }
    container.replaceChildren(...[...byNs].map(([ns, labels]) => h('div', { class: 'perm-ns' }, h('h4', {}, ns), h('div', { class: 'checks' }, labels))));
  };
  container.onchange = (e) => {
    const changed = e.target instanceof HTMLInputElement ? e.target.value : null;
    render(new Set(grantedIn(container, opts.name)));
    if (changed) container.querySelector<HTMLInputElement>(`input[value="${CSS.escape(changed)}"]`)?.focus();
  };
  render(new Set(opts.granted));
}

/** The ids ticked here by hand (not the ones shown as covered). */
export const grantedIn = (container: HTMLElement, name: string): string[] =>
  [...container.querySelectorAll<HTMLInputElement>(`input[name="${CSS.escape(name)}"]:checked:not(:disabled)`)].map((i) => i.value);
