import net from 'node:net';
import { SocketError } from '../errors.js';

/** What Kea answers a command with: `result` 0 done, 1 failed, 2 unsupported (no hook serves it), 3 empty (nothing found). */
export interface KeaAnswer<T = unknown> {
  result: number;
  text?: string;
  arguments?: T;
}

export const KEA_SUCCESS = 0;
export const KEA_ERROR = 1;
export const KEA_UNSUPPORTED = 2;
export const KEA_EMPTY = 3;

/** an answer larger than this is refused (a configuration with a great many reservations is still far below) */
const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

/**
 * One command over Kea's control socket: a connection per command, the JSON written, the answer
 * read until it is a complete JSON document or Kea closes the connection. Every call is bounded
 * by `timeoutMs`; a socket that is missing, refuses or stays silent is `unavailable`.
 */
export class KeaClient {
  constructor(
    readonly socketPath: string,
    private readonly timeoutMs: number,
  ) {}

  /** Sends `command` with `args`; resolves with Kea's answer (whatever its result), rejects with `unavailable` when Kea is away. */
  send<T = unknown>(command: string, args?: Record<string, unknown>): Promise<KeaAnswer<T>> {
    const body = JSON.stringify(args === undefined ? { command } : { command, arguments: args });
    return new Promise<KeaAnswer<T>>((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let settled = false;
      const socket = net.connect(this.socketPath);
      const finish = (err: SocketError | null, answer?: KeaAnswer<T> | SocketError) => {
        if (settled) return;
        if (answer instanceof SocketError) [err, answer] = [answer, undefined];
        settled = true;
        clearTimeout(timer);
        socket.destroy();
        if (err) reject(err);
        else resolve(answer!);
      };
      const timer = setTimeout(
        () => finish(new SocketError('unavailable', `Kea did not answer ${command} within ${this.timeoutMs} ms (control socket ${this.socketPath})`)),
        this.timeoutMs,
      );
      const parsed = (): KeaAnswer<T> | null => {
        const text = Buffer.concat(chunks).toString('utf8').trim();
        if (!text.endsWith('}')) return null;
        try {
          return JSON.parse(text) as KeaAnswer<T>;
        } catch {
          return null;
        }
      };
      socket.once('connect', () => socket.end(body));
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) return finish(new SocketError('failed', `Kea's answer to ${command} is larger than ${MAX_ANSWER_BYTES} bytes`));
        // Kea writes the whole answer, then closes; a complete document need not wait for the close
        // (parsed only when a chunk ends as a document does: a large answer is not parsed chunk by chunk)
        if (!/}\s*$/.test(chunk.subarray(-16).toString('latin1'))) return;
        const answer = parsed();
        if (answer) finish(null, checked(answer, command));
      });
      socket.once('end', () => {
        const answer = parsed();
        if (answer) finish(null, checked(answer, command));
        else finish(new SocketError('unavailable', `Kea closed the control socket without a complete answer to ${command}`));
      });
      socket.once('error', (err: NodeJS.ErrnoException) => finish(new SocketError('unavailable', unreachable(err, this.socketPath))));
    });
  }

  /** Sends `command`; its arguments when Kea did it (or found nothing: `empty`), a SocketError when Kea refused it. */
  async call<T = unknown>(command: string, args?: Record<string, unknown>): Promise<{ empty: boolean; value: T | undefined; text: string }> {
    const answer = await this.send<T>(command, args);
    const text = answer.text ?? '';
    if (answer.result === KEA_SUCCESS || answer.result === KEA_EMPTY) return { empty: answer.result === KEA_EMPTY, value: answer.arguments, text };
    if (answer.result === KEA_UNSUPPORTED) {
      throw new SocketError('unsupported', `Kea does not serve ${command} (is the lease_cmds hook library loaded?)`);
    }
    throw new SocketError('failed', `Kea refused ${command}: ${oneLine(text)}`);
  }
}

function checked<T>(answer: KeaAnswer<T>, command: string): KeaAnswer<T> | SocketError {
  // Kea answers a list when the command went through its control agent; the server's own socket answers an object
  const one = (Array.isArray(answer) ? answer[0] : answer) as KeaAnswer<T> | undefined;
  if (!one || typeof one !== 'object' || typeof one.result !== 'number') {
    return new SocketError('failed', `Kea's answer to ${command} has no result`);
  }
  return one;
}

function unreachable(err: NodeJS.ErrnoException, socketPath: string): string {
  switch (err.code) {
    case 'ENOENT':
      return `Kea is not running: no control socket at ${socketPath}`;
    case 'ECONNREFUSED':
      return `Kea is not running: nobody listens on ${socketPath}`;
    case 'EACCES':
      return `the service may not open Kea's control socket ${socketPath}`;
    default:
      return `Kea's control socket ${socketPath} failed (${err.code ?? err.message})`;
  }
}

/** Kea's words in one short line (its texts may quote the configuration) */
export function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').slice(0, 300);
}
