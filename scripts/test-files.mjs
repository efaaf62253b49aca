// The test files of each mocha run of scripts/test.sh, in the order they are started:
//
//   sqlite, postgres   the two runs side by side. Each has every file whose imports reach the
//                      service or a database (test/support/service.ts), but those of
//                      ONE_DATABASE below. The files that reach none (normalisers, config,
//                      providers, Docker, the layer check, the package test) run once, and so
//                      do ONE_DATABASE's and the browser tests (*.browser.test.ts), which
//                      drive the pages, whose every call is an API route the API tests run on
//                      each database. Each of those run-once files goes to the run that has the
//                      less to do at that point, so that both end together.
//   quiet, quiet-database
//                      the files that load the machine on purpose (production-cost password
//                      hashing from dozens of clients) and hold the service to answer times
//                      under that load; they run after the others (the two runs above leave
//                      them out), one database after the other, where no other load is at
//                      the event loops' priority.
//
// Within a run the longest files start first: a long file started last would leave one worker
// busy alone at the end while the other waits. SECONDS is what the longer files took in the
// SQLite run of the whole suite (a run-once file that was in the PostgreSQL run: its time there
// over POSTGRES_FACTOR; see "The test suite" in docs/performance.md for how a file's time is
// measured); the others count 3 s. A file that starts services takes about POSTGRES_FACTOR
// times as long on PostgreSQL (the files on both databases took 1.6 times as long there). The
// figures only order and share out the work: a wrong one costs time, never a test.
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const DATABASE_MODULES = new Set([path.join(root, 'test/support/service.ts')]);
const QUIET = new Set(['test/auth/device-cookie.test.ts', 'test/auth/passwords.test.ts']);
/**
 * Files that start services on a database of the run, but whose subject is not the database:
 * they run once, like the files that reach none. What they touch in the database is tested on
 * both databases by the files named here.
 */
const ONE_DATABASE = new Set([
  // the bridge's Redis credentials and TLS; delivery between instances over each database: test/bus/cluster.test.ts
  'test/bus/redis-auth.test.ts',
  // the process's stdout and start-up warnings (one test's database never answers); boot on each database: test/service/boot.test.ts
  'test/service/process-output.test.ts',
  // signals and draining; a service stopped on each database: every in-process service of every file
  'test/service/shutdown.test.ts',
  // three instances behind nginx under faults, on a PostgreSQL cluster of its own whatever the run's database
  'test/cluster/faults.test.ts',
]);
const SECONDS = {
  'test/deploy/package.test.ts': 147,
  'test/cluster/faults.test.ts': 45,
  'test/web/layout.browser.test.ts': 58,
  'test/cli/cli.test.ts': 51,
  'test/sockets/container-provider.test.ts': 44,
  'test/web/passkeys.browser.test.ts': 40,
  'test/auth/ad-service.test.ts': 34,
  'test/auth/providers/ad.test.ts': 32,
  'test/service/process-output.test.ts': 31,
  'test/bus/redis-auth.test.ts': 28,
  'test/db/migrations.test.ts': 28,
  'test/bus/failover.test.ts': 27,
  'test/sockets/container-mounts.test.ts': 27,
  'test/web/settings.browser.test.ts': 25,
  'test/web/forms.browser.test.ts': 21,
  'test/notifications/other-writers.test.ts': 18,
  'test/sockets/http.test.ts': 15,
  'test/notifications/outage.test.ts': 15,
  'test/service/shutdown.test.ts': 14,
  'test/web/login.browser.test.ts': 13,
  'test/architecture.test.ts': 13,
  'test/auth/oidc-flow.test.ts': 13,
  'test/bus/cluster.test.ts': 12,
  'test/config.test.ts': 11,
  'test/iam/audit.test.ts': 11,
  'test/web/dashboard.browser.test.ts': 10,
  'test/sockets/bus-handler.test.ts': 10,
  'test/web/audit.browser.test.ts': 9,
};
for (const file of [...QUIET, ...ONE_DATABASE]) {
  if (!fs.existsSync(path.join(root, file))) throw new Error(`scripts/test-files.mjs names ${file}, which is not there (renamed?)`);
}
const OTHERS_SECONDS = 3;
const POSTGRES_FACTOR = 1.6;

function testFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? testFiles(p) : e.name.endsWith('.test.ts') ? [path.relative(root, p)] : [];
  });
}

const importsOf = new Map();
function imports(file) {
  if (!importsOf.has(file)) {
    const text = fs.readFileSync(file, 'utf8');
    const found = [...text.matchAll(/(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) =>
      path.resolve(path.dirname(file), m[1].replace(/\.js$/, '.ts')),
    );
    importsOf.set(
      file,
      found.filter((f) => fs.existsSync(f)),
    );
  }
  return importsOf.get(file);
}

/** Does `file` reach a database module through its imports? */
function usesDatabase(file) {
  const seen = new Set();
  const stack = [path.join(root, file)];
  while (stack.length) {
    const f = stack.pop();
    if (seen.has(f)) continue;
    seen.add(f);
    if (DATABASE_MODULES.has(f)) return true;
    stack.push(...imports(f));
  }
  return false;
}

const seconds = (file) => SECONDS[file] ?? OTHERS_SECONDS;
const longestFirst = (files, factor = 1) => files.map((f) => [f, seconds(f) * factor]).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));

const which = process.argv[2];
const files = testFiles(path.join(root, 'test')).sort();
let chosen;
if (which === 'quiet' || which === 'quiet-database') {
  chosen = files.filter((f) => QUIET.has(f) && (which === 'quiet' || usesDatabase(f)));
} else if (which === 'sqlite' || which === 'postgres') {
  const everyDatabase = (f) => usesDatabase(f) && !f.endsWith('.browser.test.ts') && !ONE_DATABASE.has(f);
  const runs = {
    sqlite: { files: [], load: 0, factor: 1 },
    postgres: { files: [], load: 0, factor: POSTGRES_FACTOR },
  };
  const add = (run, [file, load]) => {
    run.files.push([file, load]);
    run.load += load;
  };
  const regular = files.filter((f) => !QUIET.has(f));
  for (const run of Object.values(runs)) for (const entry of longestFirst(regular.filter(everyDatabase), run.factor)) add(run, entry);
  for (const [file] of longestFirst(regular.filter((f) => !everyDatabase(f)))) {
    const run = runs.sqlite.load <= runs.postgres.load ? runs.sqlite : runs.postgres;
    add(run, [file, seconds(file) * (usesDatabase(file) ? run.factor : 1)]);
  }
  chosen = runs[which].files.sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).map(([f]) => f);
} else {
  console.error('usage: test-files.mjs sqlite|postgres|quiet|quiet-database');
  process.exit(2);
}
for (const f of chosen) console.log(f);
