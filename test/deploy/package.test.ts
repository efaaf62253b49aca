import { execFile, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { builtinModules } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { unusedPort } from '../support/ports.js';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const TSC = path.join(ROOT, 'node_modules/typescript/bin/tsc');
/** an install from the registry, with better-sqlite3 built from source where no prebuilt binary can be fetched */
const INSTALL_TIMEOUT_MS = 10 * 60_000;
const READY_TIMEOUT_MS = 90_000;

interface PackageJson {
  name: string;
  version: string;
  bin: Record<string, string>;
  exports: Record<string, { types: string; default: string }>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  allowScripts?: Record<string, boolean>;
}

const repoPackage = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as PackageJson;

/** The environment of an operator's shell: none of the npm run variables of the suite, no SERVICE_* of the tests. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k) && !k.startsWith('SERVICE_')) env[k] = v;
  return { ...env, ...extra };
}

/** Every file under `dir`, relative to `base`, with / separators. */
function filesUnder(dir: string, base: string): string[] {
  return fs
    .readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => path.relative(base, path.join(e.parentPath, e.name)).split(path.sep).join('/'));
}

/** The packages a built module imports by name (not node builtins, not relative paths). */
function packagesImported(source: string): string[] {
  const names = new Set<string>();
  // as tsc writes them: import/export … from at the start of a line, a bare import, import(), require(), require.resolve()
  const patterns = [
    /^\s*(?:import|export)\s[^'";]*?\bfrom\s*['"]([^'"]+)['"]/gm,
    /^\s*import\s*['"]([^'"]+)['"]/gm,
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
    /\brequire\(\s*['"]([^'"]+)['"]\s*\)/g,
    // loaded at a feature's first use: createRequire(import.meta.url)('ldapts')
    /\bcreateRequire\([^)]*\)\(\s*['"]([^'"]+)['"]\s*\)/g,
    /\.resolve\(\s*['"]([^'"]+\/package\.json)['"]\s*\)/g,
  ];
  for (const [, spec] of patterns.flatMap((p) => [...source.matchAll(p)])) {
    if (!spec || spec.startsWith('.') || spec.startsWith('/') || spec.startsWith('node:') || builtinModules.includes(spec.split('/')[0]!)) continue;
    const parts = spec.split('/');
    names.add(spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!);
  }
  return [...names];
}

/** The ```ts blocks of docs/client.md that import the published client. */
function clientDocExamples(): string[] {
  const doc = fs.readFileSync(path.join(ROOT, 'docs/client.md'), 'utf8');
  return [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!).filter((code) => code.includes("from 'service-core/client'"));
}

/** `npm pack` of this tree (its dist/ as built) into `dir`: the tarball and the files it holds. */
async function packRelease(dir: string): Promise<{ tarball: string; packed: string[] }> {
  // --ignore-scripts: pack the dist/ that is there (prepare would rebuild it under other tests' feet)
  const pack = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
    cwd: ROOT,
    env: cleanEnv(),
    maxBuffer: 16 * 1024 * 1024,
  });
  const [info] = JSON.parse(pack.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  return { tarball: path.join(dir, info!.filename), packed: info!.files.map((f) => f.path) };
}

/**
 * `npm install --omit=dev` of the tarball (and `extra` packages) into a new project at `app`.
 * better-sqlite3 installs a prebuilt binary where it can download one (an operator's install
 * does); here nothing can be downloaded, so it gets the one this tree built, as a local
 * prebuild, instead of a minute and more of compiling.
 */
