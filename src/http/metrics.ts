import client from 'prom-client';
import type { Context } from 'koa';

/**
 * Prometheus metrics (GET /metrics). One registry per service instance, so tests that run
 * several services in one process do not share counters.
 */
export class Metrics {
  readonly registry = new client.Registry();
  readonly httpDuration: client.Histogram<'method' | 'route' | 'status'>;

  constructor() {
    client.collectDefaultMetrics({ register: this.registry });
    this.httpDuration = new client.Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request duration by route pattern',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [this.registry],
    });
  }

  gauge(name: string, help: string, collect: () => number): void {
    new client.Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(collect());
      },
    });
  }

  counter(name: string, help: string, labelNames: string[] = []): client.Counter<string> {
    return new client.Counter({ name, help, labelNames, registers: [this.registry] });
  }

  /** A counter by one label whose values are kept elsewhere (`read` answers them, label value to count, at each scrape). */
  countersOf(name: string, help: string, label: string, read: () => Record<string, number>): void {
    new client.Counter({
      name,
      help,
      labelNames: [label],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [value, n] of Object.entries(read())) this.inc({ [label]: value }, n);
      },
    });
  }

  /** GET /metrics */
  async serve(ctx: Context): Promise<void> {
    ctx.type = this.registry.contentType;
    ctx.body = await this.registry.metrics();
  }

  /** the histogram of each (method, route, status), found by one string key instead of label hashing */
  private readonly children = new Map<string, client.Histogram.Internal<'method' | 'route' | 'status'>>();

  /** Counts one request under its route pattern, never the raw path (ids would explode the label set). */
  observe(ctx: Context, ms: number): void {
    const route = String((ctx as { _matchedRoute?: unknown })._matchedRoute ?? 'unmatched');
    const key = `${ctx.method} ${ctx.status} ${route}`;
    let child = this.children.get(key);
    if (!child) {
      child = this.httpDuration.labels({ method: ctx.method, route, status: String(ctx.status) });
      this.children.set(key, child);
    }
    child.observe(ms / 1000);
  }
}
