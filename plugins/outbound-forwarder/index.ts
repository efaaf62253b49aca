import crypto from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
// type-only imports: erased at run time, so this folder works wherever SERVICE_PLUGINS_DIR points
import type { Context } from 'koa';
import type { OutboundNotification } from '../../src/bus/events.js';
import type { PluginContext, PluginSdk } from '../../src/plugins/types.js';
import { checkLiteral, publicLookup, RefusedDestination } from './destination.js';

/**
 * Example plugin 1: forwards every `notification:outbound` to everyone as a signed JSON POST;
 * one addressed to a single user only where a trusted actor set forward_user_notifications (it is
 * that user's alone: no administrator reads it through the API either, so a plugin
 * administrator must not be able to send it to a url of their own).
 *
 * Wire format (docs/plugins.md, "Outbound forwarder"):
 *   POST <url>   Content-Type: application/json
 *   X-Service-Event: notification.outbound
 *   X-Service-Delivery: <uuid, the same on every retry of one notification>
 *   X-Service-Signature-256: sha256=<hex HMAC-SHA256 of the raw body under the secret>
 *   body: {"event": "notification.outbound", "delivery_id": "...", "notification": {...}}
 * 2xx = delivered; 408, 429, 5xx, timeouts and network errors are retried with exponential
 * backoff up to max_attempts; any other answer (including a redirect) is final. A destination
 * that is not a public address is refused at connect time (./destination.ts), unless a trusted
 * actor set allow_private_destinations.
 */

interface Settings {
  url: string | null;
  secret: string | null;
  max_attempts: number;
  backoff_ms: number;
  timeout_ms: number;
  allow_private_destinations: boolean;
  forward_user_notifications: boolean;
}

const MAX_PENDING = 1000;
const MAX_BACKOFF_MS = 60_000;

let stopController: AbortController | null = null;

/**
 * The forwarder's settings and their rules: the host checks a change against them before it
 * stores it (400 naming the field), and setup receives the converted values as ctx.settings.
 */
export function settingsSchema({ Joi }: PluginSdk) {
  return Joi.object({
    url: Joi.string()
      .uri({ scheme: ['http', 'https'] })
      .allow(null),
    // deliveries are always signed: a url needs a secret
    secret: Joi.when('url', {
      is: Joi.string().required(),
      then: Joi.string().min(16).required().messages({ 'string.base': '{{#label}} is required when url is set: deliveries are always signed' }),
      otherwise: Joi.string().min(16).allow(null),
    }),
    max_attempts: Joi.number().integer().min(1).max(20).required(),
    backoff_ms: Joi.number().integer().min(0).max(MAX_BACKOFF_MS).required(),
    timeout_ms: Joi.number().integer().min(100).max(120_000).required(),
    allow_private_destinations: Joi.boolean().required(),
    forward_user_notifications: Joi.boolean().required(),
  });
}

