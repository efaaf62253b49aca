/**
 * One line saying what an audit event did, from its details: the summary column of the audit
 * page (src/web/browser/audit.ts) and of `service-core audit list` (src/cli/audit-commands.ts).
 * Only names and access are in details (never a secret's value), so the line shows none either.
 */

/** The parts of an event the summary reads. */
export interface SummarisedEvent {
  action: string;
  target: { id: string | null };
  details: Record<string, unknown>;
}

const names = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

/** `groups +ops -dev`: what a list gained and lost (user.updated), or nothing when neither. */
function listChange(d: Record<string, unknown>, key: string, label: string): string | null {
  const added = names(d[`${key}_added`]).map((x) => `+${x}`);
  const removed = names(d[`${key}_removed`]).map((x) => `-${x}`);
  return added.length || removed.length ? `${label} ${[...added, ...removed].join(' ')}` : null;
}

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

/** What the event did in a few words ('' when its action says it all). */
export function auditSummary(e: SummarisedEvent): string {
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
    default:
      return '';
  }
}
