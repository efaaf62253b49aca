import { sha256 } from '../digest.js';
import type { Knex } from 'knex';
import type { Logger } from '../log.js';
import { FORGE_NAME, SCM_PROVIDERS, forgeRefusal, forgeSecretKey, keyOf, type WebhookSecrets } from './webhook-secrets.js';
import type { CommandPath } from '../iam/commands.js';
import { DomainError, fieldError, markRecorded } from '../errors.js';
import { isUniqueViolation } from '../db/knex.js';
import {
  detectScmRequest,
  headerValue,
  normalizeScmEvent,
  payloadOf,
  signatureFormProblem,
  verifyScmSignature,
  ScmPayloadError,
  type ScmProvider,
  type ScmRequest,
} from './scm/index.js';
import { MESSAGE_MAX, TITLE_MAX } from './schema.js';
import type { NotificationsService } from './service.js';

const DELIVERY_RETENTION_MS = 30 * 24 * 3600_000;
const PRUNE_EVERY_MS = 3600_000;

export interface ScmWebhookDeps {
  db: Knex;
  log: Logger;
  notifications: NotificationsService;
  /** the secrets a delivery is verified with (and their writer) */
  secrets: WebhookSecrets;
  /** refused deliveries are audit events */
  commands?: CommandPath;
  /** the attempt gate's budget of wrong signatures per address (src/auth/attempt-gate.ts) */
  wrongSignatures?: { mayPresent(ip: string): number; wrongSecret(ip: string): void };
}

class DuplicateDelivery extends Error {}

const DELIVERY_HEADER: Record<ScmProvider, string> = { gitea: 'X-Gitea-Delivery', github: 'X-GitHub-Delivery', gitlab: 'X-Gitlab-Event-UUID' };

/**
 * SCM webhook intake: verify the raw bytes with the forge's secret, then parse, de-duplicate by
 * delivery id and by the signed body's digest in the database, normalise, and broadcast one
 * notification.
 */
export class ScmWebhook {
  private lastPrune = 0;

  constructor(private readonly deps: ScmWebhookDeps) {}

  /** `administers`: the caller holds feature:admin.settings (what only the settings' administrators read is said to them). */
  async health(administers = false) {
    const view = await this.deps.secrets.view();
    const forges = {} as Record<ScmProvider, { secret_configured: boolean; secret_source: 'own' | 'shared' | null }>;
    const warnings: string[] = [];
    for (const forge of SCM_PROVIDERS) {
      const key = keyOf(forge, view);
      forges[forge] = { secret_configured: Boolean(key && !key.refused), secret_source: key?.source ?? null };
      if (key?.refused) warnings.push(forgeRefusal(forge, key));
    }
    const onShared = SCM_PROVIDERS.filter((f) => f !== 'gitlab' && forges[f].secret_configured && forges[f].secret_source === 'shared').map(
      (f) => FORGE_NAME[f],
    );
    if (forges.gitlab.secret_source === 'shared' && onShared.length) {
      const names = onShared.join(' and ');
      warnings.push(
        `GitLab shares the shared webhook secret with ${names} and sends it in clear: once a GitLab delivery has carried it, it no longer verifies ${names}; give GitLab its own secret (${forgeSecretKey('gitlab')})`,
      );
    }
    // that a stored secret does not open (and what that exposes) is the administrators' to know
    if (administers) warnings.push(...(await this.deps.secrets.unreadableWarnings(view)));
    const configured = SCM_PROVIDERS.some((f) => forges[f].secret_configured);
    const row = await this.deps.db('webhook_deliveries').max({ at: 'received_at' }).first();
    const at = row?.at == null ? null : Number(row.at);
    return {
      status: configured ? 'ok' : 'disabled',
      secret_configured: configured,
      accepts: [...SCM_PROVIDERS],
      last_delivery_at: at ? new Date(at).toISOString() : null,
      forges,
      warnings,
    };
  }

