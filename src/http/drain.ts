import http from 'node:http';
import net from 'node:net';

/**
 * How long the service keeps an idle keep-alive connection open: far longer than a balancer in
 * front keeps its idle connections to the service (4 s in docs/deploy/nginx.conf and the
 * Caddyfile), so the balancer always closes one first and never writes a request onto one the
 * service is closing at that moment. Far longer, not just longer: a keep-alive timer that comes
 * due while the event loop is held up (seconds, under a reconnection storm) runs before the loop
 * reads a request that arrived meanwhile, and resets it (nginx: 502). Node's default of 5 s left
 * a 1 s margin, which a loaded instance overran.
 */
export const KEEP_ALIVE_MS = 65_000;

/**
 * How long a stop leaves a connection idle at its start to its peer: 2 s past a balancer's own
 * idle keep-alive (4 s in docs/deploy/nginx.conf and the Caddyfile; the deploy tests hold them at
 * least STOP_IDLE_MARGIN_MS below this), so that by then a balancer has closed each of its idle
 * connections itself and never writes a request onto one the stop is closing, even when this
 * timer runs late on a loaded instance (as KEEP_ALIVE_MS's did by a second). One still idle then
 * is a client's own (a browser's, a script's): closed, as a keep-alive timeout closes it, instead
 * of holding the stop to its grace.
 */
export const STOP_IDLE_MS = 6000;
export const STOP_IDLE_MARGIN_MS = 2000;

/** A stop's grace (main.ts): what is still open then (a request still running, a connection that never sent one) is cut. */
export const STOP_GRACE_MS = 8000;

/**
 * An HTTP server whose answers, once `draining()` holds, carry `Connection: close` and close
 * their connection: every answer, whatever wrote it (the app, its error path, the health checks).
 */
export function drainableServer(listener: http.RequestListener, draining: () => boolean): http.Server {
  type Headers = http.OutgoingHttpHeaders | http.OutgoingHttpHeader[];
  class ClosingWhenDraining extends http.ServerResponse {
    override writeHead(statusCode: number, statusMessage?: string, headers?: Headers): this;
    override writeHead(statusCode: number, headers?: Headers): this;
    override writeHead(statusCode: number, ...rest: [(string | Headers)?, Headers?]): this {
      // read by Node as it writes the headers, just below (an answer without its own writeHead call comes here too)
      if (draining()) this.shouldKeepAlive = false;
      return super.writeHead(statusCode, ...(rest as [string?, Headers?]));
    }
  }
  const server = http.createServer({ ServerResponse: ClosingWhenDraining }, listener);
  server.keepAliveTimeout = KEEP_ALIVE_MS;
  return server;
}

/**
 * Drains the server: stops listening, answers every request on a connection already open
 * (closing it after the answer, with drainableServer), leaves idle connections to their peer for
 * `idleMs` (then closes them), and cuts whatever is left at `graceMs`. Resolves once every
 * connection is gone. A WebSocket connection is its owner's to close.
 */
export async function drain(server: http.Server, graceMs: number, idleMs: number): Promise<void> {
  // net.Server's close stops listening and waits for the open connections; http.Server's own
  // close() would also close the idle ones at once, under the request a balancer may be
  // writing onto one at that very moment (a POST so cut is not sent again: a 502)
  const closed = new Promise<void>((resolve) => net.Server.prototype.close.call(server, () => resolve()));
  const timers: NodeJS.Timeout[] = [];
  if (idleMs <= 0) server.closeIdleConnections();
  else if (idleMs < graceMs) timers.push(setTimeout(() => server.closeIdleConnections(), idleMs));
  timers.push(setTimeout(() => server.closeAllConnections(), graceMs));
  await closed;
  for (const t of timers) clearTimeout(t);
  // nothing is open any more: http.Server's close() now only ends its timeout checks
  server.close();
}
