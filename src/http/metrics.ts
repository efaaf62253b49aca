import client from 'prom-client';
import type { Context, Next } from 'koa';

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
    new client.Gauge({ name, help, registers: [this.registry], collect() { this.set(collect()); } });
  }

  counter(name: string, help: string, labelNames: string[] = []): client.Counter<string> {
    return new client.Counter({ name, help, labelNames, registers: [this.registry] });
  }

  middleware() {
    return async (ctx: Context, next: Next) => {
      if (ctx.path === '/metrics' && ctx.method === 'GET') {
        ctx.type = this.registry.contentType;
        ctx.body = await this.registry.metrics();
        return;
      }
      const end = this.httpDuration.startTimer();
      try {
        await next();
      } finally {
        // the matched route pattern, never the raw path (ids would explode the label set)
        const route = (ctx as any)._matchedRoute ?? 'unmatched';
        end({ method: ctx.method, route: String(route), status: String(ctx.status) });
      }
    };
  }
}