  /** Handles one delivery (receiveChecked); a delivery refused for its signature or secret is an audit event. */
  async receive(headers: Record<string, string | string[] | undefined>, rawBody: Buffer, ip: string | null = null): Promise<DeliveryOutcome> {
    try {
      return await this.receiveChecked(headers, rawBody, ip);
    } catch (err) {
      if (!(err instanceof DomainError && err.code === 'unauthorized')) throw err;
      // a signature that verifies is always taken (a forge shares its egress addresses with
      // anyone who points a repository here); a wrong one spends its address's budget, and past
      // it the answer is 429 with Retry-After (the trail coalesces the repeats)
      const budget = ip ? this.deps.wrongSignatures : undefined;
      budget?.wrongSecret(ip!);
      const wait = budget?.mayPresent(ip!) ?? 0;
      this.rejected(headers, ip, wait > 0 ? 'too many deliveries with a wrong signature from this address' : err.message);
      if (wait === 0) throw err;
      const refusal = new DomainError('rate_limited', 'too many deliveries with a wrong signature: try again later', { retry_after: wait }, wait);
      markRecorded(refusal);
      throw refusal;
    }
  }

  /** A delivery refused before it was read: one audit event (the trail coalesces repeats into one with a count). */
  private rejected(headers: Record<string, string | string[] | undefined>, ip: string | null, reason: string): void {
    const forge = detectScmRequest(headers)?.provider ?? null;
    this.deps.commands?.record({
      action: 'webhook.rejected',
      actor: { user_id: null, username: forge ? `webhook:${forge}` : 'webhook', method: 'webhook', ip },
      target: { type: 'webhook', id: forge, name: forge ? FORGE_NAME[forge] : null },
      outcome: 'denied',
      details: { reason },
    });
  }

  private async receiveChecked(headers: Record<string, string | string[] | undefined>, rawBody: Buffer, ip: string | null): Promise<DeliveryOutcome> {
    const view = await this.deps.secrets.view();
    if (!SCM_PROVIDERS.some((f) => keyOf(f, view)))
      throw new DomainError(
        'unavailable',
        'the SCM webhook is disabled: no webhook secret is configured (set one on /admin/integrations, or SERVICE_SCM_WEBHOOK_SECRET; docs/webhooks.md)',
      );
    const request = detectScmRequest(headers);
    if (!request) throw fieldError('headers', 'expected an X-Gitea-Event, X-GitHub-Event or X-Gitlab-Event header');
    const { provider } = request;
    if (provider === 'gitlab') await this.deps.secrets.markSentInClear(headerValue(headers, 'x-gitlab-token'), view, ip);
    const key = keyOf(provider, view);
    if (!key)
      throw new DomainError(
        'unavailable',
        `no webhook secret verifies ${FORGE_NAME[provider]} deliveries (set ${FORGE_NAME[provider]}'s own on /admin/integrations, or SERVICE_SCM_WEBHOOK_SECRET_${provider.toUpperCase()}; docs/webhooks.md)`,
      );
    // verify the exact bytes before anything looks inside them
    if (!verifyScmSignature(request, headers, rawBody, key.value)) {
      this.deps.log.warn({ provider, event: request.event }, 'webhook signature rejected');
      const problem = signatureFormProblem(request, headers) ?? `it does not verify under the secret set here for ${FORGE_NAME[provider]}`;
      throw new DomainError('unauthorized', `bad or missing webhook signature: ${problem}`);
    }
    // signed with a secret GitLab sends in clear: whoever saw a GitLab delivery could have made it
    if (key.refused) {
      this.deps.log.error({ provider, event: request.event, reason: key.refused }, 'webhook refused: its secret travels in clear as a GitLab token');
      throw new DomainError('unauthorized', forgeRefusal(provider, key));
    }
    const payload = payloadOf(headers, rawBody);
    // Gitea and GitHub always send a delivery id: without one a replay could not be recognised
    if (!request.deliveryId && request.provider !== 'gitlab') {
      throw fieldError(DELIVERY_HEADER[request.provider], 'is required: the delivery id de-duplicates re-sent events');
    }
    // the HMAC covers the body only, and Gitea and GitHub sign it alike: the same signed body under
    // another delivery id, or another forge's headers, is a replay
    if (request.provider !== 'gitlab') request.payloadSha256 = sha256(rawBody);

    if ((request.deliveryId || request.payloadSha256) && (await this.seen(request))) return duplicate(request);

    let normalized;
    try {
      normalized = normalizeScmEvent(request.provider, request.event, payload);
    } catch (err) {
      if (err instanceof ScmPayloadError) throw fieldError(err.field, err.reason);
      throw err;
    }
    this.prune();

    try {
      if (normalized.kind === 'ping') {
        await this.deps.db.transaction((trx) => this.record(trx, request, 'ping', null));
        return { status: 'ok' };
      }
      if (normalized.kind === 'ignored') {
        await this.deps.db.transaction((trx) => this.record(trx, request, 'ignored', null));
        this.deps.log.info({ provider: request.provider, event: request.event, reason: normalized.reason }, 'webhook event ignored');
        return { status: 'ignored', reason: normalized.reason };
      }
      const note = normalized.notification;
      const result = await this.deps.notifications.notify(
        'broadcast',
        {
          title: note.title.slice(0, TITLE_MAX),
          message: note.message.slice(0, MESSAGE_MAX),
          level: note.level,
          source: note.source,
          link: note.link && note.link.length <= 2048 ? note.link : null,
          toast: note.toast,
        },
        // the delivery id is written in the same transaction: never notified twice, never lost
        { sender: note.source, within: (trx, { id }) => this.record(trx, request, 'accepted', id) },
      );
      this.deps.log.info({ provider: request.provider, event: request.event, notification_id: result.id }, 'webhook event accepted');
      return { status: 'accepted', notification_id: result.id };
    } catch (err) {
      if (err instanceof DuplicateDelivery) return duplicate(request);
      throw err;
    }
  }

