import Router from '@koa/router';
import { identity, requireIdentity } from '../auth/guards.js';
import type { WsTickets } from './tickets.js';

/** POST /api/ws/ticket (any identity) and a plain GET /ws that explains itself. */
export function gatewayRoutes(tickets: WsTickets): Router {
  const r = new Router();
  r.post('/api/ws/ticket', requireIdentity, async (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    ctx.body = await tickets.mint(identity(ctx));
  });
  // a request that reached Koa was not an upgrade
  r.get('/ws', async (ctx) => {
    ctx.set('Upgrade', 'websocket');
    ctx.status = 426;
    ctx.body = { error: { code: 'upgrade_required', message: 'this endpoint speaks WebSocket: send an Upgrade request' } };
  });
  return r;
}
