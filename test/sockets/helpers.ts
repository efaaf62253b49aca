import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/log.js';

/** A logger whose JSON lines are kept in `lines` (to assert on what is and is not logged). */
export function capturingLogger(level = 'debug'): { logger: Logger; lines: string[]; text(): string } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  const logger = createLogger(level, sink);
  return { logger, lines, text: () => lines.join('') };
}

export function quietLogger(): Logger {
  return createLogger('silent');
}

/** Waits until `fn` returns true or the time is up. */
export async function eventually(fn: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}
