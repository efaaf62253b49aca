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
