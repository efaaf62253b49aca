import type Router from '@koa/router';
import Joi from 'joi';
import { identity } from '../auth/guards.js';
import { ApiRouter } from '../http/api.js';
import { jsonBody } from '../http/body.js';
import { badField, conflict, forbidden, notFound, validationFailed } from '../http/errors.js';
import { broadcastSchema, historyQuerySchema, NOTIFICATION_ID } from './schema.js';
import { NotifyError, viewerOf } from './types.js';
import type { NotificationsService } from './service.js';

/** A NotifyError as the HTTP answer: 400 naming the field, 409 for an id of another audience. */
export function notifyErrorToHttp(err: unknown): unknown {
  if (!(err instanceof NotifyError)) return err;
  if (err.code === 'conflict') return conflict(err.message, err.problems);
  return validationFailed(err.problems);
}

const idParams = Joi.object({ id: Joi.string().pattern(NOTIFICATION_ID).required().description('the notification id') });

const notificationView = Joi.object({
  id: Joi.string(),
  seq: Joi.number().integer().allow(null),
  title: Joi.string(),
  message: Joi.string().allow(''),
  level: Joi.string().valid('info', 'success', 'warning', 'error'),
  source: Joi.string().allow(null),
  link: Joi.string().allow(null),
  created_at: Joi.string().isoDate(),
  updated_at: Joi.string().isoDate(),
  read: Joi.boolean(),
  broadcast: Joi.boolean(),
  toast: Joi.boolean(),
  cleared: Joi.boolean().description('only on cleared notifications listed with `since`'),
});

// documents the body; the service validates it (the same check as bus and ws frames)
const sendBody = broadcastSchema.keys({ user: Joi.string().max(128).description('username or id: only this user gets it (needs feature:notifications.send)') });

/** History API and POST of DESIGN section 6 (Notifications). */
export function notificationRoutes(notifications: NotificationsService): Router {
  const api = new ApiRouter({ prefix: '/api/notifications', tag: 'notifications' });
  const NOT_MINE = 'not visible to the caller';

  api.endpoint(
    {
      method: 'GET',
      path: '/',
      summary: 'My notification history',
      description: 'Without `since`: the newest first. With `since`: everything after that seq, oldest first (cleared ones included, marked `cleared`).',
      auth: 'identity',
      query: historyQuerySchema,
      responses: { 200: { description: 'a page of history', schema: Joi.object({ notifications: Joi.array().items(notificationView), unread: Joi.number().integer(), last_seq: Joi.number().integer() }) } },
    },
    async (ctx, { query }) => notifications.history(viewerOf(identity(ctx)), query),
  );

  api.endpoint({ method: 'POST', path: '/read-all', summary: 'Mark everything read', auth: 'identity', responses: { 204: 'done' } }, async (ctx) => {
    await notifications.readAll(viewerOf(identity(ctx)));
    ctx.status = 204;
  });

  api.endpoint({ method: 'POST', path: '/:id/read', summary: 'Mark one notification read', auth: 'identity', params: idParams, responses: { 204: 'done', 404: NOT_MINE } }, async (ctx, { params }) => {
    if (!(await notifications.markRead(viewerOf(identity(ctx)), params.id))) throw notFound('notification');
    ctx.status = 204;
  });

  api.endpoint({ method: 'DELETE', path: '/:id', summary: 'Dismiss one notification (for me)', auth: 'identity', params: idParams, responses: { 204: 'done', 404: NOT_MINE } }, async (ctx, { params }) => {
    if (!(await notifications.dismiss(viewerOf(identity(ctx)), params.id))) throw notFound('notification');
    ctx.status = 204;
  });

  // a broadcast needs feature:notifications.broadcast; one with `user` needs feature:notifications.send
  api.endpoint(
    {
      method: 'POST',
      path: '/',
      summary: 'Send a notification',
      description: 'To everyone (needs `feature:notifications.broadcast`) or, with `user`, to one user (needs `feature:notifications.send`). Reusing an id updates that notification.',
      auth: 'identity',
      body: sendBody,
      bodyMode: 'manual',
      responses: { 202: { description: 'stored and pushed', schema: Joi.object({ id: Joi.string(), seq: Joi.number().integer().allow(null) }) }, 403: 'missing the permission of the kind', 409: 'the id belongs to another audience' },
    },
    async (ctx) => {
      const caller = identity(ctx);
      const body = jsonBody(ctx);
      if (typeof body !== 'object' || body === null || Array.isArray(body)) throw badField('body', 'must be a JSON object');
      const targeted = Object.prototype.hasOwnProperty.call(body, 'user');
      const permission = targeted ? 'feature:notifications.send' : 'feature:notifications.broadcast';
      if (!caller.allows(permission)) throw forbidden(permission);
      try {
        const result = await notifications.notify(targeted ? 'user' : 'broadcast', body, { sender: caller.username });
        ctx.status = 202;
        ctx.body = { id: result.id, seq: result.seq };
      } catch (err) {
        throw notifyErrorToHttp(err);
      }
    },
  );

  return api.router;
}
