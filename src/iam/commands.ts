import type { Knex } from 'knex';
import { isRecorded, markRecorded, REFUSAL_CODES } from '../errors.js';
import type { AuditAction, AuditInput, AuditTrail } from './audit.js';
import type { Actor } from './policy.js';

/** A named action on a target, by an actor: what the trail records of a change or a refusal. */
export interface Command {
  action: AuditAction;
  actor: Actor;
  target: { type: string; id?: string | null; name?: string | null };
}

/**
 * The one path of a privileged change (docs/architecture.md, "Where to add"): the area's rules
 * (which throw a DomainError), the change and its audit events in one transaction, and every
 * refusal on the way (a rule, step-up) recorded `denied` once, by the same path. The model's
 * writers (users, groups, keys, second factors, settings, the system key, the plugin host) run
 * their changes here; the transports record a refusal that reached them without having been
 * recorded (a permission check, a route's step-up), so none goes unrecorded and none twice.
 */
export class CommandPath {
  constructor(private readonly audit: Pick<AuditTrail, 'within' | 'record'>) {}

  /** Runs `body` as `command`: a refusal it throws is recorded, then goes on to the caller. */
  async run<T>(command: Command, body: () => Promise<T>): Promise<T> {
    try {
      return await body();
    } catch (err) {
      this.refused(command, err);
      throw err;
    }
  }

  /** The change and its events, in one transaction; published once it committed. */
  within<T>(change: (trx: Knex.Transaction) => Promise<T>, events: (result: T) => AuditInput | AuditInput[] | null): Promise<T> {
    return this.audit.within(change, events);
  }

  /** Records `err` as a refusal of `command`, when it is one and nobody recorded it yet. */
  refused(command: Command, err: unknown): void {
    if (!(err instanceof Error) || isRecorded(err)) return;
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'string' || !REFUSAL_CODES.has(code)) return;
    markRecorded(err);
    this.audit.record({ ...command, outcome: 'denied', details: { reason: err.message, code } });
  }

  /** An event with no change of the model (a sign-in, a step-up, a factor used): batched. */
  record(input: AuditInput): void {
    this.audit.record(input);
  }
}
