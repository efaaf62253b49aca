import { createHash } from 'node:crypto';
import type Router from '@koa/router';
import Joi from 'joi';
import type { Knex } from 'knex';
import type { Logger } from '../log.js';
import { ApiRouter } from '../http/api.js';
import { lockableSecretRoutes } from '../http/secret-routes.js';
import { DomainError, fieldError } from '../errors.js';
import { isUniqueViolation } from '../db/knex.js';
import { detectScmRequest, normalizeScmEvent, verifyScmSignature, ScmPayloadError, type ScmProvider, type ScmRequest } from './scm/index.js';
import { MESSAGE_MAX, TITLE_MAX } from './schema.js';
import type { NotificationsService } from './service.js';
import { setting } from '../settings-table.js';

export const SCM_PROVIDERS: readonly ScmProvider[] = ['gitea', 'github', 'gitlab'];
export const WEBHOOK_SECRET_NAMESPACE = 'core/settings';
export const WEBHOOK_SECRET_KEY = 'scm_webhook_secret';
const DELIVERY_RETENTION_MS = 30 * 24 * 3600_000;
const PRUNE_EVERY_MS = 3600_000;

/** The encrypted settings store (IamComponent.secrets). */
export interface SecretStore {
  get(namespace: string, key: string): Promise<string | null>;
  set(namespace: string, key: string, value: string): Promise<void>;
  delete(namespace: string, key: string): Promise<void>;
}

export interface ScmWebhookDeps {
  db: Knex;
  log: Logger;
  notifications: NotificationsService;
  secrets: SecretStore;
  /** SERVICE_SCM_WEBHOOK_SECRET; when set it wins and the settings API cannot change it */
  envSecret: string | null;
}

class DuplicateDelivery extends Error {}

const DELIVERY_HEADER: Record<ScmProvider, string> = { gitea: 'X-Gitea-Delivery', github: 'X-GitHub-Delivery', gitlab: 'X-Gitlab-Event-UUID' };

/**
 * SCM webhook intake: verify the raw bytes, then parse, de-duplicate by
 * delivery id in the database, normalise, and broadcast one notification.
 */
export class ScmWebhook {
  private lastPrune = 0;

  constructor(private readonly deps: ScmWebhookDeps) {}

  get lockedByEnv(): boolean {
    return Boolean(this.deps.envSecret);
  }

  /** Environment first, then the secrets store; null = intake disabled. */
  async secret(): Promise<string | null> {
    if (this.deps.envSecret) return this.deps.envSecret;
    const stored = await this.deps.secrets.get(WEBHOOK_SECRET_NAMESPACE, WEBHOOK_SECRET_KEY);
    return stored ? stored : null;
  }

  async health() {
    const configured = Boolean(await this.secret());
    const row = await this.deps.db('webhook_deliveries').max({ at: 'received_at' }).first();
    const at = row?.at == null ? null : Number(row.at);
    return {
      status: configured ? 'ok' : 'disabled',
      secret_configured: configured,
      accepts: [...SCM_PROVIDERS],
      last_delivery_at: at ? new Date(at).toISOString() : null,
    };
  }

