import type Router from '@koa/router';
import Joi from 'joi';
import { identity } from '../auth/guards.js';
import { ApiRouter } from '../http/api.js';
import { TICKET, type WsTickets } from './tickets.js';

const ticketView = Joi.object({ ticket: Joi.string().pattern(TICKET), expires_in: Joi.number().integer().description('seconds') });

/** POST /api/ws/ticket (any identity) and a plain GET /ws that explains itself. */
/** The upgrade's own credential for a browser, which cannot set headers on a WebSocket (POST /api/ws/ticket). */
interface WsQuery {
  ticket?: string;
}
const wsQuery = Joi.object<WsQuery, true>({
  ticket: Joi.string().max(512).description('a ticket from POST /api/ws/ticket: single use, 30 seconds'),
});

export function gatewayRoutes(tickets: WsTickets): Router {
  const api = new ApiRouter({ tag: 'gateway' });
  api.endpoint(
    {
      method: 'POST',
      path: '/api/ws/ticket',
      operationId: 'issueWsTicket',
      summary: 'A one-time ticket for GET /ws?ticket=…',
      description:
        'For clients that cannot send headers or cookies with the WebSocket upgrade (browsers on another origin). Valid once, for 30 s, with the permissions (and key scopes) of the caller.',
      auth: 'identity',
      // minting a ticket to listen is a read, whatever the key's scopes (the ticket carries them)
      readScopedMay: true,
      responses: {
        200: {
          description: 'the ticket',
          schema: ticketView,
          headers: { 'Cache-Control': 'no-store' },
        },
      },
    },
    async (ctx) => {
      ctx.set('Cache-Control', 'no-store');
      return tickets.mint(identity(ctx));
    },
  );
  // a request that reached Koa was not an upgrade
  api.endpoint(
    {
      method: 'GET',
      path: '/ws',
      operationId: 'connectWebSocket',
      summary: 'The WebSocket gateway (send an Upgrade request)',
      description:
        'Authenticated at the upgrade by `?ticket=`, X-API-Key, Bearer, Basic or the cookie session (with an allowed Origin). Frames are JSON `{event, payload, ref?}`: the server sends `gateway:welcome`, then `system:notify` / `user:notify` with `seq`; the client may send `notifications:resume {since}`, `gateway:ping`, `socket:request`, `system:notify`, `user:notify`. A plain GET answers 426.',
      auth: 'none',
      documentedAuth: 'identity',
      query: wsQuery,
      responses: {
        101: 'switching to WebSocket',
        401: {
          description: 'no valid credential at the upgrade (a ticket unknown, used or expired; a cookie or Basic from an Origin not allowed)',
          headers: { 'WWW-Authenticate': 'the schemes accepted' },
        },
        426: { description: 'upgrade_required: not an Upgrade request', headers: { Upgrade: 'websocket' } },
      },
    },
    (ctx) => {
      ctx.set('Upgrade', 'websocket');
      ctx.status = 426;
      ctx.body = { error: { code: 'upgrade_required', message: 'this endpoint speaks WebSocket: send an Upgrade request' } };
    },
  );
  return api.router;
}
