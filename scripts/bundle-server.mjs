// The server as `npm start` runs it: dist/src/main.js (tsc's output) and the packages it imports,
// bundled by esbuild into dist/server/ (main.js and the chunks of what loads at first use). A
// start then reads a few files instead of resolving, reading and compiling some 1,800 modules
// one by one, which was most of its time (docs/performance.md, "Cold start").
//
// What stays outside the bundle is loaded at run time from dist/server, where Node finds this
// package's own dependencies and nothing else (an install may nest a dependency's dependencies
// under it, or hoist another version of one). So only dependencies of package.json stay outside,
// and the build refuses anything else (checkOutside):
// - the packages the service loads at the first use of an optional feature (pg, ldapts, the
//   gRPC and D-Bus clients, zxcvbn, …: createRequire calls, which esbuild does not follow; a
//   package outside is outside for every importer, so there is one copy of it and pg's type
//   parsers, ldapts's error classes are those its other users get);
// - KEPT_OUTSIDE: packages that run or read files of their own at run time (a bundled copy would
//   pair the build's code with the installed files), a native module, tsx;
// - packages that bundled code requires only optionally and that are not installed (NOT_INSTALLED,
//   and those esbuild leaves outside itself: a require inside a try).
//
// Paths keep meaning what they meant: `import.meta.url` in a module of dist/src is that module's
// file (the hash worker, the migrations and package.json are found beside it). A bundled
// package's `__dirname` / `__filename` are refused, save for OWN_FILES_UNUSED.
import fs from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import path from 'node:path';
import { build } from 'esbuild';

/** dependencies never bundled, and why */
export const KEPT_OUTSIDE = {
  pino: "its transports run their worker (its own and thread-stream's) from the package's files",
  piscina: 'runs its worker file in each thread',
  dockerode: 'reads its .proto files; its tree holds ssh2 (native helpers) and @grpc copies of its own (loaded at first use anyway)',
  ioredis: 'reads its package.json for the version it reports (loaded only with Redis anyway)',
  'better-sqlite3': 'a native module',
  tsx: 'registers its loader for TypeScript plugins',
  commander: 'looks for the executables of subcommands beside the script (the CLI has none)',
};

/** required by a bundled package only in a configuration the service never makes: knex's other drivers */
const NOT_INSTALLED = ['sqlite3', 'pg-query-stream'];

/**
 * Bundled packages whose `__dirname` names files the service never uses; it is set to the
 * installed package's folder (where Node finds it from dist/server: a dependency of ours).
 */
const OWN_FILES_UNUSED = { knex: 'the templates of migrate.make and seed.make' };

/**
 * What the sources load with `createRequire(import.meta.url)('…')` (written so, never through a
 * variable: the build refuses one), by package name: bundled where a start or the first request
 * loads it (AT_START: the body parser and raw-body at the first request with a body), else left
 * outside and loaded from node_modules at the feature's first use, as before.
 */
export const AT_START = new Set(['koa', 'find-my-way', 'koa-session', '@koa/bodyparser', 'raw-body']);
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
// here or from dist/src alike), and where a package is (for OWN_FILES_UNUSED's preludes below).
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

/** The folder of package `name` as Node finds it from `fromFile`, or null. */
function packageDir(name, fromFile) {
  for (const dir of createRequire(fromFile).resolve.paths(name) ?? []) {
    if (fs.existsSync(path.join(dir, name, 'package.json'))) return fs.realpathSync(path.join(dir, name));
  }
  return null;
}

/** The esbuild plugin that keeps import.meta.url meaning what it did, and refuses a bundled package's own paths (above). */
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
        const { name, rel } = packageOf(args.path);
        if (!Object.hasOwn(OWN_FILES_UNUSED, name) || /\b(var|let|const)\s+__(dirname|filename)\b/.test(text))
          throw new Error(
            `${args.path} finds files of its own package at run time: keep the dependency that brings ${name} outside the bundle (KEPT_OUTSIDE in scripts/bundle-server.mjs)`,
          );
        // CommonJS: esbuild wraps the module in a function, so these are the module's own
        const prelude = `var __filename = __servicePackageFile(${JSON.stringify(name)}, ${JSON.stringify(rel)}), __dirname = __serviceDirname(__filename);\n`;
        return { contents: prelude + text, loader: 'js' };
      });
    },
  };
}

/**
 * Refuses an external the bundle would not find at run time as its importer does: anything but a
 * dependency of package.json (found from dist/server, where Node finds ours), or a dependency of
 * ours that a bundled package finds elsewhere (another copy: its own version). Packages that are
 * not installed at all are what bundled code requires only optionally.
 */
