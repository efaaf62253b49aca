import Router from '@koa/router';
import Joi from 'joi';
import { identity, requireIdentity } from '../auth/guards.js';
import { jsonBody } from '../http/body.js';
import { validate } from '../http/validate.js';
import { badField, conflict, forbidden, notFound, validationFailed } from '../http/errors.js';
import { historyQuerySchema, NOTIFICATION_ID } from './schema.js';
import { NotifyError, viewerOf } from './types.js';
import type { NotificationsService } from './service.js';

const idParam = Joi.string().pattern(NOTIFICATION_ID).required();

/** A NotifyError as the HTTP answer: 400 naming the field, 409 for an id of another audience. */
export function notifyErrorToHttp(err: unknown): unknown {
  if (!(err instanceof NotifyError)) return err;
  if (err.code === 'conflict') return conflict(err.message, err.problems);
  return validationFailed(err.problems);
}

/** History API and POST of DESIGN section 6 (Notifications). */
export function notificationRoutes(notifications: NotificationsService): Router {
  const r = new Router({ prefix: '/api/notifications' });

  r.get('/', requireIdentity, async (ctx) => {
    const q = validate(historyQuerySchema, ctx.query, 'query');
    ctx.body = await notifications.history(viewerOf(identity(ctx)), q);
  });

  r.post('/read-all', requireIdentity, async (ctx) => {
    await notifications.readAll(viewerOf(identity(ctx)));
    ctx.status = 204;
  });

  r.post('/:id/read', requireIdentity, async (ctx) => {
    const id = validate(idParam, ctx.params.id, 'params');
    if (!(await notifications.markRead(viewerOf(identity(ctx)), id))) throw notFound('notification');
    ctx.status = 204;
  });

  r.delete('/:id', requireIdentity, async (ctx) => {
    const id = validate(idParam, ctx.params.id, 'params');
    if (!(await notifications.dismiss(viewerOf(identity(ctx)), id))) throw notFound('notification');
    ctx.status = 204;
  });

  // a broadcast needs feature:notifications.broadcast; one with `user` needs feature:notifications.send
  r.post('/', requireIdentity, async (ctx) => {
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
  });

  return r;
}
