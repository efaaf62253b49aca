import { spawn } from 'node:child_process';
import path from 'node:path';

/** Runs a command-line tool (no stdin), resolving with its output; rejects with the output's tail when it fails. */
export function runTool(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    // no stdin: writing to a tool that has already exited would be an EPIPE
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0
        ? resolve(output)
        : reject(new Error(`${path.basename(cmd)} ${args.slice(0, 3).join(' ')} exited with ${code}: ${output.trim().slice(-2000)}`)),
    );
  });
}
