import Joi from 'joi';
import type { ApiIdentity, CredentialProof } from '../auth/identity.js';
import type { OneTimeStore } from '../auth/one-time.js';

/** A ticket as minted: svt_ and 256 bits in base64url. */
export const TICKET = /^svt_[A-Za-z0-9_-]{43}$/;

/**
 * Who a ticket stands for: the system identity, or a user with the scopes of the minting key;
 * either way with the proof of the minting credential, so the connection it opens ends with it.
 */
export type TicketSubject =
  { system: true; username: string; proof: CredentialProof } | { system: false; user_id: string; scopes: string[] | null; proof: CredentialProof };

const proofSchema = Joi.alternatives(
  Joi.object({ kind: Joi.valid('system_key', 'password').required(), stamp: Joi.string().hex().length(64).required() }),
  // a web session's proof also says when it signed in and last proved a second factor (src/auth/identity.ts)
  Joi.object({
    kind: Joi.valid('credential').required(),
    id: Joi.string().required(),
    expires_at: Joi.number().allow(null).required(),
    signed_in_at: Joi.number(),
    mfa_at: Joi.number().allow(null),
  }),
);

const subjectSchema = Joi.alternatives(
  Joi.object({ system: Joi.valid(true).required(), username: Joi.string().required(), proof: proofSchema.required() }),
  Joi.object({
    system: Joi.valid(false).required(),
    user_id: Joi.string().required(),
    scopes: Joi.array().items(Joi.string()).allow(null).required(),
    proof: proofSchema.required(),
  }),
);

/**
 * One-time WebSocket tickets (POST /api/ws/ticket -> GET /ws?ticket=): 256 random bits in the
 * shared one_time_values store (SHA-256 only, data sealed under the ticket), valid 30 s,
 * consumed by the first upgrade that shows it; any instance can redeem another's ticket.
 */
export class WsTickets {
  constructor(
    private readonly store: OneTimeStore,
    readonly ttlMs = 30_000,
  ) {}

  async mint(identity: ApiIdentity): Promise<{ ticket: string; expires_in: number }> {
    if (!identity.proof) throw new Error('an identity without a credential proof cannot mint a ticket');
    const subject: TicketSubject = identity.isSystem
      ? { system: true, username: identity.username, proof: identity.proof }
      : { system: false, user_id: identity.userId!, scopes: identity.keyScopes ? [...identity.keyScopes] : null, proof: identity.proof };
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
