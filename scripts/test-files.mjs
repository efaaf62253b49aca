// The test files of one suite run (scripts/test.sh): `all`, or `database`, the files whose
// imports reach the service or a database (test/support/service.ts), which run on every
// database; the others (normalisers, config, providers, the layer check) run once, and so do
// the browser tests (*.browser.test.ts): they drive the pages, whose every call is an API route
// the API tests run on each database, and they are the suite's heaviest part (a Chromium each).
// `quiet` / `quiet-database`: the files that load the machine on purpose (production-cost
// password hashing from dozens of clients) and hold the service to answer times under that
// load; they run after the others, alone, where their own load is the only one (the first two
// lists leave them out).
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const DATABASE_MODULES = new Set([path.join(root, 'test/support/service.ts')]);
const QUIET = new Set(['test/auth/device-cookie.test.ts', 'test/auth/passwords.test.ts'].map((f) => path.join(root, f)));

function testFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? testFiles(p) : e.name.endsWith('.test.ts') ? [p] : [];
  });
}

const importsOf = new Map();
function imports(file) {
  if (!importsOf.has(file)) {
    const text = fs.readFileSync(file, 'utf8');
    const found = [...text.matchAll(/(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) => path.resolve(path.dirname(file), m[1].replace(/\.js$/, '.ts')));
    importsOf.set(file, found.filter((f) => fs.existsSync(f)));
  }
  return importsOf.get(file);
}

/** Does `file` reach a database module through its imports? */
function usesDatabase(file) {
  const seen = new Set();
  const stack = [file];
  while (stack.length) {
    const f = stack.pop();
    if (seen.has(f)) continue;
    seen.add(f);
    if (DATABASE_MODULES.has(f)) return true;
    stack.push(...imports(f));
  }
  return false;
}

const which = process.argv[2] ?? 'all';
const quiet = which.startsWith('quiet');
const files = testFiles(path.join(root, 'test'))
  .sort()
  .filter((f) => QUIET.has(f) === quiet);
const onEveryDatabase = (f) => usesDatabase(f) && !f.endsWith('.browser.test.ts');
for (const f of which.endsWith('database') ? files.filter(onEveryDatabase) : files) console.log(path.relative(root, f));
