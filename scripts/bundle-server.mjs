// The server as `npm start` runs it: dist/src/main.js (tsc's output) and the packages it imports,
// bundled by esbuild into dist/server/ (main.js and the chunks of what loads at first use). A
// start then reads a few files instead of resolving, reading and compiling some 1,800 modules
// one by one, which was most of its time (docs/performance.md, "Cold start").
//
// What stays outside the bundle, loaded from node_modules as before:
// - the packages the service loads at the first use of an optional feature (pg, ldapts, the
//   gRPC and D-Bus clients, zxcvbn, …: createRequire calls, which esbuild does not follow; a
//   package outside is outside for every importer, so there is one copy of each and pg's type
//   parsers, ldapts's error classes are those its other users get);
// - native modules and the database drivers knex names but the service never installs;
// - tsx, loaded to import a plugin written in TypeScript.
//
// Paths keep meaning what they meant: `import.meta.url` in a module of dist/src is that module's
// file (the hash worker, the migrations and package.json are found beside it), and a package's
// `__dirname` / `__filename` are its own file's in node_modules, found where Node would find the
// package from dist/server (in this tree or in an installed package's hoisted node_modules).
import fs from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';

/** what knex's dialects require and the service never installs, and modules with a native part */
const NEVER_BUNDLED = [
  'better-sqlite3',
  'pg-native',
  'cpu-features',
  'ssh2',
  'oracledb',
  'mysql',
  'mysql2',
  'mariadb',
  'tedious',
  'sqlite3',
  '@vscode/sqlite3',
  'pg-query-stream',
  'x11',
  'tsx',
];

/**
 * What the sources load with `createRequire(import.meta.url)('…')` (written so, never through a
 * variable: the build refuses one), by package name: bundled where a start loads it (AT_START),
 * else left outside and loaded from node_modules at the feature's first use, as before.
 */
export const AT_START = new Set(['koa', 'find-my-way', 'koa-session']);
const REQUIRE_CALL = /createRequire\(import\.meta\.url\)(\.resolve)?\(\s*'([^']+)'/g;
const packageName = (spec) =>
  spec
    .split('/')
    .slice(0, spec.startsWith('@') ? 2 : 1)
    .join('/');

export function loadedAtFirstUse(srcDir) {
  const names = new Set();
  for (const file of fs.readdirSync(srcDir, { recursive: true })) {
    if (!file.endsWith('.ts')) continue;
    const text = fs.readFileSync(path.join(srcDir, file), 'utf8');
    if (/=\s*createRequire\([^)]*\)\s*(?![(.])/.test(text))
      throw new Error(
        `src/${file} keeps a createRequire in a variable: call createRequire(import.meta.url)('package') where it is used (scripts/bundle-server.mjs)`,
      );
    for (const [, resolve, spec] of text.matchAll(REQUIRE_CALL)) if (!resolve && !AT_START.has(packageName(spec))) names.add(packageName(spec));
  }
  return [...names].sort();
}

// Defined once at the top of every output file: `require`, which loads what is left outside
// (esbuild's calls for an external package and our first-use createRequire calls resolve from
// here or from dist/src alike), and where a package is (for the __dirname preludes below).
const BANNER = `import { createRequire as __serviceCreateRequire } from 'node:module';
import { dirname as __serviceDirname, join as __serviceJoin } from 'node:path';
import { existsSync as __serviceExists } from 'node:fs';
const require = __serviceCreateRequire(import.meta.url);
/** a file of package \`name\` (its path inside the package: \`rel\`), found as Node finds the package from here */
const __servicePackageFile = (name, rel) => {
  for (const dir of require.resolve.paths(name) ?? []) if (__serviceExists(__serviceJoin(dir, name, 'package.json'))) return __serviceJoin(dir, name, rel);
  throw new Error(\`package \${name} is not installed\`);
};`;

/** The package a file of node_modules belongs to and the file's path inside it. */
function packageOf(file) {
  const after = file.slice(file.lastIndexOf('/node_modules/') + '/node_modules/'.length);
  const parts = after.split('/');
  const take = after.startsWith('@') ? 2 : 1;
  return { name: parts.slice(0, take).join('/'), rel: parts.slice(take).join('/') };
}

/** The esbuild plugin that keeps import.meta.url, __dirname and __filename meaning what they did (above). */
function keepPaths(outDir) {
  return {
    name: 'keep-paths',
    setup(b) {
      b.onLoad({ filter: /\.(c|m)?js$/ }, async (args) => {
        const text = await fs.promises.readFile(args.path, 'utf8');
        const ownModule = !args.path.includes('/node_modules/');
        if (ownModule && text.includes('import.meta.url')) {
          const rel = path.relative(outDir, args.path).split(path.sep).join('/');
          // a package loaded at every start becomes a require() esbuild follows into the bundle
          const bundled = text.replace(REQUIRE_CALL, (call, resolve, spec) => (resolve || !AT_START.has(packageName(spec)) ? call : `require('${spec}'`));
          return { contents: bundled.replaceAll('import.meta.url', `new URL(${JSON.stringify(rel)}, import.meta.url).href`), loader: 'js' };
        }
        if (ownModule) return undefined;
        if (text.includes('import.meta')) throw new Error(`${args.path} uses import.meta: not handled by the bundle (scripts/bundle-server.mjs)`);
        if (!/\b__(dirname|filename)\b/.test(text)) return undefined;
        if (/\b(var|let|const)\s+__(dirname|filename)\b/.test(text))
          throw new Error(`${args.path} declares __dirname or __filename: not handled by the bundle`);
        // CommonJS: esbuild wraps the module in a function, so these are the module's own
        const { name, rel } = packageOf(args.path);
        const prelude = `var __filename = __servicePackageFile(${JSON.stringify(name)}, ${JSON.stringify(rel)}), __dirname = __serviceDirname(__filename);\n`;
        return { contents: prelude + text, loader: 'js' };
      });
    },
  };
}

/**
 * knex's dialects for databases the service does not run on: required by knex only when a
 * configuration names one (never), so left in node_modules instead of parsed at every start.
 */
const otherDialects = {
  name: 'other-knex-dialects',
  setup(b) {
    b.onResolve({ filter: /^\.\/(cockroachdb|mssql|mysql|mysql2|mariadb|oracle|oracledb|pgnative|redshift)$/ }, (args) =>
      args.importer.endsWith(path.join('knex', 'lib', 'dialects', 'index.js'))
        ? { path: `knex/lib/dialects/${args.path.slice(2)}/index.js`, external: true }
        : undefined,
    );
  },
};

/** Bundles `<dist>/src/main.js` into `<dist>/server/`. */
export async function bundleServer(root, dist) {
  const outDir = path.join(dist, 'server');
  const result = await build({
    entryPoints: [path.join(dist, 'src/main.js')],
    outdir: outDir,
    bundle: true,
    splitting: true,
    chunkNames: 'chunk-[hash]',
    format: 'esm',
    platform: 'node',
    target: 'node20',
    external: [...NEVER_BUNDLED, ...loadedAtFirstUse(path.join(root, 'src'))],
    banner: { js: BANNER },
    // less to read and parse at a start; names kept for logs, errors and the classes that read theirs
    minifyWhitespace: true,
    minifySyntax: true,
    keepNames: true,
    // beside the files, linked: NODE_OPTIONS=--enable-source-maps turns stack traces into src/ lines
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'warning',
    plugins: [keepPaths(outDir), otherDialects],
  });
  return result.metafile;
}