  /** The delivery id seen before from this forge, or the signed body seen before from any. */
  private async seen(request: ScmRequest): Promise<boolean> {
    const { db } = this.deps;
    if (request.deliveryId && (await db('webhook_deliveries').where({ provider: request.provider, delivery_id: request.deliveryId }).first('id'))) return true;
    return Boolean(request.payloadSha256 && (await db('webhook_payload_digests').where({ payload_sha256: request.payloadSha256 }).first('payload_sha256')));
  }

  /** Records the delivery (and the digest of a signed body) in `db`, a transaction. */
  private async record(db: Knex, request: ScmRequest, status: string, notificationId: string | null): Promise<void> {
    const receivedAt = Date.now();
    try {
      await db('webhook_deliveries').insert({
        provider: request.provider,
        delivery_id: request.deliveryId,
        payload_sha256: request.payloadSha256 ?? null,
        event: request.event.slice(0, 64),
        status,
        notification_id: notificationId,
        received_at: receivedAt,
      });
      if (request.payloadSha256) {
        await db('webhook_payload_digests').insert({
          payload_sha256: request.payloadSha256,
          provider: request.provider,
          delivery_id: request.deliveryId,
          received_at: receivedAt,
        });
      }
    } catch (err) {
      // the same delivery (or body) arrived twice at once: the unique keys decide who wins
      if (isUniqueViolation(err)) throw new DuplicateDelivery();
      throw err;
    }
  }

  /** Forgets delivery ids and body digests after 30 days (forges re-send within hours); at most once an hour. */
  private prune(): void {
    const now = Date.now();
    if (now - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = now;
    this.sweep(now).catch((err: unknown) => this.deps.log.warn({ err }, 'pruning webhook deliveries failed'));
  }

  /** Deletes delivery rows and body digests older than the retention; idempotent, on any instance. */
  async sweep(now = Date.now()): Promise<void> {
    const cutoff = now - DELIVERY_RETENTION_MS;
    await this.deps.db('webhook_deliveries').where('received_at', '<', cutoff).delete();
    await this.deps.db('webhook_payload_digests').where('received_at', '<', cutoff).delete();
  }
}

function duplicate(request: ScmRequest): DeliveryOutcome {
  return { status: 'duplicate', delivery_id: request.deliveryId };
}

/** What became of a delivery (the answer's body; ping and duplicate are 200, the others 202). */
export type DeliveryOutcome =
  | { status: 'ok' }
  | { status: 'duplicate'; delivery_id: string | null }
  | { status: 'ignored'; reason: string }
  | { status: 'accepted'; notification_id: string };
