import type Router from '@koa/router';
import Joi from 'joi';
import { identity } from '../auth/guards.js';
import { ApiRouter } from '../http/api.js';
import { jsonBody, sendJson } from '../http/body.js';
import { badField, forbidden, notFound } from '../http/errors.js';
import { historyQuerySchema, MAX_BATCH, NOTIFICATION_ID, sendSchema, type ValidNotify } from './schema.js';
import { validate } from '../http/validate.js';
import { viewerOf } from './types.js';
import type { NotificationsService } from './service.js';
import { historyPageView, notificationReceipt } from './views.js';

interface IdParams {
  id: string;
}

const idParams = Joi.object<IdParams, true>({ id: Joi.string().pattern(NOTIFICATION_ID).required().description('the notification id') });

const batchReceiptView = Joi.object({ notifications: Joi.array().items(notificationReceipt) });

/** The notification history API and sending (POST, batch). */
export function notificationRoutes(notifications: NotificationsService): Router {
  const api = new ApiRouter({ prefix: '/api/notifications', tag: 'notifications' });
  const NOT_MINE = 'not visible to the caller';

  api.endpoint(
    {
      method: 'GET',
      path: '/',
      operationId: 'listNotifications',
      summary: 'My notification history',
      description:
        'Without `since`: the newest first (`before` for the older pages). With `since`: everything after that seq, oldest first (cleared ones included, marked `cleared`). `since` and `before` together are a 400.',
      auth: 'identity',
      query: historyQuerySchema,
      responses: { 200: { description: 'a page of history', schema: historyPageView } },
    },
    async (ctx, { query }) => notifications.history(viewerOf(identity(ctx)), query),
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/read-all',
      operationId: 'markAllNotificationsRead',
      summary: 'Mark everything read',
      auth: 'identity',
      responses: { 204: 'done' },
    },
    async (ctx) => {
      await notifications.readAll(viewerOf(identity(ctx)));
      ctx.status = 204;
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/:id/read',
      operationId: 'markNotificationRead',
      summary: 'Mark one notification read',
      auth: 'identity',
      params: idParams,
      responses: { 204: 'done', 404: NOT_MINE },
    },
    async (ctx, { params }) => {
      if (!(await notifications.markRead(viewerOf(identity(ctx)), params.id))) throw notFound('notification');
      ctx.status = 204;
    },
  );

  api.endpoint(
    {
      method: 'DELETE',
      path: '/:id',
      operationId: 'deleteNotification',
      summary: 'Dismiss one notification (for me)',
      auth: 'identity',
      params: idParams,
      responses: { 204: 'done', 404: NOT_MINE },
    },
    async (ctx, { params }) => {
      if (!(await notifications.dismiss(viewerOf(identity(ctx)), params.id))) throw notFound('notification');
      ctx.status = 204;
    },
  );

  // a broadcast needs feature:notifications.broadcast; one with `user` needs feature:notifications.send
  api.endpoint(
    {
      method: 'POST',
      path: '/',
      operationId: 'sendNotification',
      summary: 'Send a notification',
      description:
        'To everyone (needs `feature:notifications.broadcast`) or, with `user`, to one user (needs `feature:notifications.send`). Reusing an id updates that notification.',
      auth: 'identity',
      // the audience's permission (broadcast or a user), with the key's scopes, is the service's to judge
      permissionCheck: 'operation',
      // checked by the service (as bus and ws frames are) after the permission, with the schema of its kind
      body: sendSchema,
      bodyMode: 'manual',
      responses: {
        202: { description: 'stored and pushed', schema: notificationReceipt },
        403: 'missing the permission of the kind',
        409: 'the id belongs to another audience',
      },
    },
    async (ctx) => {
      const caller = identity(ctx);
      const body = jsonBody(ctx);
      if (typeof body !== 'object' || body === null || Array.isArray(body)) throw badField('body', 'must be a JSON object');
      const targeted = Object.prototype.hasOwnProperty.call(body, 'user');
      const permission = targeted ? 'feature:notifications.send' : 'feature:notifications.broadcast';
      if (!caller.allows(permission)) throw forbidden(permission);
      const result = await notifications.notify(targeted ? 'user' : 'broadcast', body, { sender: caller.username });
      ctx.status = 202;
      sendJson(ctx, JSON.stringify({ id: result.id, seq: result.seq }));
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/batch',
      operationId: 'sendNotificationBatch',
      summary: 'Send up to 1,000 notifications in one request, each with its own audience',
      description:
        'Each item is a `POST /api/notifications` body. Validated as a whole: any bad item is a 400 naming `notifications[i].field`, and nothing is written. Written in one transaction; the answer lists `{id, seq}` in input order. Items without `user` need `feature:notifications.broadcast`, items with `user` `feature:notifications.send`. Bodies up to 8 MiB.',
      auth: 'identity',
      // the audience's permission (broadcast or a user), with the key's scopes, is the service's to judge
      permissionCheck: 'operation',
      body: batchBody,
      bodyMode: 'manual',
      // a thousand notifications of a few KiB each
      bodyLimit: 8 * 1024 * 1024,
      responses: {
        202: { description: 'stored and pushed, in input order', schema: batchReceiptView },
        400: 'an item (or the list) is invalid: nothing was written',
        403: 'missing the permission of a kind the batch holds',
        409: 'an id belongs to another audience: nothing was written',
      },
    },
    async (ctx) => {
      const caller = identity(ctx);
      const body = validate(batchEnvelope, jsonBody(ctx));
      const items = body.notifications.map((raw) => ({
        kind: Object.prototype.hasOwnProperty.call(raw, 'user') ? ('user' as const) : ('broadcast' as const),
        raw,
      }));
      for (const permission of new Set(items.map((i) => (i.kind === 'user' ? 'feature:notifications.send' : 'feature:notifications.broadcast')))) {
        if (!caller.allows(permission)) throw forbidden(permission);
      }
      const results = await notifications.notifyMany(items, { sender: caller.username });
      ctx.status = 202;
      ctx.body = { notifications: results.map((r) => ({ id: r.id, seq: r.seq })) };
    },
  );

  return api.router;
}

/** Checked before the items (each item is then checked like a single notification). */
const batchEnvelope = Joi.object<{ notifications: Array<Record<string, unknown>> }, true>({
  notifications: Joi.array().items(Joi.object().unknown(true)).min(1).max(MAX_BATCH).required(),
});
const batchBody = Joi.object<{ notifications: ValidNotify[] }, true>({ notifications: Joi.array().items(sendSchema).min(1).max(MAX_BATCH).required() });
