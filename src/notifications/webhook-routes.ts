/**
 * The SCM webhook's HTTP routes: the public intake and its health under
 * /api/notifications/webhook/scm (they call src/notifications/webhook.ts), and the settings
 * routes of the webhook secrets (src/notifications/webhook-secrets.ts).
 */
import type Router from '@koa/router';
import Joi from 'joi';
import { actor } from '../auth/guards.js';
import { ApiRouter } from '../http/api.js';
import { readOwnBytes } from '../http/body.js';
import { lockableSecretRoutes } from '../http/secret-routes.js';
import { holds } from '../iam/policy.js';
import { setting } from '../settings-table.js';
import { DELIVERY_ID, EVENT_NAME, GITHUB_SIGNATURE, HEX_SHA256 } from './scm/index.js';
import type { ScmWebhook } from './webhook.js';
import { FORGE_NAME, SCM_PROVIDERS, type WebhookSecrets } from './webhook-secrets.js';

const forgeHealthView = Joi.object({
  secret_configured: Joi.boolean().description('false while it has no secret, or only one GitLab sends in clear'),
  secret_source: Joi.string().valid('own', 'shared').allow(null).description('its own secret or the shared one'),
}).id('WebhookForgeHealth');

const healthView = Joi.object({
  status: Joi.string().valid('ok', 'disabled'),
  secret_configured: Joi.boolean().description('some forge has a secret its deliveries may be verified with'),
  accepts: Joi.array()
    .items(Joi.string().valid(...SCM_PROVIDERS))
    .description("the forges whose deliveries the intake understands (all, always); which it can verify now is each forge's secret_configured"),
  last_delivery_at: Joi.string().isoDate().allow(null),
  forges: Joi.object(Object.fromEntries(SCM_PROVIDERS.map((forge) => [forge, forgeHealthView]))),
  warnings: Joi.array()
    .items(Joi.string())
    .description('secrets GitLab sends in clear; to holders of feature:admin.settings, stored secrets the master key does not open'),
});

/** DeliveryOutcome, by the status it is answered with. */
const deliveryDoneView = Joi.alternatives().try(
  Joi.object({ status: Joi.string().valid('ok').description('a ping') }),
  Joi.object({ status: Joi.string().valid('duplicate'), delivery_id: Joi.string().allow(null) }),
);
const deliveryTakenView = Joi.alternatives().try(
  Joi.object({ status: Joi.string().valid('accepted'), notification_id: Joi.string().description('the broadcast notification') }),
  Joi.object({ status: Joi.string().valid('ignored'), reason: Joi.string().description('why no notification was made (an event or action not handled)') }),
);

/** The headers the intake reads (detectScmRequest, verifyScmSignature): documentation only, the intake checks them. */
const webhookHeaders = Joi.object({
  'X-Gitea-Event': Joi.string()
    .pattern(EVENT_NAME)
    .description('the Gitea event (wins over the X-GitHub-Event Gitea also sends); one of the three event headers is required'),
  'X-GitHub-Event': Joi.string().pattern(EVENT_NAME).description('the GitHub event; not with X-Gitlab-Event'),
  'X-Gitlab-Event': Joi.string().pattern(EVENT_NAME).description('the GitLab event, e.g. `Push Hook`; not with X-GitHub-Event'),
  'X-Gitea-Delivery': Joi.string().pattern(DELIVERY_ID).description('the Gitea delivery id: required with X-Gitea-Event'),
  'X-GitHub-Delivery': Joi.string().pattern(DELIVERY_ID).description('the GitHub delivery id: required with X-GitHub-Event'),
  'Idempotency-Key': Joi.string().description('the GitLab delivery id (GitLab 17.4 and later; the same when GitLab re-sends a delivery)'),
  'X-Gitlab-Event-UUID': Joi.string().description('the GitLab delivery id without Idempotency-Key; GitLab deliveries without either are not de-duplicated'),
  'X-Gitea-Signature': Joi.string().pattern(HEX_SHA256).description('Gitea: hex HMAC-SHA256 of the raw body'),
  'X-Hub-Signature-256': Joi.string().pattern(GITHUB_SIGNATURE).description('GitHub: `sha256=` and the hex HMAC-SHA256 of the raw body'),
  'X-Gitlab-Token': Joi.string().description('GitLab: the secret itself'),
});

