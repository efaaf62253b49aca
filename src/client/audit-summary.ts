/**
 * One line saying what an audit event did, from its details: the summary column of the audit
 * page (src/web/browser/audit.ts) and of `service-core audit list` (src/cli/audit-commands.ts).
 * Only names and access are in details (never a secret's value), so the line shows none either.
 */

/** The parts of an event the summary reads. */
export interface SummarisedEvent {
  action: string;
  /** success, failure or denied: a refusal or failure says why after what was tried */
  outcome?: string;
  target: { id: string | null };
  details: Record<string, unknown>;
}

const names = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

/** `groups +ops -dev`: what a list gained and lost, or nothing when neither. */
function change(label: string, added: string[], removed: string[]): string | null {
  return added.length || removed.length ? `${label} ${[...added.map((x) => `+${x}`), ...removed.map((x) => `-${x}`)].join(' ')}` : null;
}

/** A list's change as user.updated records it (`groups_added`, `groups_removed`). */
const listChange = (d: Record<string, unknown>, key: string, label: string) => change(label, names(d[`${key}_added`]), names(d[`${key}_removed`]));

function userUpdated(d: Record<string, unknown>): string {
  const listed = ['groups', 'extra_permissions', 'roles', 'disabled'];
  const parts = [
    typeof d.disabled === 'boolean' ? (d.disabled ? 'disabled' : 'enabled') : null,
    listChange(d, 'groups', 'groups'),
    listChange(d, 'extra_permissions', 'permissions'),
    listChange(d, 'roles', 'roles'),
    // the other fields changed by name (e-mail, display name): their values are in the details
    ...names(d.fields)
      .map((f) => f.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`))
      .filter((f) => !listed.includes(f)),
  ];
  return parts.filter(Boolean).join(', ');
}

/** A list in a line: the first few names, then how many more. */
function someOf(list: string[], label: string): string | null {
  if (!list.length) return null;
  const shown = list.slice(0, 3).join(', ');
  return `${label} ${shown}${list.length > 3 ? ` and ${list.length - 3} more` : ''}`;
}

/** `permissions +a -b`: what a group's permissions gained and lost (group.updated records both lists). */
function permissionChange(d: Record<string, unknown>): string | null {
  if (!Array.isArray(d.permissions) || !Array.isArray(d.previous_permissions)) return null;
  const [now, before] = [names(d.permissions), names(d.previous_permissions)];
  return change(
    'permissions',
    now.filter((p) => !before.includes(p)),
    before.filter((p) => !now.includes(p)),
  );
}

const text = (v: unknown): string | null => (typeof v === 'string' && v ? v : null);
const line = (...parts: Array<string | null>) => parts.filter(Boolean).join(', ');

/**
 * What the event did in a few words ('' when its action says it all); a refusal or failure also
 * says why (the reason the command path recorded: "only a superadmin may set roles").
 */
export function auditSummary(e: SummarisedEvent): string {
  const what = whatItDid(e);
  const why = e.outcome && e.outcome !== 'success' ? text(e.details?.reason) : null;
  return line(what || null, why);
}

function whatItDid(e: SummarisedEvent): string {
  const d = e.details ?? {};
  switch (e.action) {
    case 'settings.changed':
    case 'system_key.changed': {
      // the settings changed by name (a webhook secret, the system key: set or cleared)
      const changed = names(d.fields);
      const what = (changed.length ? changed : [e.target.id ?? '']).filter(Boolean).join(', ');
      return typeof d.change === 'string' ? `${what} ${d.change}`.trim() : what;
    }
    case 'user.updated':
      return userUpdated(d);
    case 'auth.login':
      return [typeof d.provider === 'string' ? d.provider : null, typeof d.factor === 'string' ? `second factor ${d.factor}` : null].filter(Boolean).join(', ');
    case 'auth.recovery_code_used':
      return typeof d.left === 'number' ? `${d.left} left` : '';
    case 'user.created':
      return line(someOf(names(d.groups), 'groups'), someOf(names(d.extra_permissions), 'permissions'), d.password === false ? 'single sign-on only' : null);
    case 'user.linked':
      return line(text(d.provider), text(d.via));
    case 'group.created':
      return someOf(names(d.permissions), 'permissions') ?? '';
    case 'group.updated':
      return line(
        text(d.previous_name) && `renamed from ${String(d.previous_name)}`,
        permissionChange(d),
        // a plugin's role granted to a group (the role ledger records what it added, and whose role)
        listChange(d, 'permissions', 'permissions'),
        text(d.plugin) && `role ${text(d.role) ?? '?'} of the plugin ${String(d.plugin)}`,
        names(d.fields).includes('description') ? 'description' : null,
      );
    case 'key.issued':
      return line(
        text(d.owner) && `for ${String(d.owner)}`,
        Array.isArray(d.scopes) ? someOf(names(d.scopes), 'scopes') : 'all of the owner’s access',
        text(d.expires_at) && `until ${String(d.expires_at).slice(0, 10)}`,
      );
    case 'key.revoked':
      return text(d.owner) ? `of ${String(d.owner)}` : '';
    case 'plugin.state_changed':
      return line(d.enabled === true ? 'enabled' : d.enabled === false ? 'disabled' : null, text(d.state));
    case 'auth.mfa_enrolled':
    case 'auth.mfa_removed':
    case 'auth.step_up':
      return text(d.factor) ?? '';
    case 'socket.operation':
      return text(d.error) ?? '';
    default:
      // a refusal by a permission check names the permission (its reason, as every refusal's, comes after)
      return line(text(d.permission) && `missing ${String(d.permission)}`, text(d.provider));
  }
}