export function checkOutside(metafile, root, dependencies) {
  const builtin = new Set(builtinModules);
  const rootFile = path.join(root, 'package.json');
  const refused = [];
  // (the metafile's paths are relative to the build's working directory: root, bundleServer)
  for (const [input, { imports }] of Object.entries(metafile.inputs)) {
    for (const { path: spec, external } of imports) {
      // `string_decoder/` and the like name the npm package, not the builtin
      if (!external || spec.startsWith('node:') || spec.startsWith('.') || spec.startsWith('<') || builtin.has(spec)) continue;
      const name = packageName(spec);
      const importer = path.resolve(root, input);
      const theirs = input.includes('node_modules/') ? packageDir(name, importer) : packageDir(name, rootFile);
      if (theirs === null) continue;
      if (!Object.hasOwn(dependencies, name)) refused.push(`${input} requires ${name}, which is not a dependency of package.json`);
      else if (theirs !== packageDir(name, rootFile)) refused.push(`${input} requires its own copy of ${name} (${theirs}), not ours`);
    }
  }
  if (refused.length > 0)
    throw new Error(
      `the bundle would load these from dist/server, not where their importer finds them; keep the dependency that brings the importer outside (KEPT_OUTSIDE in scripts/bundle-server.mjs):\n  ${refused.join('\n  ')}`,
    );
}

/**
 * The packages our modules (`dist`) import are this tree's (root's node_modules), wherever
 * `dist` is: a dist/ outside the tree (`node scripts/build.mjs <dir>`) may sit under another
 * project's node_modules, which esbuild would search first.
 */
function packagesOfRoot(root, dist) {
  return {
    name: 'packages-of-root',
    setup(b) {
      b.onResolve({ filter: /^[^./]/ }, (args) =>
        args.pluginData?.fromRoot || !args.importer.startsWith(dist + path.sep) || args.path.startsWith('node:') || builtinModules.includes(args.path)
          ? undefined
          : b.resolve(args.path, { kind: args.kind, resolveDir: root, importer: args.importer, pluginData: { fromRoot: true } }),
      );
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

/** JSON files from this size on are bundled as a string that JSON.parse reads (jsonAsText). */
const JSON_AS_TEXT_BYTES = 10_000;

/**
 * Large JSON files (mime-db's table, iconv-lite's code pages, the API examples) as
 * `JSON.parse('…')` instead of the object literal esbuild writes: V8 scans a string literal as
 * one token and JSON.parse builds the object faster than the literal runs, and most of these are
 * never read at all (iconv-lite's CJK tables, behind a function until a body in that charset
 * comes), yet a start compiles every chunk it loads whole. The same values either way.
 */
const jsonAsText = {
  name: 'json-as-text',
  setup(b) {
    b.onLoad({ filter: /\.json$/ }, async (args) => {
      const text = await fs.promises.readFile(args.path, 'utf8');
      if (Buffer.byteLength(text) < JSON_AS_TEXT_BYTES) return undefined;
      return { contents: `module.exports = JSON.parse(${JSON.stringify(JSON.stringify(JSON.parse(text)))});`, loader: 'js' };
    });
  },
};

/**
 * Bundles `<dist>/src/main.js` (the server) and `<dist>/src/cli/main.js` (the CLI, the package's
 * bin) into `<dist>/server/`, as `main.js` and `cli.js` with the chunks they share.
 */
export async function bundleServer(root, dist) {
  const outDir = path.join(dist, 'server');
  const { dependencies } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  const firstUse = loadedAtFirstUse(path.join(root, 'src'));
  // what our modules load by name with createRequire never reaches esbuild's metafile: checked here
  const notOurs = [...firstUse, ...AT_START].filter((name) => !Object.hasOwn(dependencies, name));
  if (notOurs.length > 0) throw new Error(`src/ loads ${notOurs.join(', ')} with createRequire, not dependencies of package.json`);
  const result = await build({
    // both beside their chunks in one folder, where import.meta.url's rewriting (keepPaths) is relative to
    entryPoints: { main: path.join(dist, 'src/main.js'), cli: path.join(dist, 'src/cli/main.js') },
    outdir: outDir,
    bundle: true,
    splitting: true,
    chunkNames: 'chunk-[hash]',
    format: 'esm',
    platform: 'node',
    target: 'node20',
    external: [...Object.keys(KEPT_OUTSIDE), ...NOT_INSTALLED, ...firstUse],
    absWorkingDir: root,
    banner: { js: BANNER },
    // less to read and parse at a start. Names are not kept (keepNames, an Object.defineProperty
    // for each of ~3,800 functions and classes as the start's chunks run, cost ~5% of a start):
    // some read as `_Name`, `Name2` or nothing (docs/decisions.md, "The server runs as a bundle").
    minifyWhitespace: true,
    minifySyntax: true,
    // beside the files, linked: NODE_OPTIONS=--enable-source-maps turns stack traces into src/ lines
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'warning',
    plugins: [packagesOfRoot(root, dist), keepPaths(outDir), otherDialects, jsonAsText],
  });
  checkOutside(result.metafile, root, dependencies);
  return result.metafile;
}