export function setup(ctx: PluginContext): void {
  const { Joi } = ctx.sdk;
  const settings = ctx.settings as unknown as Settings;

  const stop = new AbortController();
  stopController = stop;
  const signal = AbortSignal.any([stop.signal, ctx.signal]);
  const stats = {
    delivered: 0,
    failed: 0,
    refused: 0,
    retries: 0,
    pending: 0,
    dropped: 0,
    withheld: 0,
    last_error: null as string | null,
    last_delivery_at: null as string | null,
  };
  const target = settings.url ? new URL(settings.url).origin : null;

  ctx.endpoint(
    {
      method: 'GET',
      path: '/status',
      operationId: 'getOutboundForwarderStatus',
      summary: 'Outbound forwarder: what it delivered, retried, dropped, and the last failure',
      permission: `plugin:${ctx.id}:deliveries.read`,
      responses: {
        200: {
          description: 'the delivery statistics since the plugin started',
          schema: Joi.object({
            configured: Joi.boolean().description('a url is set'),
            target: Joi.string().allow(null).description('the origin of the url (never its path or query); null when idle'),
            delivered: Joi.number().integer().min(0),
            failed: Joi.number().integer().min(0).description('notifications given up'),
            refused: Joi.number().integer().min(0).description('notifications not sent: the url is not a public address (allow_private_destinations is off)'),
            retries: Joi.number().integer().min(0),
            pending: Joi.number().integer().min(0).description('deliveries waiting or in flight'),
            dropped: Joi.number().integer().min(0).description('notifications dropped because too many were pending'),
            withheld: Joi.number().integer().min(0).description('notifications addressed to one user and not forwarded (forward_user_notifications is off)'),
            last_error: Joi.string().allow(null),
            last_delivery_at: Joi.string().isoDate().allow(null),
          }),
        },
      },
    },
    () => ({ configured: Boolean(settings.url), target, ...stats }),
  );

  // a synthetic notification, to check the receiver end to end
  ctx.endpoint(
    {
      method: 'POST',
      path: '/test',
      operationId: 'testOutboundForwarder',
      summary: 'Outbound forwarder: queue a test delivery',
      responses: {
        202: { description: 'queued', schema: Joi.object({ status: Joi.string().valid('queued') }) },
        409: 'conflict: no url is configured (the forwarder idles)',
        503: 'unavailable: too many deliveries pending (or the service is starting, or its database is away)',
      },
    },
    (koa: Context) => {
      if (!settings.url) throw new ctx.sdk.HttpError(409, 'conflict', 'the forwarder has no url configured');
      const now = new Date().toISOString();
      const accepted = enqueue({
        id: `forwarder-test-${crypto.randomUUID()}`,
        seq: null,
        title: 'Forwarder test',
        message: 'A test delivery of the outbound forwarder',
        level: 'info',
        source: `plugin:${ctx.id}`,
        link: null,
        user: null,
        created_at: now,
      });
      if (!accepted) throw new ctx.sdk.HttpError(503, 'unavailable', 'too many deliveries pending');
      koa.status = 202;
      return { status: 'queued' };
    },
  );

  if (!settings.url) {
    ctx.log.info('no url configured (setting url); the forwarder idles');
    return;
  }
  const url = new URL(settings.url);
  const secret = settings.secret!;
  const client = url.protocol === 'https:' ? https : http;
  // an agent of its own: no socket another part of the service opened (unchecked) is reused
  const agent = new client.Agent({ keepAlive: false });
  signal.addEventListener('abort', () => agent.destroy(), { once: true });
  const lookup = settings.allow_private_destinations ? undefined : publicLookup;

  /** One POST; resolves the status (the answer's body is read and dropped). */
  const post = (body: string, headers: Record<string, string>, attemptSignal: AbortSignal) =>
    new Promise<number>((resolve, reject) => {
      // at connect time: an IP literal here (no lookup runs for it), a name in `lookup`
      if (lookup) checkLiteral(url.hostname);
      const req = client.request(
        url,
        { method: 'POST', headers: { ...headers, 'Content-Length': String(Buffer.byteLength(body)) }, agent, lookup, signal: attemptSignal },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', reject);
          res.on('close', () => {
            if (!res.complete) reject(new Error('the answer was cut off'));
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      signal.addEventListener(
        'abort',
        () => {
          clearTimeout(t);
          resolve();
        },
        { once: true },
      );
    });

  async function deliver(notification: OutboundNotification): Promise<string> {
    const deliveryId = crypto.randomUUID();
    const body = JSON.stringify({ event: 'notification.outbound', delivery_id: deliveryId, notification });
    const signature = 'sha256=' + crypto.createHmac('sha256', secret).update(body).digest('hex');
    let reason = 'not attempted';
    let attempt: number;
    for (attempt = 1; attempt <= settings.max_attempts && !signal.aborted; attempt++) {
      let retryable = true;
      const attemptSignal = AbortSignal.any([signal, AbortSignal.timeout(settings.timeout_ms)]);
      try {
        const headers = {
          'Content-Type': 'application/json',
          'User-Agent': `service-outbound-forwarder/${ctx.manifest.version}`,
          'X-Service-Event': 'notification.outbound',
          'X-Service-Delivery': deliveryId,
          'X-Service-Signature-256': signature,
        };
        const status = await post(body, headers, attemptSignal);
        if (status >= 200 && status < 300) {
          stats.delivered += 1;
          stats.last_delivery_at = new Date().toISOString();
          ctx.log.debug({ delivery_id: deliveryId, notification_id: notification.id, attempt }, 'delivered');
          return deliveryId;
        }
        reason = `HTTP ${status}`;
        retryable = status >= 500 || status === 408 || status === 429;
      } catch (err) {
        if (err instanceof RefusedDestination) {
          // final: nothing was sent; the log names the delivery, never the notification's content
          stats.refused += 1;
          stats.last_error = err.message;
          ctx.log.warn({ delivery_id: deliveryId, notification_id: notification.id, target: url.origin, reason: err.message }, 'delivery refused');
          return deliveryId;
        }
        const e = err as Error & { code?: string; errors?: Array<{ code?: string }> };
        const timedOut = !signal.aborted && (attemptSignal.reason as Error | undefined)?.name === 'TimeoutError';
        reason = timedOut ? `timed out after ${settings.timeout_ms} ms` : (e.code ?? e.errors?.[0]?.code ?? e.message);
      }
      if (!retryable || attempt === settings.max_attempts) break;
      stats.retries += 1;
      ctx.log.warn({ delivery_id: deliveryId, attempt, reason }, 'delivery failed; retrying');
      await sleep(Math.min(settings.backoff_ms * 2 ** (attempt - 1), MAX_BACKOFF_MS));
    }
    if (signal.aborted) reason = 'the plugin stopped';
    stats.failed += 1;
    stats.last_error = reason;
    ctx.log.error(
      { delivery_id: deliveryId, notification_id: notification.id, attempts: Math.min(attempt, settings.max_attempts), reason },
      'delivery given up',
    );
    return deliveryId;
  }

  /** Runs a delivery in the background, bounded so a dead receiver cannot pile up memory (only called once a url is set). */
  function enqueue(notification: OutboundNotification): string | null {
    if (stats.pending >= MAX_PENDING) {
      stats.dropped += 1;
      ctx.log.error({ notification_id: notification.id }, 'too many deliveries pending; notification dropped');
      return null;
    }
    stats.pending += 1;
    const done = deliver(notification);
    done.finally(() => {
      stats.pending -= 1;
    });
    return 'queued';
  }

  ctx.bus.on('notification:outbound', (n) => {
    if (n.user !== null && !settings.forward_user_notifications) stats.withheld += 1;
    else enqueue(n);
  });

  ctx.log.info({ target, max_attempts: settings.max_attempts, user_notifications: settings.forward_user_notifications }, 'forwarding outbound notifications');
}

export function teardown(): void {
  // pending retries end at once; an attempt in flight is aborted
  stopController?.abort();
  stopController = null;
}
