/**
 * docs/api-examples.json: for each operation of the API document (by operationId), a request
 * body and an answer of each 2xx status that a real test run sent and received, secrets and
 * tokens replaced by placeholders. src/http/openapi.ts puts them into the document as
 * `example`s; test/http/openapi-tools.test.ts holds each to its schema and requires one for
 * every operation that takes or answers JSON.
 *
 *   npx tsx scripts/api-examples.ts                  runs FILES, writes the file anew
 *   npx tsx scripts/api-examples.ts <test files...>  runs those, and replaces the examples they
 *                                                    recorded (the file's others are kept)
 *   API_EXAMPLES_LOG=FILE                            keeps the raw recordings in FILE (appended);
 *                                                    with --reuse, makes the file of them, no test run
 *
 * Each test file runs on its own (mocha, as the suite runs it) with TEST_API_EXAMPLES set: the
 * contract check of test/support/contract.ts, which already holds every answer to the document,
 * records the first request body and 2xx answer of each operation that match it.
 * Then `npx tsx scripts/api-types.ts` writes the document with them.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as prettier from 'prettier';
import { currentDocument } from './api-types.js';

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
export const EXAMPLES_FILE = path.join(ROOT, 'docs', 'api-examples.json');

/** The test files whose requests make the examples: together they reach every operation. */
export const FILES = [
  'test/iam/admin.test.ts',
  'test/auth/login.test.ts',
  'test/auth/mfa.test.ts',
  'test/auth/mfa-factors.test.ts',
  'test/auth/step-up.test.ts',
  'test/auth/credentials.test.ts',
  'test/auth/keys-before-factor.test.ts',
  'test/auth/oidc-flow.test.ts',
  'test/auth/settings.test.ts',
  'test/iam/audit.test.ts',
  'test/notifications/history.test.ts',
  'test/notifications/webhook.test.ts',
  'test/gateway/gateway.test.ts',
  'test/plugins/host.test.ts',
  'test/sockets/http.test.ts',
  'test/service/spec.test.ts',
  'test/sockets/dns/service.test.ts',
  'test/sockets/dhcp/service.test.ts',
  'test/sockets/init/service.test.ts',
  'test/sockets/grpc/service.test.ts',
  'test/sockets/walkthrough.test.ts',
  'test/notifications/group-commit.test.ts',
  'test/iam/host-boundary.test.ts',
  'test/auth/ldap-directory.test.ts',
  'test/plugins/examples.test.ts',
  // the passkey routes are reached by a browser only (a virtual authenticator)
  'test/web/passkeys.browser.test.ts',
];

/** By operationId: the request body, and the answers by status. */
export interface OperationExamples {
  request?: unknown;
  responses?: Record<string, unknown>;
}
export type ExampleFile = Record<string, OperationExamples>;

interface Recorded {
  operationId: string;
  path?: string;
  tag?: string;
  part: string;
  value: unknown;
}

/** Arrays in an example are cut to this many items (a list of 40 users says no more than 3). */
const MAX_ITEMS = 3;

/** Keys whose string value is a secret or a token, at any depth (`token_type` is not one). */
const SECRET_KEY = /^(.*_)?(password|secret|token|ticket|key|code|codes|recovery_codes|signature)$/i;

/**
 * A secret's placeholder of its shape: each letter and digit replaced (x, X, 0), the rest and
 * the length kept; a short lowercase prefix such as `svk_` stays (it says what kind of token it
 * is): `svk_3fA9-k` becomes `svk_0xX0-x`.
 */
export function placeholder(value: string): string {
  const m = /^([a-z]{2,5}_)(.*)$/s.exec(value);
  const [prefix, rest] = m ? [m[1]!, m[2]!] : ['', value];
  return prefix + rest.replace(/[a-z]/g, 'x').replace(/[A-Z]/g, 'X').replace(/[0-9]/g, '0');
}

/** A recorded value with its secrets replaced and its lists cut (applied twice, the same). */
export function scrub(value: unknown, key = ''): unknown {
  if (Array.isArray(value)) return value.slice(0, MAX_ITEMS).map((v) => scrub(v, key));
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrub(v, k)]));
  if (typeof value !== 'string') return value;
  // an authenticator app's URI keeps its form; its secret is replaced
  if (value.startsWith('otpauth://')) return value.replace(/([?&]secret=)([^&]*)/i, (_m, k: string, v: string) => k + placeholder(v));
  if (SECRET_KEY.test(key)) return placeholder(value);
  return value;
}

