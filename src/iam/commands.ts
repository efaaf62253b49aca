import type { Knex } from 'knex';
import { isRecorded, markRecorded, REFUSAL_CODES } from '../errors.js';
import { currentActing } from '../request-context.js';
import type { AuditAction, AuditInput, AuditTrail } from './audit.js';
import type { Actor } from './policy.js';

const isActor = (v: unknown): v is Actor =>
  typeof v === 'object' && v !== null && typeof (v as Actor).username === 'string' && typeof (v as Actor).isSystem === 'boolean';

/**
 * Who acts now: the actor the transport set at its entry (src/request-context.ts). A change with
 * nobody acting is a programming error (a transport that forgot to say who acts), never a
 * silent default: the rules would not know whom they judge.
 */
export function currentActor(): Actor {
  const actor = currentActing()?.actor;
  if (!isActor(actor)) throw new Error('nobody acts here: the transport must set the acting context (actingAs)');
  return actor;
}

/** The actor acting now, or null where no transport set one (a change the service makes of itself, following another instance). */
export function actingActor(): Actor | null {
  const actor = currentActing()?.actor;
  return isActor(actor) ? actor : null;
}

/** The actor acting now, or `fallback` where no transport set one (a change the user's own flow makes, such as a sign-in's). */
export function actorOr(fallback: Actor): Actor {
  return actingActor() ?? fallback;
}

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