const forgePayload = Joi.object<Record<string, unknown>>().description("the forge's event payload, as the forge sends it");

/** Public intake and health under /api/notifications/webhook/scm. */
export function webhookRoutes(webhook: ScmWebhook): Router {
  const api = new ApiRouter({ prefix: '/api/notifications/webhook/scm', tag: 'webhooks' });
  api.endpoint(
    {
      method: 'GET',
      path: '/health',
      operationId: 'getScmWebhookHealth',
      summary: 'Health of the webhook intake',
      description:
        'Open to anyone; a caller holding feature:admin.settings also reads the warnings about stored secrets that do not open under the master key.',
      auth: 'optional',
      responses: { 200: { description: 'the intake state', schema: healthView } },
    },
    (ctx) => webhook.health(Boolean(ctx.state.identity && holds(ctx.state.identity, 'feature:admin.settings'))),
  );
  api.endpoint(
    {
      method: 'POST',
      path: '/',
      operationId: 'receiveScmWebhook',
      summary: 'Receive a Gitea, GitHub or GitLab event',
      description:
        "Authenticated by the forge's own webhook secret, else the shared one, verified over the raw body before parsing: `X-Gitea-Signature` (hex HMAC-SHA256), `X-Hub-Signature-256` (`sha256=<hex>`) or `X-Gitlab-Token`. A secret GitLab sends in clear never verifies a GitHub or Gitea signature. A delivery id seen before, or a signed body seen before from any forge, answers `duplicate`.",
      auth: 'none',
      headers: webhookHeaders,
      body: forgePayload,
      bodyMode: 'raw',
      bodyContentType: 'application/json',
      responses: {
        200: { description: 'a ping, or a duplicate delivery (nothing more happens)', schema: deliveryDoneView },
        202: { description: 'accepted (`notification_id`: the notification broadcast) or ignored (`reason`)', schema: deliveryTakenView },
        400: 'validation_failed: no (or an unreadable) event header, or X-Gitlab-Event with X-GitHub-Event; no delivery id from Gitea or GitHub; a body that is not a JSON object; or an event payload without a field it needs (details name the header or field)',
        401: 'bad or missing signature, or one made with a secret GitLab sends in clear',
        429: {
          description: 'this address sent too many deliveries with a wrong signature (20 a minute): nothing is read until it may again',
          headers: { 'Retry-After': 'seconds' },
        },
        503: {
          description:
            "unavailable: no webhook secret verifies the forge's deliveries (or none is configured at all); or booting, or the database is not reachable",
          headers: { 'Retry-After': 'seconds to wait (booting, database away)' },
        },
      },
    },
    async (ctx) => {
      const outcome = await webhook.receive(ctx.req.headers, await readOwnBytes(ctx), ctx.ip);
      ctx.status = outcome.status === 'ok' || outcome.status === 'duplicate' ? 200 : 202;
      ctx.body = outcome;
    },
  );
  return api.router;
}

/**
 * GET|PUT|DELETE /api/settings/webhook-secret (shared) and /api/settings/webhook-secret/<forge>
 * [feature:admin.settings]; set in the environment -> 409.
 */
export function webhookSecretRoutes(secrets: WebhookSecrets): Router[] {
  return [
    lockableSecretRoutes({
      prefix: '/api/settings/webhook-secret',
      what: 'webhook secret',
      setting: setting('SERVICE_SCM_WEBHOOK_SECRET'),
      field: 'secret',
      clearing: 'forges without their own secret answer 503',
      secret: secrets.setting(null),
      actorOf: actor,
    }),
    ...SCM_PROVIDERS.map((forge) =>
      lockableSecretRoutes({
        prefix: `/api/settings/webhook-secret/${forge}`,
        what: `${FORGE_NAME[forge]} webhook secret`,
        setting: setting(`SERVICE_SCM_WEBHOOK_SECRET_${forge.toUpperCase()}`),
        field: 'secret',
        clearing: `${FORGE_NAME[forge]} deliveries are verified with the shared secret again`,
        secret: secrets.setting(forge),
        actorOf: actor,
      }),
    ),
  ];
}
