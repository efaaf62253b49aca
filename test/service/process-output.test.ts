import { expect } from 'chai';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { testEnv, freshDatabase, type TestDb } from '../support/service.js';
import { READY_TIMEOUT_MS, serviceCommand, spawnService } from '../support/process.js';
import { unusedPort } from '../auth/helpers.js';
import { cli } from '../cli/helpers.js';
import { eventually } from '../sockets/helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Each line of `text` parsed as JSON; fails naming the first line that is not. */
function jsonLines(text: string): Record<string, any>[] {
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((line) => {
      try {
        return JSON.parse(line);
      } catch {
        throw new Error(`not a JSON line on stdout: ${line}\n--- all of stdout:\n${text}`);
      }
    });
}

describe('the service process: stdout is JSON lines', function () {
  this.timeout(60_000);

  it('with its database away it writes only JSON lines, and a stop before boot ended never logs "ready"', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-away-'));
    // nothing listens there: every connection knex tries fails
    const databaseUrl = `postgres://postgres@127.0.0.1:${await unusedPort()}/service`;
    const env = { ...process.env, ...testEnv(dataDir, databaseUrl, { SERVICE_LOG_LEVEL: 'debug', SERVICE_PORT: '0' }) };
    const main = serviceCommand('main');
    const child = spawn(main[0]!, main.slice(1), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      // a few rounds of retries (each one a failed knex connection)
      const deadline = Date.now() + 20_000;
      while ((stdout.match(/database unreachable, retrying/g) ?? []).length < 3) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`no retries seen:\n${stdout}\n${stderr}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      child.kill('SIGTERM');
      expect(await exited).to.equal(0);
    } finally {
      // gone before its data dir is
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
    const lines = jsonLines(stdout);
    expect(lines.map((l) => l.msg)).to.include.members(['listening', 'database unreachable, retrying', 'shutting down', 'stopped']);
    expect(lines.map((l) => l.msg)).not.to.include('ready');
    // knex's own complaint is there, as a log line of its own (no stack)
    const knex = lines.filter((l) => l.component === 'knex');
    expect(knex.length).to.be.greaterThan(0);
    expect(knex[0]!.reason).to.match(/^Acquire connection error: .*ECONNREFUSED/);
    expect(stdout).not.to.match(/\n\s+at /);
    expect(stderr).to.equal('');
  });

  it('warns at every start in development mode, and of a SERVICE_* variable nobody reads', async function () {
    // three starts, each allowed what a start may take on a loaded machine
    this.timeout(3 * READY_TIMEOUT_MS);
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-dev-'));
    let db: TestDb | undefined;
    const outputs: string[] = [];
    try {
      db = await freshDatabase();
      for (let start = 1; start <= 2; start++) {
        const svc = await spawnService({ dataDir, databaseUrl: db.url, env: { SERVICE_ENV: 'development', SERVICE_PROT: '9000' } });
        // "ready" is said after /readyz turns 200 (the development warning comes first)
        await eventually(() => jsonLines(svc.output()).some((l) => l.msg === 'ready'), READY_TIMEOUT_MS);
        const ended = await svc.kill();
        expect(ended.code, `ended by ${ended.signal}:\n${svc.output().slice(-2000)}`).to.equal(0);
        outputs.push(svc.output());
        const lines = jsonLines(svc.output());
        const dev = lines.filter((l) => /^development mode/.test(l.msg));
        expect(dev, `start ${start}`).to.have.length(1);
        expect(dev[0]).to.include({ level: 'warn' });
        const typo = lines.filter((l) => l.msg === 'configuration warning');
        expect(typo.map((l) => l.warning)).to.deep.equal(['SERVICE_PROT is not a setting and is ignored; did you mean SERVICE_PORT?']);
        expect(lines.map((l) => l.msg)).to.include('ready');
      }
      // the test environment sets both passwords: neither is the development one
      const last = jsonLines(outputs.at(-1)!).find((l) => /^development mode/.test(l.msg));
      expect(last!.default_passwords).to.deep.equal([]);
      // and not in the test (or production) mode
      const quiet = await spawnService({ dataDir, databaseUrl: db.url });
      await quiet.kill();
      expect(jsonLines(quiet.output()).filter((l) => /^development mode/.test(l.msg))).to.deep.equal([]);
    } finally {
      await db?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('the development warning names only the bootstrap accounts whose password is still the development one', async function () {
    this.timeout(2 * READY_TIMEOUT_MS);
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-devpw-'));
    const env = { SERVICE_ENV: 'development', SERVICE_ADMIN_PASSWORD: '', SERVICE_BOT_PASSWORD: '' };
    const named = async () => {
      const svc = await spawnService({ dataDir, databaseUrl: db!.url, env });
      // said once the accounts are seeded and their passwords compared: after ready, maybe
      const line = () => jsonLines(svc.output()).find((l) => /^development mode/.test(l.msg));
      await eventually(() => Boolean(line()), READY_TIMEOUT_MS);
      expect((await svc.kill()).code).to.equal(0);
      return line()!.default_passwords;
    };
    let db: TestDb | undefined;
    try {
      db = await freshDatabase();
      expect(await named()).to.deep.equal(['admin', 'bot']);
      // admin's password changed since the accounts were made: only bot still has the public one
      const changed = await cli(testEnv(dataDir, db.url, env), ['user', 'set-password', 'admin'], 'a-password-of-our-own-4821\n');
      expect(changed.code, changed.stderr).to.equal(0);
      expect(await named()).to.deep.equal(['bot']);
    } finally {
      await db?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
