import type { CliContext, CliIo } from './context.js';
import type { Command } from 'commander';

/** Exit codes a script can rely on. */
export const EXIT = { ok: 0, failed: 1, usage: 2 } as const;

/** A bad argument: one line naming it, exit 2. */
export class UsageError extends Error {}

/** What a command prints: a sentence for people, or (with --json) one JSON document. */
export class Output {
  constructor(
    private readonly io: CliIo,
    readonly json: boolean,
  ) {}

  result(data: unknown, text: string | string[]): void {
    if (this.json) this.io.stdout(JSON.stringify(data, null, 2) + '\n');
    else this.io.stdout((Array.isArray(text) ? text.join('\n') : text) + '\n');
  }

  /** Something the operator should know though the command succeeded: one line on stderr (JSON with --json). */
  warn(text: string): void {
    if (this.json) this.io.stderr(JSON.stringify({ warning: text }) + '\n');
    else this.io.stderr(`warning: ${text}\n`);
  }
}

/** A cell as a terminal may show it: control characters (escape sequences a label could carry) as `?`. */
// eslint-disable-next-line no-control-regex -- the control characters are what it replaces
const printable = (cell: string) => cell.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');

/** Columns aligned with two spaces, for people (scripts use --json). */
export function table(header: string[], cells: string[][]): string[] {
  const rows = cells.map((r) => r.map(printable));
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join('  ');
  return [line(header), ...rows.map(line)];
}

/** Everything a command module needs: the lazily built context, and its output. */
export interface CommandEnv {
  ctx: CliContext;
  out(cmd: Command): Output;
}
