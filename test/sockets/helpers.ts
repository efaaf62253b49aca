import { Writable } from 'node:stream';
import { expect } from 'chai';
import { createLogger, type Logger } from '../../src/log.js';
import { SocketError } from '../../src/sockets/errors.js';

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

/** Awaits `p` and expects it to reject with a SocketError of `code`. */
export async function expectSocketError(p: Promise<unknown>, code: string): Promise<SocketError> {
  try {
    await p;
  } catch (err) {
    expect(err, String(err)).to.be.instanceOf(SocketError);
    expect((err as SocketError).code).to.equal(code);
    return err as SocketError;
  }
  throw new Error(`expected a SocketError ${code}`);
}
