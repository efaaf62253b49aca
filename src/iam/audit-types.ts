import type { Actor } from './policy.js';

/** The audit trail's vocabulary: its actions, and the shapes of an event, a caller's input, a filter and a verification (src/iam/audit.ts). */

export const AUDIT_ACTIONS = [
  'auth.login',
  'auth.login_failed',
  'auth.logout',
  'auth.locked',
  'auth.mfa_enrolled',
  'auth.mfa_removed',
  'auth.mfa_reset',
  'auth.recovery_codes_regenerated',
  'auth.recovery_code_used',
  'auth.step_up',
  'auth.ldap_test_login',
  'user.created',
  'user.updated',
  'user.deleted',
  'user.password_changed',
  'user.linked',
  'group.created',
  'group.updated',
  'group.deleted',
  'key.issued',
  'key.revoked',
  'settings.changed',
  'system_key.changed',
  'secret_key.rotated',
  'socket.operation',
  'plugin.state_changed',
  'webhook.rejected',
  'request.denied',
  'audit.pruned',
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];

/** Why `filter` selects no action this version records (an action, or a prefix ending in a dot), naming those it could be; null when it does. */
export function unknownAuditAction(filter: string): string | null {
  if (filter.endsWith('.')) {
    const prefixes = [...new Set(AUDIT_ACTIONS.map((a) => a.slice(0, a.indexOf('.') + 1)))];
    return prefixes.includes(filter) ? null : `no action starts with ${filter}; prefixes: ${prefixes.join(', ')}`;
  }
  return (AUDIT_ACTIONS as readonly string[]).includes(filter) ? null : `unknown action ${filter}; actions: ${AUDIT_ACTIONS.join(', ')}`;
}
export type AuditOutcome = 'success' | 'failure' | 'denied';

export interface AuditActor {
  user_id: string | null;
  username: string;
  /** how the actor proved who they are (session_cookie, api_key, basic, system_key, cli, ...) */
  method: string | null;
  ip: string | null;
}

export interface AuditTarget {
  type: string;
  id: string | null;
  name: string | null;
}

export interface AuditEvent {
  seq: number;
  id: string;
  at: string;
  actor: AuditActor;
  action: AuditAction;
  target: AuditTarget;
  outcome: AuditOutcome;
  details: Record<string, unknown>;
  hash: string;
}

/** What a caller records: the actor as the model knows it (an Actor, or already an AuditActor). */
export interface AuditInput {
  action: AuditAction;
  actor: Actor | AuditActor;
  target?: Partial<AuditTarget> & { type: string };
  outcome?: AuditOutcome;
  /** never a secret: names of what changed, never values of secret settings */
  details?: Record<string, unknown>;
}

export interface AuditFilter {
  action?: string;
  actor?: string;
  target?: string;
  outcome?: AuditOutcome;
  since?: number;
  before?: number;
  limit?: number;
}

/**
 * What a pruning removed and where it left the chain's start: the details of its `audit.pruned`
 * event, which verify holds the chain's recorded start to (src/iam/audit-reader.ts).
 */
export interface PruneRecord {
  /** the events removed: from the old start through this seq, how many */
  from_seq: number;
  through_seq: number;
  removed: number;
  /** the retention applied, and its cutoff (epoch ms: the pruning's own time less the retention); older events went */
  retention_ms: number;
  before: number;
  /** the new start: its seq, the hash it chains to, and its own hash (null: nothing was kept, the pruning event is the start) */
  start_seq: number;
  start_prev_hash: string;
  start_hash: string | null;
}

export type VerifyResult =
  | {
      ok: true;
      events: number;
      first_seq: number | null;
      last_seq: number | null;
      /** the latest pruning the chain holds (null: never pruned, it starts at its first event) */
      pruned: (Pick<PruneRecord, 'through_seq' | 'removed' | 'retention_ms'> & { seq: number; at: string }) | null;
    }
  | { ok: false; seq: number; reason: string };
