// The test files of one suite run (scripts/test.sh): `all`, or `database`, the files whose
// imports reach the service or a database (test/support/service.ts), which run on every
// database; the others (normalisers, config, providers, the layer check) run once.
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const DATABASE_MODULES = new Set([path.join(root, 'test/support/service.ts')]);

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
const files = testFiles(path.join(root, 'test')).sort();
for (const f of which === 'database' ? files.filter(usesDatabase) : files) console.log(path.relative(root, f));
