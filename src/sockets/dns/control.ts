import net from 'node:net';
import { SocketError } from '../errors.js';
import { hasControl } from './grammar.js';

/**
 * Unbound's remote control over its UNIX socket (`control-interface: /path`,
 * `control-use-cert: no`), spoken as unbound-control speaks it: connect, write
 * `UBCT1 <command>\n` (for the list commands such as `local_datas`, then one line each and the
 * end marker `\x04\n`), read the answer until Unbound closes the connection. One connection per
 * command; each bounded by `timeoutMs`.
 */
export class UnboundControl {
  constructor(
    readonly socketPath: string,
    private readonly timeoutMs: number,
  ) {}

  /**
   * Sends one command (and, for a list command, its lines) and resolves with Unbound's answer.
   * Unbound away (no socket, refused, no answer in time) is a SocketError `unavailable`; an
   * answer starting with `error` is an UnboundRefusal.
   */
  async command(command: string, lines?: readonly string[]): Promise<string> {
    for (const part of [command, ...(lines ?? [])]) {
      // a line break or the end marker would end the command early: never sent, whatever built it
      if (hasControl(part)) throw new Error('an Unbound control command holds a control character');
    }
    const payload = `UBCT1 ${command}\n${lines ? `${lines.map((l) => `${l}\n`).join('')}\x04\n` : ''}`;
    const answer = await this.exchange(payload, command.split(' ')[0]!);
    // Unbound's refusals are lines `error <words>` (a listed record's line starts with its name and a tab);
    // a list command answers one per refused line, before its `added N datas`
    const refusal = (lines ? /^error .*$/m : /^error .*$/).exec(answer);
    if (refusal) throw new UnboundRefusal(refusal[0].slice(0, 300));
    return answer;
  }

  private exchange(payload: string, what: string): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      const chunks: Buffer[] = [];
      let settled = false;
      const socket = net.connect(this.socketPath);
      const finish = (err: Error | null) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        socket.destroy();
        if (err) reject(err);
        else resolve(Buffer.concat(chunks).toString('utf8'));
      };
      const timer = setTimeout(() => finish(new SocketError('unavailable', `Unbound did not answer ${what} within ${this.timeoutMs} ms`)), this.timeoutMs);
      socket.once('connect', () => socket.write(payload));
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        // an answer is small; a huge one is not Unbound's
        if (chunks.reduce((n, c) => n + c.length, 0) > 64 * 1024 * 1024) finish(new Error('Unbound answer too large'));
      });
      socket.once('end', () => finish(null));
      socket.once('close', () => finish(null));
      socket.once('error', (err: NodeJS.ErrnoException) => finish(new SocketError('unavailable', unreachable(err, this.socketPath))));
    });
  }
}

/** Unbound answered `error ...`: a command it refused (its words, which hold no secret). */
export class UnboundRefusal extends Error {
  constructor(readonly answer: string) {
    super(`Unbound refused the command: ${answer}`);
    this.name = 'UnboundRefusal';
  }
}

function unreachable(err: NodeJS.ErrnoException, socketPath: string): string {
  switch (err.code) {
    case 'ENOENT':
      return `no Unbound control socket at ${socketPath}`;
    case 'ECONNREFUSED':
      return `Unbound is not listening on ${socketPath}`;
    case 'EACCES':
      return `no permission to open Unbound's control socket ${socketPath}`;
    default:
      return `Unbound's control socket ${socketPath} failed (${err.code ?? 'error'})`;
  }
}
