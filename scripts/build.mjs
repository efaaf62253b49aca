// The build that `npm ci` runs (prepare) and `npm start` uses: the server compiled by tsc into
// dist/ (the CLI, the published client, the migrations and the worker threads run from there),
// the server bundled with its packages into dist/server/ (what `npm start` runs:
// scripts/bundle-server.mjs), the browser's static assets into dist/static/, and each page
// module of src/web/browser bundled by esbuild into dist/static/<page>.js (with the gateway client).
// `node scripts/build.mjs <dir>` builds into <dir> instead of dist/ (the package test's rebuild).
// The build is written beside its target and takes its place only when whole: a failed build
// leaves the previous one as it was.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { bundleServer } from './bundle-server.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const target = path.resolve(process.argv[2] ?? path.join(root, 'dist'));
// the same depth as the target: the relative paths in source maps and the bundle hold after the move
const out = `${target}.building`;
const browserDir = path.join(root, 'src/web/browser');
/** shared by the pages, not a page of its own: bundled into each of them */
const SHARED = new Set([
  'app.ts',
  'forms.ts',
  'permission-list.ts',
  'plugin-config.ts',
  'auth-form.ts',
  'ldap-tests.ts',
  'passkeys.ts',
  'step-up.ts',
  'security.ts',
]);

/** The whole build, into `out`. */
async function buildInto(out) {
  execFileSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', path.join(root, 'tsconfig.build.json'), '--outDir', out], {
    stdio: 'inherit',
  });
  fs.cpSync(path.join(root, 'src/web/static'), path.join(out, 'static'), { recursive: true });

  const pages = fs
    .readdirSync(browserDir)
    .filter((name) => name.endsWith('.ts') && !name.endsWith('.d.ts') && !SHARED.has(name))
    .map((name) => path.join(browserDir, name));
  await build({
    entryPoints: pages,
    outdir: path.join(out, 'static'),
    bundle: true,
    format: 'esm',
    platform: 'browser',
    // what current browsers run natively: no down-levelling of classes, async or private fields
    target: ['es2022', 'chrome111', 'firefox111', 'safari16.4'],
    // maps next to the bundles for debugging, not linked: the server serves only .js/.css/.svg/.png
    sourcemap: 'external',
    logLevel: 'warning',
    tsconfig: path.join(root, 'tsconfig.browser.json'),
  });
  // last: the tests take a bundle newer than the sources for a whole build (test/support/process.ts)
  await bundleServer(root, out);
  // the package's bin, the bundled CLI: esbuild writes it 0644, and npx runs its link to it
  // directly ("Permission denied" after every rebuild once npx has linked it); the shebang makes
  // it a node script
  const cli = path.join(out, 'server/cli.js');
  if (!fs.readFileSync(cli, 'utf8').startsWith('#!/usr/bin/env node\n')) throw new Error(`${cli} lost its #!/usr/bin/env node line`);
  fs.chmodSync(cli, 0o755);
}

fs.rmSync(out, { recursive: true, force: true });
try {
  await buildInto(out);
} catch (err) {
  fs.rmSync(out, { recursive: true, force: true });
  throw err;
}
// the previous build is moved aside before the new one takes its name, and removed after
const previous = `${target}.old`;
fs.rmSync(previous, { recursive: true, force: true });
if (fs.existsSync(target)) fs.renameSync(target, previous);
fs.renameSync(out, target);
fs.rmSync(previous, { recursive: true, force: true });
