import type Router from '@koa/router';
import Joi from 'joi';
import type { IamComponent } from '../component.js';
import { ApiRouter } from '../../http/api.js';
import { auditActionFilter, auditEventView, auditSince } from '../schemas.js';

/** The filters and page of GET /api/audit, validated (`since` a Date, `limit` defaulted). */
interface AuditQuery {
  action?: string;
  actor?: string;
  target?: string;
  outcome?: 'success' | 'failure' | 'denied';
  since?: Date;
  before?: number;
  limit: number;
}

const query = Joi.object<AuditQuery, true>({
  action: auditActionFilter,
  actor: Joi.string().max(256).description('a username or user id'),
  target: Joi.string().max(256).description("a target's id or name"),
  outcome: Joi.string().valid('success', 'failure', 'denied'),
  since: auditSince,
  before: Joi.number().integer().min(1).description('events before this seq (the next page: `next_before`)'),
  limit: Joi.number().integer().min(1).max(500).default(50),
});

const auditPageView = Joi.object({
  events: Joi.array().items(auditEventView),
  next_before: Joi.number().integer().allow(null).description('the `before` of the next page; null: this is the last'),
});

/** GET /api/audit: the audit trail, newest first, filtered and paged by seq. */
export function auditRoutes(iam: IamComponent): Router {
  const api = new ApiRouter({ prefix: '/api/audit', tag: 'audit' });
  api.endpoint(
    {
      method: 'GET',
      path: '/',
      operationId: 'listAuditEvents',
      summary: 'The audit trail: who did what, when, from where, and whether it was allowed',
      description: 'Newest first. Holders of the permission also receive each new event live as an `audit:event` ws frame.',
      auth: { permission: 'feature:admin.audit' },
      query,
      responses: { 200: { description: 'a page of events', schema: auditPageView } },
    },
    async (ctx, { query: q }) => {
      ctx.set('Cache-Control', 'no-store');
      return iam.audit.list({
        action: q.action,
        actor: q.actor,
        target: q.target,
        outcome: q.outcome,
        since: q.since ? q.since.getTime() : undefined,
        before: q.before,
        limit: q.limit,
      });
    },
  );
  return api.router;
}