async function installRelease(app: string, tarball: string, extra: string[], npmOptions: string[] = []): Promise<void> {
  fs.mkdirSync(app);
  fs.writeFileSync(
    path.join(app, 'package.json'),
    JSON.stringify({ name: 'service-core-consumer', private: true, type: 'module', allowScripts: repoPackage.allowScripts ?? {} }, null, 2),
  );
  const prebuilds = path.join(app, '.prebuilds');
  const sqlite = path.join(ROOT, 'node_modules/better-sqlite3');
  const sqliteVersion = (JSON.parse(fs.readFileSync(path.join(sqlite, 'package.json'), 'utf8')) as { version: string }).version;
  fs.mkdirSync(prebuilds);
  await run('tar', [
    '-czf',
    path.join(prebuilds, `better-sqlite3-v${sqliteVersion}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`),
    '-C',
    sqlite,
    'build/Release/better_sqlite3.node',
  ]);
  await run('npm', ['install', '--omit=dev', '--no-audit', '--no-fund', '--prefer-offline', ...npmOptions, '--prefix', app, tarball, ...extra], {
    cwd: app,
    env: { ...cleanEnv(), npm_config_better_sqlite3_local_prebuilds: prebuilds },
    timeout: INSTALL_TIMEOUT_MS,
    maxBuffer: 16 * 1024 * 1024,
  }).catch((err: { stderr?: string; message: string }) => {
    throw new Error(`npm install of the tarball failed: ${err.stderr?.slice(-3000) ?? err.message}`);
  });
}

/** An operator's production settings for a service at `url` with its data in `dataDir`. */
function productionEnv(url: string, dataDir: string, adminPassword: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return cleanEnv({
    SERVICE_ENV: 'production',
    SERVICE_HOST: '127.0.0.1',
    SERVICE_PORT: new URL(url).port,
    SERVICE_PUBLIC_URL: url,
    SERVICE_DATA_DIR: dataDir,
    SERVICE_SECRET_KEY: crypto.randomBytes(48).toString('base64'),
    SERVICE_ADMIN_PASSWORD: adminPassword,
    SERVICE_BOT_PASSWORD: crypto.randomBytes(12).toString('hex'),
    ...extra,
  });
}

interface InstalledService {
  output(): string;
  /** sends `signal` unless it has exited; resolves with its exit code */
  kill(signal: NodeJS.Signals): Promise<number | null>;
}

