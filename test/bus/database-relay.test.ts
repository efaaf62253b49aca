import { expect } from 'chai';
import type { Knex } from 'knex';
import { EventBus } from '../../src/bus/bus.js';
import { DatabaseRelayReader, DatabaseRelayWriter } from '../../src/bus/database-relay.js';
import { onPostgres } from '../../src/db/knex.js';
import { createLogger, type Logger } from '../../src/log.js';
import { migratedDb, startService } from '../support/service.js';

/** A logger that keeps its warnings' messages. */
function recordingLog(): { log: Logger; warnings: string[] } {
  const warnings: string[] = [];
  const log = createLogger('warn', { write: (line: string) => void warnings.push(JSON.parse(line).msg) } as never);
  return { log, warnings };
}

describe('the database relay (a change announced without Redis)', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  const quiet = createLogger('silent');

  beforeEach(async () => {
    ({ db, drop } = await migratedDb());
  });
  afterEach(() => drop());

  /** A reader on a bus of its own, and the events of `event` it emitted. */
  async function reader(event: 'iam:password_changed' | 'auth:credentials_revoked' = 'iam:password_changed', log: Logger = quiet) {
    const bus = new EventBus(quiet);
    const got: unknown[] = [];
    bus.on(event, (p) => void got.push(p));
    const relay = new DatabaseRelayReader({ db, bus, origin: 'instance-1', log, everyMs: 60_000 });
    await relay.start();
    return { relay, got };
  }

  it('carries what a process emits to a running instance, once, in the order emitted', async () => {
    const { relay, got } = await reader('auth:credentials_revoked');
    const cliBus = new EventBus(quiet);
    const writer = new DatabaseRelayWriter({ db, bus: cliBus, origin: 'cli:host:1', log: quiet });
    for (const user_id of ['u1', 'u2', 'u3']) cliBus.emit('auth:credentials_revoked', { user_id });
    cliBus.emit('notification:push', {} as never); // followed by the notification counter, not relayed
    await writer.close();
    cliBus.emit('auth:credentials_revoked', { user_id: 'after-close' });
    expect(await db('bus_relay').pluck('event')).to.deep.equal(Array(3).fill('auth:credentials_revoked'));
    await relay.read();
    await relay.read();
    expect(got).to.deep.equal([{ user_id: 'u1' }, { user_id: 'u2' }, { user_id: 'u3' }]);
    relay.stop();
  });

  it('does not replay what was written before the instance started', async () => {
    await db('bus_relay').insert({ event: 'iam:password_changed', payload: JSON.stringify({ user_id: 'old' }), origin: 'cli', created_at: Date.now() });
    const { relay, got } = await reader();
    await relay.read();
    expect(got).to.deep.equal([]);
  });

  it('starts with the database away: nothing fails, and the first read that reaches it takes what was written since the start', async () => {
    const { log, warnings } = recordingLog();
    const row = (user_id: string, created_at = Date.now()) => ({
      event: 'iam:password_changed',
      payload: JSON.stringify({ user_id }),
      origin: 'cli',
      created_at,
    });
    await db('bus_relay').insert(row('before-the-start', Date.now() - 1000));
    await db.schema.renameTable('bus_relay', 'bus_relay_away');
    const { relay, got } = await reader('iam:password_changed', log);
    expect(warnings).to.deep.equal(['reading the changes of other processes failed']);
    await db.schema.renameTable('bus_relay_away', 'bus_relay');
    // written while the instance could not read the table: a change after its start, not lost
    await db('bus_relay').insert(row('while-away'));
    await relay.read();
    await db('bus_relay').insert(row('after'));
    await relay.read();
    expect(got).to.deep.equal([{ user_id: 'while-away' }, { user_id: 'after' }]);
    relay.stop();
  });

  it('reads a row that became visible after a higher id, within the re-read window', async () => {
    const { relay, got } = await reader();
    const row = (id: number, user_id: string) => ({
      id,
      event: 'iam:password_changed',
      payload: JSON.stringify({ user_id }),
      origin: 'cli',
      created_at: Date.now(),
    });
    const t0 = Date.now();
    await db('bus_relay').insert(row(20, 'second-id'));
    await relay.read(t0);
    // the lower id commits late (two writers on PostgreSQL)
    await db('bus_relay').insert(row(10, 'first-id'));
    await relay.read(t0 + 1000);
    await relay.read(t0 + 2000);
    expect(got).to.deep.equal([{ user_id: 'second-id' }, { user_id: 'first-id' }]);
    // past the window the floor moves up: what was read is not read again
    await relay.read(t0 + 10_000);
    await db('bus_relay').insert(row(30, 'third'));
    await relay.read(t0 + 11_000);
    expect(got).to.have.length(3);
  });

  it('drops a row that is not a relayed event or whose payload does not fit, and goes on; skips its own', async () => {
    const { log, warnings } = recordingLog();
    const { relay, got } = await reader('iam:password_changed', log);
    const now = Date.now();
    await db('bus_relay').insert([
      { event: 'iam:password_changed', payload: JSON.stringify({ user_id: 'u1', extra: true }), origin: 'cli', created_at: now },
      { event: 'notification:push', payload: '{}', origin: 'cli', created_at: now },
      { event: 'iam:password_changed', payload: 'not json', origin: 'cli', created_at: now },
      { event: 'iam:password_changed', payload: JSON.stringify({ user_id: 'mine' }), origin: 'instance-1', created_at: now },
      { event: 'iam:password_changed', payload: JSON.stringify({ user_id: 'u2' }), origin: 'cli', created_at: now },
    ]);
    await relay.read();
    expect(got).to.deep.equal([{ user_id: 'u2' }]);
    expect(relay.stats).to.deep.equal({ emitted: 1, dropped: 3 });
    expect(warnings).to.deep.equal(Array(3).fill('a relayed change was dropped'));
  });

  it('keeps the newest 10,000 rows: a writer prunes by id, whatever the clocks say', async () => {
    // rows of another writer whose clock runs ahead, and an old one
    await db('bus_relay').insert({ id: 1, event: 'iam:password_changed', payload: '"oldest"', origin: 'cli', created_at: 0 });
    await db('bus_relay').insert({ id: 9_000, event: 'iam:password_changed', payload: '"ahead"', origin: 'cli', created_at: Date.now() + 3_600_000 });
    await db('bus_relay').insert({ id: 10_001, event: 'iam:password_changed', payload: '"newest"', origin: 'cli', created_at: Date.now() + 3_600_000 });
    // the ids a sequence would have drawn (SQLite's autoincrement follows the highest by itself)
    if (onPostgres(db)) await db.raw("SELECT setval(pg_get_serial_sequence('bus_relay', 'id'), 10001)");
    const bus = new EventBus(quiet);
    const writer = new DatabaseRelayWriter({ db, bus, origin: 'cli', log: quiet });
    bus.emit('iam:password_changed', { user_id: 'u1' });
    await writer.close();
    expect(await db('bus_relay').max({ top: 'id' }).first()).to.deep.equal({ top: 10_002 });
    const left = await db('bus_relay').orderBy('created_at').pluck('payload');
    expect(left).to.have.members(['"ahead"', '"newest"', JSON.stringify({ user_id: 'u1' })]);
  });
});

describe('the database relay in a service without Redis', function () {
  this.timeout(30_000);

  it('reads from before the API opens: a change written at that moment is not missed', async () => {
    const svc = await startService({ wait: false });
    try {
      const relayed = svc.service.bus.waitFor('iam:password_changed', { match: (p) => p.user_id === 'at-iam-ready', timeoutMs: 10_000 });
      // the CLI's row lands the moment the API opens (plugins may still be loading)
      svc.service.bus.on('iam:ready', () =>
        svc.service
          .db('bus_relay')
          .insert({ event: 'iam:password_changed', payload: JSON.stringify({ user_id: 'at-iam-ready' }), origin: 'cli', created_at: Date.now() }),
      );
      await svc.service.booted();
      expect(await relayed).to.deep.equal({ user_id: 'at-iam-ready' });
    } finally {
      await svc.destroy();
    }
  });
});