function readLog(log: string): Recorded[] {
  if (!fs.existsSync(log)) return [];
  return fs
    .readFileSync(log, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Recorded);
}

/** Runs the files, each with the recording on; `keep`: the recordings are appended there too (and left). */
function record(files: string[], keep?: string): Recorded[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-api-examples-'));
  const log = keep ?? path.join(dir, 'examples.jsonl');
  const before = readLog(log).length;
  try {
    for (const file of files) {
      const started = Date.now();
      const run = spawnSync(path.join(ROOT, 'node_modules', '.bin', 'mocha'), [file], {
        cwd: ROOT,
        env: { ...process.env, TEST_API_EXAMPLES: log },
        encoding: 'utf8',
        maxBuffer: 64 * 1024 * 1024,
      });
      const passing = /(\d+) passing/.exec(run.stdout)?.[1] ?? '0';
      const failing = /(\d+) failing/.exec(run.stdout)?.[1];
      console.log(`${file}: ${passing} passing${failing ? `, ${failing} failing` : ''} (${Math.round((Date.now() - started) / 1000)} s)`);
      // what went wrong, without the stack
      if (run.status !== 0)
        console.log(
          `${(run.stdout + run.stderr)
            .split('\n')
            .filter((l) => l.trim() && !/^\s+at /.test(l))
            .slice(-12)
            .join('\n')}\n`,
        );
    }
    return readLog(log).slice(before);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The first recording of each operation of the document and part, scrubbed; over `base` (whose
 * entries it replaces). What a test made up for itself (a plugin or a provider of its own) is
 * not in the document, and left out.
 */
export function merge(base: ExampleFile, recorded: Recorded[], operations: Set<string>): ExampleFile {
  const out: ExampleFile = structuredClone(base);
  const seen = new Set<string>();
  for (const r of recorded) {
    const key = `${r.operationId} ${r.part}`;
    if (seen.has(key) || !operations.has(r.operationId)) continue;
    seen.add(key);
    const op = (out[r.operationId] ??= {});
    if (r.part === 'request') op.request = scrub(r.value);
    else (op.responses ??= {})[r.part] = scrub(r.value);
  }
  const sorted = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
  return Object.fromEntries(
    Object.entries(out)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([id, op]) => [id, { ...(op.request !== undefined ? { request: op.request } : {}), ...(op.responses ? { responses: sorted(op.responses) } : {}) }]),
  );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  // API_EXAMPLES_LOG=FILE keeps the raw recordings in FILE; with --reuse, they are read from it and no test runs
  const keep = process.env.API_EXAMPLES_LOG;
  const reuse = process.argv.includes('--reuse');
  const chosen = process.argv.slice(2).filter((a) => a !== '--reuse');
  const base: ExampleFile = chosen.length && fs.existsSync(EXAMPLES_FILE) ? (JSON.parse(fs.readFileSync(EXAMPLES_FILE, 'utf8')) as ExampleFile) : {};
  const recorded = reuse && keep ? readLog(keep) : record(chosen.length ? chosen : FILES, keep);
  const doc = JSON.parse(await currentDocument()) as { paths: Record<string, Record<string, { operationId: string }>> };
  const operations = new Set(Object.values(doc.paths).flatMap((item) => Object.values(item).map((op) => op.operationId)));
  const examples = merge(Object.fromEntries(Object.entries(base).filter(([id]) => operations.has(id))), recorded, operations);
  // as prettier writes JSON (the repository's format check)
  fs.writeFileSync(
    EXAMPLES_FILE,
    await prettier.format(JSON.stringify(examples, null, 2), { ...(await prettier.resolveConfig(EXAMPLES_FILE)), filepath: EXAMPLES_FILE }),
  );
  console.log(`written: ${path.relative(ROOT, EXAMPLES_FILE)} (${Object.keys(examples).length} operations); now run npx tsx scripts/api-types.ts`);
  process.exit(0);
}
