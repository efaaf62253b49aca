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
 * The listening socket's queue of connections waiting to be accepted: the kernel's own limit
 * (net.core.somaxconn, 4096 on current Linux, caps it), not Node's 511. A loop running late
 * under a reconnection storm accepts late; once the queue is full the kernel drops the final
 * ACK of a handshake the peer already counts as done, and a balancer writes its request onto a
 * connection that is not there yet: it waits for the handshake to be retried, and the stop's
 * closing of the socket resets it (nginx: 502 for a POST). A longer queue overflows later.
 */
export const LISTEN_BACKLOG = 65_535;

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

/**
 * A stop's grace (main.ts): requests run normally until then. What is still open at its end is
 * refused for STOP_REFUSE_MS (answered 503, not run), then cut.
 */
export const STOP_GRACE_MS = 8000;

/**
 * How long an instance whose grace ran out (too loaded to finish in it) answers what still reaches
 * it with 503 before cutting what is left: a request nginx wrote onto a connection the loop had not
 * read yet gets an answer nginx may pass on (a 503), where a cut is a 502. Grace and refusal end
 * within main.ts's 10 s hard limit, with a second left to close the parts.
 */
export const STOP_REFUSE_MS = 1000;

/** An open connection of a drainableServer: when it was accepted (performance.now()), and its requests not yet answered. */
interface Open {
  at: number;
  requests: number;
}
/** A drainableServer's open connections, and how many it has accepted. */
interface Accepts {
  open: Map<net.Socket, Open>;
  count: number;
}
const accepts = new WeakMap<http.Server, Accepts>();

/** How long a drain lets a connection without a request read nothing before taking it for one nobody will use. */
const SILENT_MS = 1000;

/**
 * Closes the server's idle connections, and those without a request in progress that read
 * nothing for SILENT_MS: Node counts a connection that never sent a request, or sent part of its
 * headers and stopped, as busy, so one a client opened and left unused (a browser's preconnect)
 * or stalled in its headers would hold the drain until its cut. `asOf` is when the loop was last
 * due to read (the timer's time): a connection accepted after it has not had a read yet. Those
 * silent since SILENT_MS before `asOf` are closed at once; the others are looked at again
 * SILENT_MS later, and closed if they read nothing meanwhile. Returns the cancel of that look.
 */
function closeIdle(server: http.Server, asOf: number): () => void {
  server.closeIdleConnections();
  const open = accepts.get(server)?.open ?? new Map<net.Socket, Open>();
  const watched = new Map<net.Socket, number>();
  for (const [socket, o] of open) {
    if (o.requests > 0) continue;
    if (socket.bytesRead === 0 && asOf - o.at >= SILENT_MS) socket.destroy();
    else if (o.at <= asOf) watched.set(socket, socket.bytesRead);
  }
  if (!watched.size) return () => undefined;
  return afterReads(SILENT_MS, () => {
    for (const [socket, read] of watched) if (open.get(socket)?.requests === 0 && socket.bytesRead === read) socket.destroy();
  });
}

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
  const mine: Accepts = { open: new Map(), count: 0 };
  accepts.set(server, mine);
  server.on('connection', (socket: net.Socket) => {
    mine.count++;
    mine.open.set(socket, { at: performance.now(), requests: 0 });
    socket.once('close', () => mine.open.delete(socket));
  });
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const o = mine.open.get(req.socket);
    if (!o) return;
    o.requests++;
    res.once('close', () => o.requests--);
  });
  return server;
}

/**
 * Runs `fn` `ms` from now, once the event loop has read its sockets: a timer runs before the loop
 * reads what arrived meanwhile, so a timer that closes connections would, on a loop running late,
 * close one under a request it has not read yet (reset: nginx's 502). Read first, that request is
 * in flight and its connection no longer idle. `fn` is given the time the timer ran, and may
 * return a cancel of its own, run by the cancel returned here.
 */
function afterReads(ms: number, fn: (firedAt: number) => (() => void) | void): () => void {
  let immediate: NodeJS.Immediate | undefined;
  let inner: (() => void) | void;
  const timer = setTimeout(() => {
    const firedAt = performance.now();
    immediate = setImmediate(() => (inner = fn(firedAt)));
  }, ms);
  return () => {
    clearTimeout(timer);
    if (immediate) clearImmediate(immediate);
    inner?.();
  };
}

