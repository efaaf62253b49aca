import WebSocket from 'ws';
import { GatewayClient, type SocketFactory } from '../../src/client/gateway-client.js';

/**
 * The load of test/cluster/faults.test.ts and scripts/bench/cluster-faults.ts: WebSocket
 * clients (the typed client, through nginx) that record every seq they are handed, and a
 * broadcaster that POSTs at a steady rate through nginx and records every answer. A
 * notification's message is `<ms it was sent> <phase>`: its delivery latency is counted in the
 * phase it was sent in (a histogram per phase, 1 ms steps).
 */

export interface Answer {
  kind: 'single' | 'batch' | 'direct';
  start: number;
  end: number;
  /** the HTTP status, or 0 when the request failed without one */
  status: number;
  error?: string;
  seqs: number[];
}

/** Delivery latencies of one phase, 1 ms steps up to a minute (later ones count as a minute). */
export class Histogram {
  private readonly counts = new Uint32Array(60_001);
  total = 0;
  add(ms: number): void {
    this.counts[Math.max(0, Math.min(60_000, Math.round(ms)))]!++;
    this.total++;
  }
  pct(p: number): number {
    if (!this.total) return NaN;
    const want = Math.ceil((p / 100) * this.total);
    let seen = 0;
    for (let ms = 0; ms < this.counts.length; ms++) if ((seen += this.counts[ms]!) >= want) return ms;
    return 60_000;
  }
}

/** A time a client had no connection: from losing it (a resume on a live connection is none) to being live again (null: not yet). */
export interface Outage {
  client: number;
  from: number;
  to: number | null;
}

export class Clients {
  readonly clients: GatewayClient[] = [];
  /** per client, a byte per seq: 1 once handed on */
  private got: Uint8Array[] = [];
  duplicates = 0;
  /** clients told their resume starts after the oldest notification kept (retention pruned what they missed) */
  readonly truncated = new Set<number>();
  readonly outages: Outage[] = [];
  private readonly down = new Map<number, Outage>();
  readonly latency: Histogram[] = [];
  /** the phase new notifications are sent in (the broadcaster reads it) */
  phase = 0;

  constructor(url: string, count: number, headers: Record<string, string>, backoff?: { initialMs: number; maxMs: number }) {
    for (let i = 0; i < count; i++) {
      const c = new GatewayClient({ url, WebSocket: WebSocket as unknown as SocketFactory, headers, ...(backoff ? { backoff } : {}) });
      this.got.push(new Uint8Array(1024));
      c.on('notification', ({ payload }) => {
        if (typeof payload.seq !== 'number') return;
        this.mark(i, payload.seq);
        const [sent, phase] = (payload.message ?? '').split(' ').map(Number);
        if (Number.isFinite(sent) && Number.isFinite(phase)) (this.latency[phase!] ??= new Histogram()).add(Date.now() - sent!);
      });
      c.on('truncated', () => this.truncated.add(i));
      c.on('state', ({ state }) => {
        const open = this.down.get(i);
        if (state === 'live') {
          if (open) open.to = Date.now();
          this.down.delete(i);
        } else if (!open && this.everLive.has(i) && state !== 'resuming') {
          const o = { client: i, from: Date.now(), to: null };
          this.outages.push(o);
          this.down.set(i, o);
        }
        if (state === 'live') this.everLive.add(i);
      });
      this.clients.push(c);
    }
  }

  private readonly everLive = new Set<number>();

  private mark(i: number, seq: number): void {
    let bits = this.got[i]!;
    if (seq >= bits.length) {
      const grown = new Uint8Array(Math.max(seq + 1, bits.length * 2));
      grown.set(bits);
      this.got[i] = bits = grown;
    }
    if (bits[seq]) this.duplicates++;
    bits[seq] = 1;
  }

  has(i: number, seq: number): boolean {
    return !!this.got[i]![seq];
  }

  async ready(timeoutMs: number, batch = 200): Promise<void> {
    for (let i = 0; i < this.clients.length; i += batch) await Promise.all(this.clients.slice(i, i + batch).map((c) => c.ready(timeoutMs)));
  }

  notLive(): number {
    return this.clients.filter((c) => c.state !== 'live').length;
  }

  /** Clients missing one of `seqs` (ascending), with the first seq each misses. */
  missing(seqs: number[]): Array<{ client: number; seq: number }> {
    const out: Array<{ client: number; seq: number }> = [];
    for (let i = 0; i < this.clients.length; i++) {
      const seq = seqs.find((s) => !this.has(i, s));
      if (seq !== undefined) out.push({ client: i, seq });
    }
    return out;
  }

  /**
   * Closes every client, once it is live (or after `waitMs`): the typed client closing a Node
   * `ws` socket that is still connecting makes `ws` emit an error nobody listens to any more.
   */
  async close(waitMs = 5000): Promise<void> {
    await Promise.allSettled(this.clients.map((c) => c.ready(waitMs)));
    // one still connecting after that: its socket's error (and only that one) is let pass
    const stray = (err: Error) => {
      if (!/WebSocket was closed before the connection was established/.test(err.message)) throw err;
    };
    process.on('uncaughtException', stray);
    for (const c of this.clients) c.close();
    await new Promise((r) => setTimeout(r, 200));
    process.off('uncaughtException', stray);
  }
}

/** POSTs broadcasts through `origin` at `rate` notifications per second; every tenth request is a batch of two. */
export class Broadcaster {
  readonly answers: Answer[] = [];
  private stopped = false;
  private loop: Promise<void> | null = null;
  private readonly inflight = new Set<Promise<void>>();

  constructor(
    private readonly origin: string,
    private readonly auth: string,
    private readonly rate: number,
    private readonly phase: () => number,
  ) {}

  start(): void {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    const started = Date.now();
    for (let i = 0; !this.stopped; i++) {
      const wait = started + (i * 1000) / this.rate - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      if (this.stopped) break;
      if (i % 10 === 1) continue; // the batch of i - 1 carried this one
      const p = this.send(i % 10 === 0 ? 'batch' : 'single');
      this.inflight.add(p);
      void p.finally(() => this.inflight.delete(p));
    }
  }

  private async send(kind: 'single' | 'batch'): Promise<void> {
    const start = Date.now();
    const item = () => ({ title: `faults ${kind}`, message: `${Date.now()} ${this.phase()}`, toast: false });
    const body = kind === 'single' ? item() : { notifications: [item(), item()] };
    const answer: Answer = { kind, start, end: 0, status: 0, seqs: [] };
    try {
      const res = await fetch(`${this.origin}/api/notifications${kind === 'batch' ? '/batch' : ''}`, {
        method: 'POST',
        headers: { authorization: this.auth, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(60_000),
      });
      answer.status = res.status;
      const text = await res.text();
      if (res.status === 202) {
        const json = JSON.parse(text) as { seq: number } | { notifications: Array<{ seq: number }> };
        answer.seqs = 'notifications' in json ? json.notifications.map((n) => n.seq) : [json.seq];
      } else if (res.status !== 503) answer.error = text.slice(0, 300);
    } catch (err) {
      const cause = (err as Error & { cause?: Error }).cause;
      answer.error = `${(err as Error).message}${cause ? `: ${cause.message}` : ''}`;
    }
    answer.end = Date.now();
    this.answers.push(answer);
  }

  /** Stops sending and waits for every answer. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
    while (this.inflight.size) await Promise.all([...this.inflight]);
  }

  /** Every seq acknowledged so far (202), ascending. */
  acked(): number[] {
    return this.answers.flatMap((a) => (a.status === 202 ? a.seqs : [])).sort((a, b) => a - b);
  }
}
