import type { Knex } from 'knex';
import Joi from 'joi';
import type { ApiIdentity } from '../auth/identity.js';
import { OneTimeStore } from '../auth/one-time.js';

const TICKET = /^svt_[A-Za-z0-9_-]{43}$/;

/** Who a ticket stands for: the system identity, or a user with the scopes of the minting key. */
export type TicketSubject = { system: true; username: string } | { system: false; user_id: string; scopes: string[] | null; credential_id: string | null };

const subjectSchema = Joi.alternatives(
  Joi.object({ system: Joi.valid(true).required(), username: Joi.string().required() }),
  Joi.object({
    system: Joi.valid(false).required(),
    user_id: Joi.string().required(),
    scopes: Joi.array().items(Joi.string()).allow(null).required(),
    credential_id: Joi.string().allow(null).required(),
  }),
);

/**
 * One-time WebSocket tickets (POST /api/ws/ticket -> GET /ws?ticket=): 256 random bits in the
 * shared one_time_values store (SHA-256 only, data sealed under the ticket), valid 30 s,
 * consumed by the first upgrade that shows it; any instance can redeem another's ticket.
 */
export class WsTickets {
  private readonly store: OneTimeStore;

  constructor(
    db: Knex,
    readonly ttlMs = 30_000,
  ) {
    this.store = new OneTimeStore(db);
  }

  async mint(identity: ApiIdentity): Promise<{ ticket: string; expires_in: number }> {
    const subject: TicketSubject = identity.is_system
      ? { system: true, username: identity.username }
      : { system: false, user_id: identity.user_id!, scopes: identity.key_scopes ? [...identity.key_scopes] : null, credential_id: identity.credential_id };
    const ticket = await this.store.put('ws_ticket', subject, this.ttlMs);
    return { ticket, expires_in: Math.round(this.ttlMs / 1000) };
  }

  /** The subject of a live ticket, consuming it; null for unknown, used or expired tickets. */
  async redeem(ticket: string): Promise<TicketSubject | null> {
    if (!TICKET.test(ticket)) return null;
    const data = await this.store.take('ws_ticket', ticket);
    if (data === null) return null;
    const { value, error } = subjectSchema.validate(data);
    return error ? null : (value as TicketSubject);
  }
}