  /** Handles one delivery: what became of it, or a DomainError saying why it was refused. */
  async receive(headers: Record<string, string | string[] | undefined>, rawBody: Buffer): Promise<DeliveryOutcome> {
    const secret = await this.secret();
    if (!secret) throw new DomainError('unavailable', 'the SCM webhook is disabled: no webhook secret is configured');
    const request = detectScmRequest(headers);
    if (!request) throw fieldError('headers', 'expected an X-Gitea-Event, X-GitHub-Event or X-Gitlab-Event header');
    // verify the exact bytes before anything looks inside them
    if (!verifyScmSignature(request, headers, rawBody, secret)) {
      this.deps.log.warn({ provider: request.provider, event: request.event }, 'webhook signature rejected');
      throw new DomainError('unauthorized', 'bad or missing webhook signature');
    }
    let payload: unknown;
    try {
      payload = JSON.parse(rawBody.toString('utf8'));
    } catch {
      throw fieldError('body', 'is not valid JSON');
    }
    if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw fieldError('body', 'must be a JSON object');
    // Gitea and GitHub always send a delivery id: without one a replay could not be recognised
    if (!request.deliveryId && request.provider !== 'gitlab') {
      throw fieldError(DELIVERY_HEADER[request.provider], 'is required: the delivery id de-duplicates re-sent events');
    }
    // the HMAC covers the body only: the same signed body under another delivery id is a replay
    if (request.provider !== 'gitlab') request.payloadSha256 = createHash('sha256').update(rawBody).digest('hex');

    if ((request.deliveryId || request.payloadSha256) && (await this.seen(request))) return duplicate(request);

    let normalized;
    try {
      normalized = normalizeScmEvent(request.provider, request.event, payload);
    } catch (err) {
      if (err instanceof ScmPayloadError) throw fieldError(err.field, err.message);
      throw err;
    }
    this.prune();

    try {
      if (normalized.kind === 'ping') {
        await this.record(this.deps.db, request, 'ping', null);
        return { status: 'ok' };
      }
      if (normalized.kind === 'ignored') {
        await this.record(this.deps.db, request, 'ignored', null);
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

  private async seen(request: ScmRequest): Promise<boolean> {
    const row = await this.deps
      .db('webhook_deliveries')
      .where({ provider: request.provider })
      .andWhere((q) => {
        if (request.deliveryId) q.orWhere({ delivery_id: request.deliveryId });
        if (request.payloadSha256) q.orWhere({ payload_sha256: request.payloadSha256 });
      })
      .first('id');
    return Boolean(row);
  }

  private async record(db: Knex, request: ScmRequest, status: string, notificationId: string | null): Promise<void> {
    try {
      await db('webhook_deliveries').insert({
        provider: request.provider,
        delivery_id: request.deliveryId,
        payload_sha256: request.payloadSha256 ?? null,
        event: request.event.slice(0, 64),
        status,
        notification_id: notificationId,
        received_at: Date.now(),
      });
    } catch (err) {
      // the same delivery arrived twice at once: the unique index decides who wins
      if (isUniqueViolation(err)) throw new DuplicateDelivery();
      throw err;
    }
  }

  /** Forgets delivery ids after 30 days (forges re-send within hours); at most once an hour. */
  private prune(): void {
    const now = Date.now();
    if (now - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = now;
    this.deps
      .db('webhook_deliveries')
      .where('received_at', '<', now - DELIVERY_RETENTION_MS)
      .delete()
      .catch((err: unknown) => this.deps.log.warn({ err }, 'pruning webhook deliveries failed'));
  }

  async setSecret(secret: string): Promise<void> {
    await this.deps.secrets.set(WEBHOOK_SECRET_NAMESPACE, WEBHOOK_SECRET_KEY, secret);
  }

  async clearSecret(): Promise<void> {
    await this.deps.secrets.delete(WEBHOOK_SECRET_NAMESPACE, WEBHOOK_SECRET_KEY);
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

/** Public intake and health under /api/notifications/webhook/scm. */
export function webhookRoutes(webhook: ScmWebhook): Router {
  const api = new ApiRouter({ prefix: '/api/notifications/webhook/scm', tag: 'webhooks' });
  api.endpoint(
    {
      method: 'GET',
      path: '/health',
      summary: 'Health of the webhook intake',
      auth: 'none',
      responses: {
        200: {
          description: 'the intake state',
          schema: Joi.object({ status: Joi.string().valid('ok', 'disabled'), secret_configured: Joi.boolean(), accepts: Joi.array().items(Joi.string()), last_delivery_at: Joi.string().isoDate().allow(null) }),
        },
      },
    },
    () => webhook.health(),
  );
  api.endpoint(
    {
      method: 'POST',
      path: '/',
      summary: 'Receive a Gitea, GitHub or GitLab event',
      description:
        'Authenticated by the webhook secret, verified over the raw body before parsing: `X-Gitea-Signature` (hex HMAC-SHA256), `X-Hub-Signature-256` (`sha256=<hex>`) or `X-Gitlab-Token`. A delivery id seen before answers `duplicate`.',
      auth: 'none',
      bodyMode: 'raw',
      bodyContentType: 'application/json',
      responses: {
        200: 'ping, or a duplicate delivery',
        202: 'accepted (`notification_id`) or ignored',
        401: 'bad or missing signature',
        413: 'body over 1 MiB',
        503: 'no webhook secret is configured',
      },
    },
    async (ctx) => {
      const outcome = await webhook.receive(ctx.req.headers, ctx.request.rawBody);
      ctx.status = outcome.status === 'ok' || outcome.status === 'duplicate' ? 200 : 202;
      ctx.body = outcome;
    },
  );
  return api.router;
}

/** PUT|DELETE /api/settings/webhook-secret [feature:admin.settings]; env-set -> 409. */
export function webhookSecretRoutes(webhook: ScmWebhook): Router {
  return lockableSecretRoutes({
    prefix: '/api/settings/webhook-secret',
    what: 'webhook secret',
    setting: setting('SERVICE_SCM_WEBHOOK_SECRET'),
    field: 'secret',
    clearing: 'the intake answers 503',
    secret: {
      lockedByEnv: webhook.lockedByEnv,
      configured: async () => Boolean(await webhook.secret()),
      set: (value) => webhook.setSecret(value),
      clear: () => webhook.clearSecret(),
    },
  });
}