export interface DrainTimes {
  /** requests run normally until then */
  graceMs: number;
  /** a connection idle at the start is left to its peer until then */
  idleMs: number;
  /** after the grace, what still reaches the server is refused (`refuse`) for this long, then cut */
  refuseMs?: number;
}

/**
 * Stops the server listening once its listening socket's queue is empty: after a turn of the
 * event loop whose poll phase accepted no connection (Node 20's libuv accepts one connection a
 * turn, however many wait), or at its next look once `forced()` holds. An immediate set in the check phase
 * runs in the next turn's, so a poll phase lies between two looks at the count.
 */
function closeWhenQueueEmpty(server: http.Server, forced: () => boolean, closed: () => void): void {
  const mine = accepts.get(server);
  let seen = -1;
  const look = () => {
    const count = mine?.count ?? 0;
    if (count === seen || forced()) return void net.Server.prototype.close.call(server, closed);
    seen = count;
    setImmediate(look);
  };
  setImmediate(look);
}

/**
 * Drains the server: answers every request that reaches it (closing its connection after the
 * answer, with drainableServer), leaves idle connections to their peer for `idleMs` (then closes
 * them, and those without a request that read nothing for a second), and stops listening once `unloaded` has settled (the
 * owner's WebSocket connections closed) and the loop has then accepted every connection waiting
 * in the listening socket's queue. At `graceMs` calls `refuse` (from then on the owner answers 503
 * without running a request), stops listening if it still does (what still waits is reset),
 * closes what is idle once the loop has read its sockets, and cuts whatever is left `refuseMs`
 * later (an upgraded connection its owner did not close too).
 * Resolves once every connection is gone. A WebSocket connection is its owner's to close, until the cut.
 */
export async function drain(
  server: http.Server,
  times: DrainTimes,
  refuse: () => void = () => undefined,
  unloaded: Promise<unknown> = Promise.resolve(),
): Promise<void> {
  const { graceMs, idleMs, refuseMs = STOP_REFUSE_MS } = times;
  // net.Server's close stops listening and waits for the open connections; http.Server's own
  // close() would also close the idle ones at once, under the request a balancer may be
  // writing onto one at that very moment (a POST so cut is not sent again: a 502).
  // Closing the listening socket resets every connection queued in its backlog, each with the
  // request a balancer has already written onto it (a 502 again). The loop accepts one
  // connection a turn, and a turn lasts long under the load of its WebSocket connections: the
  // queue holds hundreds then, for seconds. So the socket closes once that load is gone and the
  // queue has been emptied (closeWhenQueueEmpty). What completes its handshake in the moment
  // between the last look and the close, or still waits for the kernel to complete it (a queue
  // that overflowed), is reset all the same: only a balancer told to stop sending to the
  // instance first avoids that (docs/deploy.md). Until the socket closes, new connections are
  // accepted and their requests run (an upgrade is refused, 503, by its owner); a balancer that
  // finds it closed sends the request to another instance.
  let stopListening!: () => void;
  let graceOver = false;
  const closed = new Promise<void>((resolve) => {
    let once = false;
    stopListening = () => {
      if (once) return;
      once = true;
      closeWhenQueueEmpty(server, () => graceOver, resolve);
    };
  });
  void unloaded.then(stopListening, stopListening);
  const cancels: Array<() => void> = [];
  if (idleMs <= 0) cancels.push(closeIdle(server, performance.now()));
  else if (idleMs < graceMs) cancels.push(afterReads(idleMs, (firedAt) => closeIdle(server, firedAt)));
  const graceEnd = setTimeout(() => {
    const firedAt = performance.now();
    // before the loop reads what arrived meanwhile: a request read from now on is refused
    refuse();
    // what still waits in the listening socket's queue is reset: an instance too loaded to empty it
    graceOver = true;
    stopListening();
    let idleLook: (() => void) | undefined;
    const idleClose = setImmediate(() => (idleLook = closeIdle(server, firedAt)));
    cancels.push(
      () => {
        clearImmediate(idleClose);
        idleLook?.();
      },
      // the cut: every connection left, an upgraded one its owner failed to close too (Node's
      // closeAllConnections() no longer knows a socket handed to 'upgrade')
      afterReads(refuseMs, () => {
        server.closeAllConnections();
        for (const socket of accepts.get(server)?.open.keys() ?? []) socket.destroy();
      }),
    );
  }, graceMs);
  cancels.push(() => clearTimeout(graceEnd));
  await closed;
  for (const cancel of cancels) cancel();
  // nothing is open any more: http.Server's close() now only ends its timeout checks
  server.close();
}