/** The installed package's server, as the systemd unit runs it (dist/server/main.js from `app`), once /readyz answers 200. */
async function startInstalled(app: string, env: NodeJS.ProcessEnv, url: string): Promise<InstalledService> {
  let output = '';
  const child = spawn(process.execPath, ['node_modules/service-core/dist/server/main.js'], { cwd: app, env, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.on('data', (d) => (output += d.toString()));
  child.stderr!.on('data', (d) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const service: InstalledService = {
    output: () => output,
    kill: async (signal) => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (
    (await fetch(`${url}/readyz`).then(
      (r) => r.status,
      () => 0,
    )) !== 200
  ) {
    if (child.exitCode !== null) throw new Error(`the installed service exited (${child.exitCode}):\n${output.slice(-3000)}`);
    if (Date.now() > deadline) {
      await service.kill('SIGKILL');
      throw new Error(`the installed service was not ready within ${READY_TIMEOUT_MS / 1000} s:\n${output.slice(-3000)}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return service;
}

/**
 * The release as an operator installs it: `npm pack` of this tree (its dist/ as built), installed
 * with `npm install --omit=dev` into an empty folder, started with node from there on the
 * embedded SQLite default (its native module is the part an install can get wrong; that every
 * imported package, `pg` included, is installed is checked below; the install takes minutes,
 * so this file runs once, not once per database); and the published client (`service-core/client`)
 * type-checked and run by a project of its own against it. One install for every check.
 */
describe('the npm package, installed without dev dependencies', function () {
  this.timeout(60_000);
  let tmp: string;
  let app: string;
  let packed: string[];
  let tarball: string;
  let installed: PackageJson;
  let service: InstalledService | undefined;
  let url: string;
  let serviceEnv: NodeJS.ProcessEnv;
  const admin = { username: 'admin', password: crypto.randomBytes(12).toString('hex') };

  before(async function () {
    this.timeout(INSTALL_TIMEOUT_MS + READY_TIMEOUT_MS);
    for (const built of ['dist/server/main.js', 'dist/src/main.js', 'dist/static/dashboard.js']) {
      if (!fs.existsSync(path.join(ROOT, built))) throw new Error(`${built} is missing: build first (npm run build; npm ci runs it)`);
    }
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-package-'));
    ({ tarball, packed } = await packRelease(tmp));
    app = path.join(tmp, 'app');
    // a project of its own: the client's caller brings ws (and its types) itself
    await installRelease(app, tarball, [`ws@${repoPackage.dependencies.ws}`, '@types/ws@8']);
    installed = JSON.parse(fs.readFileSync(path.join(app, 'node_modules/service-core/package.json'), 'utf8')) as PackageJson;

    const port = await unusedPort();
    url = `http://127.0.0.1:${port}`;
    serviceEnv = productionEnv(url, path.join(tmp, 'data'), admin.password, { SERVICE_LOG_LEVEL: 'warn' });
    // as the systemd unit runs it, from the installed package (its default plugins dir, ./plugins, is absent)
    service = await startInstalled(app, serviceEnv, url);
  });

  after(async function () {
    this.timeout(30_000);
    await service?.kill('SIGKILL');
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('the tarball holds the whole build and no sources, tests or data', function () {
    const dist = filesUnder(path.join(ROOT, 'dist'), ROOT);
    expect(dist.length).to.be.greaterThan(100);
    expect(packed).to.include.members(dist);
    expect(packed).to.include.members(['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md']);
    // what package.json points at is in it
    for (const target of [...Object.values(repoPackage.bin), ...Object.values(repoPackage.exports).flatMap((e) => [e.types, e.default])]) {
      expect(packed, target).to.include(path.posix.normalize(target));
    }
    const migrations = fs
      .readdirSync(path.join(ROOT, 'migrations'))
      .filter((f) => f.endsWith('.ts'))
      .map((f) => `dist/migrations/${f.replace(/\.ts$/, '.js')}`);
    expect(packed).to.include.members(migrations);
    expect(packed.filter((f) => !f.startsWith('dist/') && !['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md'].includes(f))).to.deep.equal([]);
  });

  it('every package the build imports is a dependency, installed; no type packages and no dev tools are', function () {
    // the server's bundle (dist/server/) carries its packages inside; what it leaves outside are the
    // packages dist/src loads at first use, which are read here from dist/src
    const modules = filesUnder(path.join(app, 'node_modules/service-core/dist'), app).filter(
      (f) => f.endsWith('.js') && !f.includes('/dist/static/') && !f.includes('/dist/server/'),
    );
    expect(modules.length).to.be.greaterThan(50);
    const imported = new Map<string, string>();
    for (const file of modules) for (const name of packagesImported(fs.readFileSync(path.join(app, file), 'utf8'))) imported.set(name, file);
    expect(imported.size).to.be.greaterThan(15);
    for (const [name, file] of imported) {
      expect(installed.dependencies, `${name} (imported by ${file}) is not in dependencies`).to.have.property(name);
      expect(fs.existsSync(path.join(app, 'node_modules', name, 'package.json')), `${name} is not installed`).to.equal(true);
    }
    expect(Object.keys(installed.dependencies).filter((d) => d.startsWith('@types/'))).to.deep.equal([]);
    // (@types/node is there: the consumer's own @types/ws brings it)
    // (the compiler and the browser library are the build's: dist/ and its bundles are in the tarball)
    for (const dev of [
      '@types/koa',
      '@types/koa__router',
      '@types/better-sqlite3',
      'typescript',
      '@simplewebauthn/browser',
      'mocha',
      'chai',
      'playwright-core',
      'supertest',
    ]) {
      expect(fs.existsSync(path.join(app, 'node_modules', dev)), dev).to.equal(false);
    }
  });

  it('the installed service is ready and serves its pages, assets and API document', async () => {
    const ready = await fetch(`${url}/readyz`);
    expect(ready.status).to.equal(200);
    expect(await ready.json()).to.deep.include({ status: 'ready', version: installed.version });
    for (const [asset, type] of [
      ['/static/app.css', 'text/css'],
      ['/static/dashboard.js', 'javascript'],
      ['/static/swagger/swagger-ui.css', 'text/css'],
      ['/openapi.json', 'application/json'],
      ['/login', 'text/html'],
    ] as const) {
      const res = await fetch(`${url}${asset}`);
      expect(res.status, asset).to.equal(200);
      expect(res.headers.get('content-type'), asset).to.include(type);
    }
    const me = await fetch(`${url}/api/me`, { headers: { Authorization: `Basic ${Buffer.from(`${admin.username}:${admin.password}`).toString('base64')}` } });
    expect(me.status).to.equal(200);
    expect((await me.json()).username).to.equal(admin.username);
  });

  it('the CLI of the package answers (version, and a command on the database)', async () => {
    const cli = path.join(app, 'node_modules/.bin/service-core');
    const version = await run(cli, ['version'], { cwd: app, env: serviceEnv });
    expect(version.stdout.trim()).to.equal(installed.version);
    expect(JSON.parse((await run(cli, ['version', '--json'], { cwd: app, env: serviceEnv })).stdout)).to.deep.equal({ version: installed.version });
    const { users } = JSON.parse((await run(cli, ['user', 'list', '--json'], { cwd: app, env: serviceEnv })).stdout) as { users: Array<{ username: string }> };
    expect(users.map((u) => u.username)).to.include.members(['admin', 'bot']);
  });

  it('a project imports GatewayClient from service-core/client, type-checks it with tsc and gets the welcome frame', async function () {
    this.timeout(120_000);
    const exportTypes = installed.exports['./client']!.types;
    expect(fs.existsSync(path.join(app, 'node_modules/service-core', exportTypes)), exportTypes).to.equal(true);
    const source = `import WebSocket from 'ws';
import { GatewayClient, type ClientState, type SocketFactory } from 'service-core/client';

const [url, username, password] = process.argv.slice(2) as [string, string, string];
const client = new GatewayClient({
  url,
  WebSocket: WebSocket as unknown as SocketFactory,
  headers: { Authorization: \`Basic \${Buffer.from(\`\${username}:\${password}\`).toString('base64')}\` },
  requestTimeoutMs: 5000,
});
client.on('gateway:welcome', (welcome) => console.log(JSON.stringify({ welcome })));
await client.ready(10_000);
const state: ClientState = client.state;
console.log(JSON.stringify({ state, lastSeq: client.lastSeq }));
client.close();

// the types are the package's, not any: a wrong option does not type-check (never called)
export const typesOnly = (): GatewayClient =>
  // @ts-expect-error requestTimeoutMs is a number
  new GatewayClient({ url, requestTimeoutMs: 'soon' });
`;
    fs.writeFileSync(path.join(app, 'client.ts'), source);
    const compilerOptions = { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true };
    fs.writeFileSync(
      path.join(app, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { ...compilerOptions, skipLibCheck: true, types: ['node'], outDir: 'out' }, files: ['client.ts'] }),
    );
    // the package's declaration files checked whole (skipLibCheck false), on their own: with no
    // Node types, since the client imports nothing of Node, and without checking TypeScript's
    // own lib files or @types/node again, which is most of what a whole check costs
    const clientDir = path.join(app, 'node_modules/service-core/dist/src/client');
    const declarations = filesUnder(clientDir, clientDir).filter((f) => f.endsWith('.d.ts'));
    expect(declarations).to.include('gateway-client.d.ts');
    fs.writeFileSync(
      path.join(app, 'tsconfig.declarations.json'),
      JSON.stringify({
        compilerOptions: { ...compilerOptions, noEmit: true, skipLibCheck: false, skipDefaultLibCheck: true, types: [], lib: ['ES2022', 'DOM'] },
        files: declarations.map((f) => `node_modules/service-core/dist/src/client/${f}`),
      }),
    );
    // one tsc for both programs: they share the parsed lib files
    await run(process.execPath, [TSC, '-b', path.join(app, 'tsconfig.declarations.json'), path.join(app, 'tsconfig.json')], { cwd: app }).catch(
      (err: { stdout?: string; message: string }) => {
        throw new Error(`tsc refused the client program or the package's declarations:\n${err.stdout || err.message}`);
      },
    );
    const { stdout } = await run(process.execPath, [path.join(app, 'out/client.js'), `${url.replace(/^http/, 'ws')}/ws`, admin.username, admin.password], {
      cwd: app,
      timeout: 30_000,
    });
    const lines = stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, any>);
    expect(lines[0]!.welcome).to.include({ username: admin.username });
    expect(lines[0]!.welcome.last_seq).to.be.a('number');
    expect(lines[1]).to.deep.include({ state: 'live' });
  });

  it('the examples of docs/client.md type-check against the published types', async function () {
    this.timeout(120_000);
    const examples = clientDocExamples();
    expect(examples.length).to.be.at.least(3);
    // the names the examples leave to the reader
    const given = `declare function readStoredCursor(): Promise<string | null>;
declare function storeCursor(seq: number | null): Promise<void>;
declare function show(notification: unknown, opts: { toast: boolean }): void;
export {};
`;
    const files = examples.map((code, i) => {
      const name = `doc-example-${i + 1}.ts`;
      fs.writeFileSync(path.join(app, name), `${given}${code}`);
      return name;
    });
    // the browser example as a bundler sees it, the Node one as Node would
    fs.writeFileSync(
      path.join(app, 'tsconfig.docs.json'),
      // the package's declaration files were checked whole above (skipLibCheck false); here the
      // examples' own code is what is checked against them
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'ESNext',
          moduleResolution: 'Bundler',
          lib: ['ES2022', 'DOM'],
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ['node'],
        },
        files,
      }),
    );
    await run(process.execPath, [TSC, '-p', path.join(app, 'tsconfig.docs.json')], { cwd: app }).catch((err: { stdout?: string; message: string }) => {
      throw new Error(`an example of docs/client.md does not type-check:\n${err.stdout || err.message}`);
    });
  });

  it('stops on SIGTERM with exit code 0', async function () {
    expect(await service!.kill('SIGTERM'), service!.output().slice(-2000)).to.equal(0);
  });
});

/**
 * The bundle finds what it leaves outside from dist/server, where Node finds this package's own
 * dependencies and nothing else: with npm's nested layout a dependency's dependencies sit under
 * it (pino's thread-stream, dockerode's docker-modem), not beside the package. The build keeps
 * only dependencies outside (scripts/bundle-server.mjs); this installs the release so and runs
 * what loads those packages: the log (pino), a password check (piscina's worker), the container
 * provider (dockerode, answering that its socket is missing).
 */
describe('the npm package in a nested install (npm install --install-strategy=nested)', function () {
  this.timeout(60_000);
  let tmp: string;
  let app: string;
  let url: string;
  let service: InstalledService | undefined;
  const password = crypto.randomBytes(12).toString('hex');

  before(async function () {
    this.timeout(INSTALL_TIMEOUT_MS + READY_TIMEOUT_MS);
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-nested-'));
    const { tarball } = await packRelease(tmp);
    app = path.join(tmp, 'app');
    await installRelease(app, tarball, [], ['--install-strategy=nested']);
    url = `http://127.0.0.1:${await unusedPort()}`;
    const env = productionEnv(url, path.join(tmp, 'data'), password, { SERVICE_LOG_LEVEL: 'info', SERVICE_CONTAINER_SOCKET: path.join(tmp, 'no-daemon.sock') });
    service = await startInstalled(app, env, url);
  });

  after(async function () {
    this.timeout(30_000);
    await service?.kill('SIGKILL');
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('the layout is nested: the packages the bundle leaves outside keep their own dependencies under them', () => {
    const own = path.join(app, 'node_modules/service-core/node_modules');
    for (const [dependency, theirs] of [
      ['pino', 'thread-stream'],
      ['dockerode', 'docker-modem'],
    ] as const) {
      expect(fs.existsSync(path.join(own, dependency, 'node_modules', theirs, 'package.json')), `${dependency}/node_modules/${theirs}`).to.equal(true);
      expect(fs.existsSync(path.join(own, theirs)), `${theirs} beside the package's dependencies`).to.equal(false);
    }
  });

  it('the bundle starts, logs, checks a password and reaches the container provider', async () => {
    // the line comes just after /readyz says 200 (logged once the boot is complete, then piped to us)
    for (const deadline = Date.now() + 10_000; !/"msg":"ready"/.test(service!.output()) && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 50));
    expect(service!.output()).to.match(/"msg":"ready"/);
    const auth = { Authorization: `Basic ${Buffer.from(`admin:${password}`).toString('base64')}` };
    const me = await fetch(`${url}/api/me`, { headers: auth });
    expect(me.status).to.equal(200);
    const health = await fetch(`${url}/api/socket/container/health`, { headers: auth });
    expect(health.status).to.equal(200);
    expect(await health.json()).to.deep.include({ healthy: false, error: 'container daemon unreachable (health check: ENOENT)' });
    expect(await service!.kill('SIGTERM'), service!.output().slice(-2000)).to.equal(0);
  });
});

/**
 * `npx service-core` in a tree of the package (this repository after `npm ci`, or a clone):
 * npx links the bin once, in its cache, and later runs that link as it is, so a rebuild (`npm
 * run build`, `npm pack`'s prepare) must itself leave the CLI executable.
 */
describe('the CLI through npx after a rebuild', () => {
  it('npx service-core answers after the build rewrote dist/ (the bin keeps mode 0755 and its #! line)', async function () {
    this.timeout(180_000);
    const tree = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-rebuild-'));
    try {
      // this package without its scripts (npx would run prepare: a second build), on this tree's modules
      const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as Record<string, unknown>;
      delete manifest.scripts;
      fs.writeFileSync(path.join(tree, 'package.json'), JSON.stringify(manifest));
      fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(tree, 'node_modules'));
      fs.cpSync(path.join(ROOT, 'dist'), path.join(tree, 'dist'), { recursive: true });
      const env = cleanEnv({ npm_config_cache: path.join(tree, 'npm-cache'), npm_config_update_notifier: 'false' });
      const npx = () => run('npx', ['--offline', 'service-core', 'version'], { cwd: tree, env });
      // the first run links the bin in npx's cache (and makes it executable itself)
      expect((await npx()).stdout.trim()).to.equal(repoPackage.version);
      await run(process.execPath, [path.join(ROOT, 'scripts/build.mjs'), path.join(tree, 'dist')], { cwd: ROOT, env: cleanEnv(), maxBuffer: 16 * 1024 * 1024 });
      const cli = path.join(tree, 'dist/server/cli.js');
      expect(fs.statSync(cli).mode & 0o777).to.equal(0o755);
      expect(fs.readFileSync(cli, 'utf8')).to.match(/^#!\/usr\/bin\/env node\n/);
      // the same link, now to the rebuilt file
      const again = await npx().catch((err: { stderr?: string; message: string }) => {
        throw new Error(`npx service-core failed after the rebuild: ${err.stderr || err.message}`);
      });
      expect(again.stdout.trim()).to.equal(repoPackage.version);
    } finally {
      fs.rmSync(tree, { recursive: true, force: true });
    }
  });
});
