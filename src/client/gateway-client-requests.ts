/**
 * The socket:requests of the gateway client (src/client/gateway-client.ts) waiting for their
 * answer: each under a ref of its own, settled by the frame that names it, by its timeout, or
 * when the connection goes. It imports nothing at run time (browsers run it too).
 */
import type { SocketResponse } from './types.js';

export interface Pending {
  resolve: (r: SocketResponse) => void;
  reject: (e: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

export class PendingRequests {
  private readonly pending = new Map<string, Pending>();
  private nextRef = 0;

  /** A request under a new ref, sent by `send` (which throws when not connected): its socket:response, or a rejection. */
  add(operation: string, timeoutMs: number, send: (ref: string) => void): Promise<SocketResponse> {
    const ref = `req-${++this.nextRef}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(ref);
        reject(new Error(`${operation}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(ref, { resolve, reject, timer });
      try {
        send(ref);
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(ref);
        reject(err as Error);
      }
    });
  }

  settle(ref: string, how: (p: Pending) => void): void {
    const waiting = this.pending.get(ref);
    if (!waiting) return;
    this.pending.delete(ref);
    clearTimeout(waiting.timer);
    how(waiting);
  }

  failAll(why: string): void {
    for (const [ref, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new Error(why));
      this.pending.delete(ref);
    }
  }
}
