/**
 * `npm run -s architecture:counts`: the counts docs/architecture.md ("One path per rule") holds
 * the code to, each of which must be 0:
 *
 * - calls of the audit writer (an AuditTrail's record/within/append) outside the command path
 *   (src/iam/commands.ts), the attempt gate (src/auth/attempt-gate.ts) and the trail itself;
 * - takes of an attempt budget (an AttemptLimiter's take) or lockout attempts (a LoginLockout's
 *   begin/succeed) outside the attempt gate;
 * - `any` in the definitions under src (the generated src/client/openapi.ts aside), as ESLint's
 *   no-explicit-any counts them;
 * - source files over 400 lines (the generated src/client/openapi.ts aside);
 * - stores and writers of the core built outside their area and src/core.ts (the CLI and the
 *   service take them from buildCore: one MFA issuer, one set of rules and secret writers);
 * - function slots filled after construction (`part.hook = (...) => ...` on another object):
 *   a part gets what it calls in its constructor;
 * - lint errors (ESLint over the repository, its own configuration).
 *
 * `--json` prints them as one object; test/architecture.test.ts checks them.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const GENERATED = new Set(['src/client/openapi.ts']);
export const MAX_LINES = 400;

/** Every TypeScript source file under src, relative to the repository, generated ones aside. */
export function sourceFiles(): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
      const rel = path.posix.join(dir, entry.name);
      if (entry.isDirectory()) walk(rel);
      else if (/\.ts$/.test(entry.name) && !entry.name.endsWith('.d.ts') && !GENERATED.has(rel)) out.push(rel);
    }
  };
  walk('src');
  return out.sort();
}

/** Lines of `file` matching `pattern`, as `file:line`, outside the files `allowed`. */
function sites(files: string[], pattern: RegExp, allowed: (file: string) => boolean): string[] {
  const found: string[] = [];
  for (const file of files) {
    if (allowed(file)) continue;
    fs.readFileSync(path.join(ROOT, file), 'utf8')
      .split('\n')
      .forEach((line, i) => {
        if (pattern.test(line)) found.push(`${file}:${i + 1}`);
      });
  }
  return found;
}

export interface Counts {
  audit_writer_calls_outside_command_path: string[];
  attempt_budget_outside_gate: string[];
  any_in_src: number;
  files_over_400_lines: string[];
  core_parts_built_outside_core: string[];
  slots_filled_after_construction: string[];
  lint_errors: number;
}

export async function counts(opts: { lint?: boolean } = {}): Promise<Counts> {
  const files = sourceFiles();
  // the trail is named audit or trail wherever it is held (a field, a dep, a local)
  const auditWriter = /\b(audit|trail|auditTrail)\??\.(record|within|append)\(/;
  const writerAllowed = (f: string) => f === 'src/iam/commands.ts' || f === 'src/auth/attempt-gate.ts' || f.startsWith('src/iam/audit');
  // an AttemptLimiter is taken, a LoginLockout begun or succeeded: only by the gate
  const budget = /\b(attempts|addresses|devices|budget|limiter)\.take\(|\block(out)?\.(begin|succeed)\(/;
  const gateAllowed = (f: string) => f === 'src/auth/attempt-gate.ts' || f === 'src/auth/lockout.ts' || f === 'src/auth/attempts.ts';
  // the parts buildCore makes: an area may build its own, nothing above it may
  const corePart =
    /\bnew (IamStore|SecretsStore|Passwords|AuditTrail|CommandPath|UserAdmin|GroupAdmin|KeyAdmin|ApiKeyStore|MfaService|SystemKey|WebhookSecrets|AuthSettingsStore|LocalProvider|NotificationsService|OneTimeStore|IamComponent|AuthComponent|NotificationsComponent)\(/;
  const coreAllowed = (f: string) => f === 'src/core.ts' || /^src\/(iam|auth|notifications)\//.test(f);
  // `other.hook = (...) =>` or `other.hook = name =>` (a field of the object itself, this.x = ..., is its own
  // business; so are the DOM's and WebSocket's lower-case event handlers, socket.onopen = ...)
  const slot = /(^|[\s;{)])(?!this\.\w+\s*=)[A-Za-z_$][\w$]*(\.[\w$]+)*\.(?!on[a-z]+\s*=)\w+\s*=\s*(async\s*)?(\([^)]*\)|[A-Za-z_$][\w$]*)\s*=>/;
  const long = files.filter((f) => fs.readFileSync(path.join(ROOT, f), 'utf8').split('\n').length - 1 > MAX_LINES);
  let anyInSrc = 0;
  let lintErrors = 0;
  if (opts.lint !== false) {
    const eslint = new ESLint({ cwd: ROOT });
    const results = await eslint.lintFiles(['.']);
    for (const r of results) {
      lintErrors += r.errorCount;
      if (path.relative(ROOT, r.filePath).startsWith('src/')) anyInSrc += r.messages.filter((m) => m.ruleId === '@typescript-eslint/no-explicit-any').length;
    }
  }
  return {
    audit_writer_calls_outside_command_path: sites(files, auditWriter, writerAllowed),
    attempt_budget_outside_gate: sites(files, budget, gateAllowed),
    any_in_src: anyInSrc,
    files_over_400_lines: long,
    core_parts_built_outside_core: sites(files, corePart, coreAllowed),
    slots_filled_after_construction: sites(files, slot, () => false),
    lint_errors: lintErrors,
  };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const c = await counts();
  if (process.argv.includes('--json')) {
    console.log(JSON.stringify(c));
  } else {
    const n = (v: string[] | number) => (Array.isArray(v) ? v.length : v);
    for (const [name, value] of Object.entries(c)) {
      console.log(`${name.replaceAll('_', ' ')}: ${n(value)}${Array.isArray(value) && value.length ? ` (${value.join(', ')})` : ''}`);
    }
  }
  process.exitCode = Object.values(c).some((v) => (Array.isArray(v) ? v.length : v) > 0) ? 1 : 0;
}
