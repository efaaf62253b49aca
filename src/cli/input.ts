import fs from 'node:fs';
import readline from 'node:readline';
import { Writable } from 'node:stream';
import type { CliIo } from './context.js';
import { UsageError } from './output.js';

/**
 * A secret (a password, a settings secret) never comes from the command line, where `ps` and the
 * shell history would keep it: it is read from stdin, or asked for without echo on a terminal.
 */
export async function readSecret(io: CliIo, label: string): Promise<string> {
  const tty = (io.stdin as NodeJS.ReadStream).isTTY;
  const value = tty ? await askHidden(io, `${label}: `) : await firstLine(io);
  if (!value) throw new UsageError(`stdin: no ${label.toLowerCase()} given`);
  return value;
}

/** The first line of stdin (a trailing newline is not part of a password). */
async function firstLine(io: CliIo): Promise<string> {
  let text = '';
  for await (const chunk of io.stdin) {
    text += chunk.toString();
    if (text.length > 64 * 1024) break;
  }
  return text.split(/\r?\n/)[0] ?? '';
}

function askHidden(io: CliIo, question: string): Promise<string> {
  let muted = false;
  // the prompt is shown; what is typed after it is not
  const output = new Writable({
    write(chunk, _enc, done) {
      if (!muted) io.stderr(chunk.toString());
      done();
    },
  });
  const rl = readline.createInterface({ input: io.stdin, output, terminal: true });
  return new Promise((resolve) => {
    rl.question(question, (answer) => {
      rl.close();
      io.stderr('\n');
      resolve(answer);
    });
    muted = true;
  });
}

/**
 * The variables of an environment file in systemd's EnvironmentFile format (as
 * docs/deploy/service-core.env): `KEY=VALUE` lines; blank lines and lines starting with `#` or
 * `;` are skipped; a value may be in double quotes (with `\"`, `\\`, `\$`, `` \` `` and `\n`
 * escapes) or single quotes (taken as written); an unquoted value is trimmed, and a backslash
 * at the end of a line continues it on the next. A line that is not an assignment is a usage
 * error naming the file and the line.
 */
export function parseEnvFile(text: string, file: string): Record<string, string> {
  const out: Record<string, string> = {};
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const lineNo = i + 1;
    const line = lines[i]!.trimStart();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const eq = line.indexOf('=');
    const key = eq < 0 ? '' : line.slice(0, eq).trim();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new UsageError(`--env-file: ${file} line ${lineNo} is not a KEY=VALUE assignment`);
    let rest = line.slice(eq + 1).trimStart();
    const quote = rest[0];
    if (quote === '"' || quote === "'") {
      // a quoted value may span lines
      let value = '';
      let j = 1;
      for (;;) {
        if (j >= rest.length) {
          if (i + 1 >= lines.length) throw new UsageError(`--env-file: ${file} line ${lineNo}: the ${quote === '"' ? 'double' : 'single'} quote is not closed`);
          value += '\n';
          rest += '\n' + lines[++i]!;
          j++;
          continue;
        }
        const c = rest[j]!;
        if (c === quote) break;
        if (quote === '"' && c === '\\' && j + 1 < rest.length) {
          const next = rest[j + 1]!;
          value += next === 'n' ? '\n' : '"\\$`'.includes(next) ? next : `\\${next}`;
          j += 2;
          continue;
        }
        value += c;
        j++;
      }
      out[key] = value;
      continue;
    }
    // unquoted: a trailing backslash joins the next line
    while (rest.endsWith('\\') && i + 1 < lines.length) rest = rest.slice(0, -1) + lines[++i]!.trimStart();
    out[key] = rest.trimEnd();
  }
  return out;
}

/** parseEnvFile of the file at `file`; a file that cannot be read is a usage error naming it. */
export function readEnvFile(file: string): Record<string, string> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`--env-file: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseEnvFile(text, file);
}
