import crypto from 'node:crypto';
import type { AuditAction, AuditEvent, AuditOutcome } from './audit-types.js';

/**
 * The audit trail's chain, pure functions: an event's details and strings as it keeps them,
 * its canonical JSON and hash chained to the previous one's, the GENESIS the first event chains
 * to, and events to and from database rows (src/iam/audit.ts).
 */

export const GENESIS = crypto.createHash('sha256').update('service-core audit trail').digest('hex');

/** How deep, and how large, an event's details may be: beyond, they are cut (an event is a record, not a payload store). */
const DETAILS_DEPTH = 6;
const DETAILS_BYTES = 8192;
const TEXT_MAX = 512;

/** A string the database stores as given: lone surrogates (cut emoji) as U+FFFD, at most `max` code points. */
export function wellFormed(text: string, max = TEXT_MAX): string {
  const fixed = text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
  const points = Array.from(fixed);
  return points.length > max ? points.slice(0, max).join('') : fixed;
}

/** Details as an event keeps them: plain JSON, well-formed strings, bounded depth and size. */
function boundedDetails(value: unknown, depth = 0): unknown {
  if (value === null || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : String(value);
  if (typeof value === 'string') return wellFormed(value);
  if (typeof value !== 'object') return String(value);
  if (depth >= DETAILS_DEPTH) return '[deeper not recorded]';
  if (Array.isArray(value)) return value.slice(0, 100).map((v) => boundedDetails(v, depth + 1));
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>)
      .slice(0, 100)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [wellFormed(k, 128), boundedDetails(v, depth + 1)]),
  );
}

export function detailsOf(details: Record<string, unknown> | undefined): Record<string, unknown> {
  const bounded = (boundedDetails(details ?? {}) ?? {}) as Record<string, unknown>;
  return JSON.stringify(bounded).length <= DETAILS_BYTES ? bounded : { truncated: true, fields: Object.keys(bounded).slice(0, 50) };
}

/** JSON with every object's keys sorted: the same event always hashes the same. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** The hash of an event (everything but `hash`) chained to the previous one's. */
export function eventHash(prevHash: string, event: Omit<AuditEvent, 'hash'>): string {
  return crypto.createHash('sha256').update(prevHash).update('\n').update(canonicalJson(event)).digest('hex');
}

export interface Row {
  seq: number | string;
  id: string;
  at: number | string;
  actor_user_id: string | null;
  actor_username: string;
  actor_method: string | null;
  actor_ip: string | null;
  action: string;
  target_type: string;
  target_id: string | null;
  target_name: string | null;
  outcome: string;
  details: string;
  hash: string;
}

export function eventOf(r: Row): AuditEvent {
  return {
    seq: Number(r.seq),
    id: r.id,
    at: new Date(Number(r.at)).toISOString(),
    actor: { user_id: r.actor_user_id, username: r.actor_username, method: r.actor_method, ip: r.actor_ip },
    action: r.action as AuditAction,
    target: { type: r.target_type, id: r.target_id, name: r.target_name },
    outcome: r.outcome as AuditOutcome,
    details: JSON.parse(r.details) as Record<string, unknown>,
    hash: r.hash,
  };
}

export function rowOf(e: AuditEvent) {
  return {
    seq: e.seq,
    id: e.id,
    at: Date.parse(e.at),
    actor_user_id: e.actor.user_id,
    actor_username: e.actor.username,
    actor_method: e.actor.method,
    actor_ip: e.actor.ip,
    action: e.action,
    target_type: e.target.type,
    target_id: e.target.id,
    target_name: e.target.name,
    outcome: e.outcome,
    details: JSON.stringify(e.details),
    hash: e.hash,
  };
}
