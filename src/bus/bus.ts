import EventEmitter2Module from 'eventemitter2';
import type { EventEmitter2 as EventEmitter2Class } from 'eventemitter2';
import type { Logger } from 'pino';
import type { EventMap, EventName } from './events.js';

const { EventEmitter2 } = EventEmitter2Module as unknown as { EventEmitter2: typeof EventEmitter2Class };

export type Handler<E extends EventName> = (payload: EventMap[E]) => void | Promise<void>;

/**
 * Typed event bus over eventemitter2. A handler that throws or rejects is logged and isolated:
 * the emitter and the other handlers go on.
 */
export class EventBus {
  private readonly emitter = new EventEmitter2({ maxListeners: 0, wildcard: false });
  // maps a caller's handler (of any event) to the wrapper we registered, so off() finds it
  private readonly wrappers = new Map<Handler<never>, Map<string, (p: unknown) => void>>();

  constructor(private readonly log: Logger) {}

  on<E extends EventName>(event: E, handler: Handler<E>): () => void {
    const wrapped = (payload: unknown) => {
      try {
        const r = handler(payload as EventMap[E]);
        if (r && typeof (r as Promise<void>).catch === 'function') {
          (r as Promise<void>).catch((err) => this.handlerFailed(event, err));
        }
      } catch (err) {
        this.handlerFailed(event, err);
      }
    };
    let byEvent = this.wrappers.get(handler);
    if (!byEvent) this.wrappers.set(handler, (byEvent = new Map()));
    byEvent.set(event, wrapped);
    this.emitter.on(event, wrapped);
    return () => this.off(event, handler);
  }

  off<E extends EventName>(event: E, handler: Handler<E>): void {
    const wrapped = this.wrappers.get(handler)?.get(event);
    if (!wrapped) return;
    this.emitter.off(event, wrapped);
    this.wrappers.get(handler)!.delete(event);
  }

  emit<E extends EventName>(event: E, payload: EventMap[E]): void {
    this.emitter.emit(event, payload);
  }

  /** Resolves with the next payload of `event` (optionally the first that matches). */
  waitFor<E extends EventName>(event: E, opts: { timeoutMs?: number; match?: (p: EventMap[E]) => boolean } = {}): Promise<EventMap[E]> {
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const off = this.on(event, (p) => {
        if (opts.match && !opts.match(p)) return;
        off();
        if (timer) clearTimeout(timer);
        resolve(p);
      });
      if (opts.timeoutMs) {
        timer = setTimeout(() => {
          off();
          reject(new Error(`timed out waiting for ${event}`));
        }, opts.timeoutMs);
      }
    });
  }

  listenerCount(event: EventName): number {
    return this.emitter.listenerCount(event);
  }

  removeAll(): void {
    this.emitter.removeAllListeners();
    this.wrappers.clear();
  }

  private handlerFailed(event: string, err: unknown) {
    this.log.error({ err, event }, 'bus handler failed');
  }
}
