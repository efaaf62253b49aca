/**
 * The fair limit of a response: a bare Koa + @koa/router app that sends the very same status,
 * headers and body bytes the service sent (captured by scripts/bench.ts), with a fresh request
 * id, and does no other work. Reads the captures from the file named by argv[2]; prints its port.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Router from '@koa/router';
import Koa from 'koa';

export interface Capture {
  method: string;
  path: string;
  status: number;
  headers: Record<string, string>;
  body: string;
}

const captures = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')) as Capture[];
const app = new Koa();
const router = new Router();
for (const c of captures) {
  const body = Buffer.from(c.body, 'base64');
  router[c.method.toLowerCase() as 'get'](c.path, (ctx) => {
    ctx.status = c.status;
    for (const [k, v] of Object.entries(c.headers)) ctx.set(k, v);
    ctx.set('X-Request-Id', crypto.randomUUID());
    ctx.body = body;
  });
}
app.use(router.routes());
const server = http.createServer(app.callback());
server.listen(0, '127.0.0.1', () => process.stdout.write(`${(server.address() as AddressInfo).port}\n`));
