import { expect } from 'chai';
import type { Knex } from 'knex';
import { fieldErrorsOf } from '../../../src/errors.js';
import { servedOperations } from '../../../src/sockets/base-provider.js';
import { DnsProvider } from '../../../src/sockets/dns/provider.js';
import { MARKER_ZONE } from '../../../src/sockets/dns/records.js';
import { startUnbound, type TestUnbound } from '../../support/unbound.js';
import { eventually, expectSocketError, quietLogger } from '../helpers.js';
import { lookupError, resolverOf } from './helpers.js';
import { migratedDb } from '../../support/service.js';

/** The dns provider against a real Unbound (test/support/unbound.ts) and a real database. */
describe('dns provider (real Unbound)', function () {
  this.timeout(30_000);
  let unbound: TestUnbound;
  let database: { db: Knex; drop(): Promise<void> };
  const providers: DnsProvider[] = [];
  const make = (extra: Record<string, unknown> = {}) => {
    const p = new DnsProvider(
      { socketPath: unbound.controlSocket, zones: ['home.arpa.'], db: database.db, timeoutMs: 1000, checkIntervalMs: 0, ...extra },
      quietLogger(),
    );
    providers.push(p);
    return p;
  };
  let dns: DnsProvider;
  const ops = () => servedOperations(dns);
  const run = (op: string, args: Record<string, unknown>) => {
    const o = ops()[op]!;
    const checked = o.schema.validate(args, { abortEarly: false, convert: false });
    if (checked.error) throw new Error(`unexpected invalid args: ${checked.error.message}`);
    return o.run(checked.value);
  };
  /** the field errors the operation's schema gives these args (what the bus answers as invalid_args) */
  const refused = (op: string, args: Record<string, unknown>) => {
    const { error } = ops()[op]!.schema.validate(args, { abortEarly: false, convert: false });
    return error ? fieldErrorsOf(error) : [];
  };
  const resolver = () => resolverOf(unbound.port);
  const rows = () => database.db('dns_records').select('name', 'type', 'data', 'ttl', 'owner').orderBy(['name', 'type', 'data']);

  before(async () => {
    [unbound, database] = await Promise.all([startUnbound(), migratedDb()]);
    dns = make();
  });
  after(async () => {
    for (const p of providers) await p.close();
    await unbound?.destroy();
    await database?.drop();
  });

  it('health: available, the version of Unbound, the zones', async () => {
    const health = await run('health', {});
    expect(health).to.deep.include({ available: true, zones: ['home.arpa.'], reason: null });
    expect((health as { version: string }).version).to.match(/^1\.\d+\.\d+/);
  });

  it('adds, lists, resolves and removes a record of each type', async () => {
    const added = [
      await run('record_add', { name: 'Host1.Home.Arpa', type: 'A', data: '192.168.77.10' }),
      await run('record_add', { name: 'host1.home.arpa.', type: 'AAAA', data: '2001:0DB8:0:0:0:0:0:0010', ttl: 120 }),
      await run('record_add', { name: 'www.home.arpa.', type: 'CNAME', data: 'host1.home.arpa' }),
      await run('record_add', { name: 'host1.home.arpa.', type: 'TXT', data: 'v=spf1 -all; a text with spaces' }),
      await run('record_add', { name: 'mail.home.arpa.', type: 'PTR', data: 'host1.home.arpa.' }),
    ];
    expect(added.map((a) => (a as { record: unknown }).record)).to.deep.equal([
      { name: 'host1.home.arpa.', type: 'A', data: '192.168.77.10', ttl: 3600 },
      { name: 'host1.home.arpa.', type: 'AAAA', data: '2001:db8::10', ttl: 120 },
      { name: 'www.home.arpa.', type: 'CNAME', data: 'host1.home.arpa.', ttl: 3600 },
      { name: 'host1.home.arpa.', type: 'TXT', data: 'v=spf1 -all; a text with spaces', ttl: 3600 },
      { name: 'mail.home.arpa.', type: 'PTR', data: 'host1.home.arpa.', ttl: 3600 },
    ]);
    const { records } = (await run('records', {})) as { records: Array<Record<string, unknown>> };
    expect(records).to.deep.include.members([
      { name: 'host1.home.arpa.', type: 'A', ttl: 3600, data: '192.168.77.10' },
      { name: 'host1.home.arpa.', type: 'AAAA', ttl: 120, data: '2001:db8::10' },
      { name: 'host1.home.arpa.', type: 'TXT', ttl: 3600, data: 'v=spf1 -all; a text with spaces' },
      { name: 'www.home.arpa.', type: 'CNAME', ttl: 3600, data: 'host1.home.arpa.' },
      { name: 'mail.home.arpa.', type: 'PTR', ttl: 3600, data: 'host1.home.arpa.' },
    ]);
    // nothing outside the zones (Unbound's own localhost and reverse data)
    expect(records.every((r) => String(r.name).endsWith('home.arpa.'))).to.equal(true);
    expect(await rows()).to.have.length(5);

    const r = resolver();
    expect(await r.resolve4('host1.home.arpa')).to.deep.equal(['192.168.77.10']);
    expect(await r.resolve6('host1.home.arpa')).to.deep.equal(['2001:db8::10']);
    expect(await r.resolveTxt('host1.home.arpa')).to.deep.equal([['v=spf1 -all; a text with spaces']]);
    expect(await r.resolveCname('www.home.arpa')).to.deep.equal(['host1.home.arpa']);
    expect(await r.resolvePtr('mail.home.arpa')).to.deep.equal(['host1.home.arpa']);

    // one record of a name: the others stay
    expect(await run('record_remove', { name: 'host1.home.arpa.', type: 'AAAA', data: '2001:db8:0::10' })).to.deep.include({ removed: 1 });
    expect(await lookupError(r.resolve6('host1.home.arpa'))).to.equal('ENODATA');
    expect(await r.resolve4('host1.home.arpa')).to.deep.equal(['192.168.77.10']);
    expect(await r.resolveTxt('host1.home.arpa')).to.deep.equal([['v=spf1 -all; a text with spaces']]);
    // all records of one type, then a whole name
    expect(await run('record_remove', { name: 'host1.home.arpa.', type: 'TXT' })).to.deep.include({ removed: 1 });
    expect(await run('record_remove', { name: 'www.home.arpa.' })).to.deep.include({ removed: 1 });
    expect(await run('record_remove', { name: 'mail.home.arpa.', type: 'PTR' })).to.deep.include({ removed: 1 });
    expect(await run('record_remove', { name: 'host1.home.arpa.' })).to.deep.include({ removed: 1 });
    for (const lookup of [r.resolve4('host1.home.arpa'), r.resolveCname('www.home.arpa'), r.resolvePtr('mail.home.arpa')]) {
      expect(await lookupError(lookup)).to.equal('ENOTFOUND');
    }
    expect(await rows()).to.deep.equal([]);
    // nothing left to remove: Unbound would answer ok, the provider says not_found
    await expectSocketError(run('record_remove', { name: 'host1.home.arpa.' }), 'not_found');
  });

  it('writes only inside the zones: forbidden_zone naming the field', async () => {
    const err = await expectSocketError(run('record_add', { name: 'evil.example.com', type: 'A', data: '192.0.2.1' }), 'forbidden_zone');
    expect(err.details).to.deep.equal([{ field: 'name', message: 'is outside the zones' }]);
    expect(err.message).to.equal('evil.example.com. is outside the zones the service writes in (home.arpa.)');
    // a single label, most likely meant inside a zone, is shown written whole
    const bare = await expectSocketError(run('record_add', { name: 'nas', type: 'A', data: '192.0.2.1' }), 'forbidden_zone');
    expect(bare.message).to.equal('nas. is outside the zones the service writes in (home.arpa.): a name is written whole, such as nas.home.arpa.');
    // a name that merely ends like the zone is outside it
    await expectSocketError(run('record_add', { name: 'xhome.arpa.', type: 'A', data: '192.0.2.1' }), 'forbidden_zone');
    await expectSocketError(run('record_add', { name: '5.77.168.192.in-addr.arpa.', type: 'PTR', data: 'host.home.arpa.' }), 'forbidden_zone');
    await expectSocketError(run('record_remove', { name: 'localhost.' }), 'forbidden_zone');
    await expectSocketError(run('records', { zone: 'example.com' }), 'forbidden_zone');
    expect(await rows()).to.deep.equal([]);
  });

  it("a PTR of a subnet's reverse zone through the port (reverseOf), all or nothing", async () => {
    const added = await dns.addRecords(
      [
        { name: 'printer.home.arpa', type: 'A', data: '192.168.77.5' },
        { name: '5.77.168.192.in-addr.arpa', type: 'PTR', data: 'printer.home.arpa' },
      ],
      { reverseOf: '192.168.77.0/24', owner: 'reservation:1:aa:bb:cc:dd:ee:ff' },
    );
    expect(added.map((r) => r.name)).to.deep.equal(['printer.home.arpa.', '5.77.168.192.in-addr.arpa.']);
    expect(await resolver().reverse('192.168.77.5')).to.deep.equal(['printer.home.arpa']);
    expect((await rows()).map((r) => r.owner)).to.deep.equal(['reservation:1:aa:bb:cc:dd:ee:ff', 'reservation:1:aa:bb:cc:dd:ee:ff']);
    // the service's PTR is listed beside the zones' records
    const { records } = (await run('records', {})) as { records: Array<{ name: string }> };
    expect(records.map((r) => r.name)).to.include('5.77.168.192.in-addr.arpa.');
    // an address outside the subnet, or a type other than PTR, stays out
    await expectSocketError(
      dns.addRecords([{ name: '5.78.168.192.in-addr.arpa', type: 'PTR', data: 'x.home.arpa' }], { reverseOf: '192.168.77.0/24' }),
      'forbidden_zone',
    );
    await expectSocketError(
      dns.addRecords([{ name: '6.77.168.192.in-addr.arpa', type: 'A', data: '192.0.2.1' }], { reverseOf: '192.168.77.0/24' }),
      'forbidden_zone',
    );
    // the second record conflicts: the first is not added either
    await expectSocketError(
      dns.addRecords([
        { name: 'scanner.home.arpa', type: 'A', data: '192.168.77.6' },
        { name: 'printer.home.arpa', type: 'A', data: '192.168.77.5' },
      ]),
      'conflict',
    );
    expect(await lookupError(resolver().resolve4('scanner.home.arpa'))).to.equal('ENOTFOUND');
    expect(await dns.removeRecords(added)).to.equal(2);
    expect(await dns.removeRecords(added)).to.equal(0);
    expect(await lookupError(resolver().reverse('192.168.77.5'))).to.equal('ENOTFOUND');
    expect(await rows()).to.deep.equal([]);
  });

  it("removing outside the zones takes only the service's own records, never an operator's beside them", async () => {
    // the operator's PTR and NS at a reverse name the service also holds a PTR of
    const reverse = '40.77.168.192.in-addr.arpa.';
    expect(await unbound.control(`local_data ${reverse} 300 IN PTR operator.example.`)).to.equal('ok\n');
    expect(await unbound.control(`local_data ${reverse} 300 IN TXT "operator"`)).to.equal('ok\n');
    await dns.addRecords([{ name: reverse, type: 'PTR', data: 'ours.home.arpa' }], { reverseOf: '192.168.77.0/24' });
    // the operator's PTR by type and data: not the service's to remove
    await expectSocketError(run('record_remove', { name: reverse, type: 'PTR', data: 'operator.example.' }), 'not_found');
    // the whole name: only the service's PTR goes
    expect(await run('record_remove', { name: reverse })).to.deep.equal({
      removed: 1,
      records: [{ name: reverse, type: 'PTR', ttl: 3600, data: 'ours.home.arpa.' }],
    });
    expect(await resolver().reverse('192.168.77.40')).to.deep.equal(['operator.example']);
    expect(await resolver().resolveTxt(reverse)).to.deep.equal([['operator']]);
    expect(await rows()).to.deep.equal([]);
    expect(await unbound.control(`local_data_remove ${reverse}`)).to.equal('ok\n');
  });

  it("removing a name inside the zones without a type leaves the operator's SOA and NS of it", async () => {
    await unbound.control('local_data apex.home.arpa. 300 IN SOA ns.home.arpa. admin.home.arpa. 1 3600 600 86400 300');
    await unbound.control('local_data apex.home.arpa. 300 IN NS ns.home.arpa.');
    await run('record_add', { name: 'apex.home.arpa', type: 'TXT', data: 'ours' });
    const gone = (await run('record_remove', { name: 'apex.home.arpa' })) as { removed: number; records: Array<{ type: string }> };
    expect(gone.records.map((r) => r.type)).to.deep.equal(['TXT']);
    const left = (await unbound.control('list_local_data')).split('\n').filter((l) => l.startsWith('apex.home.arpa.'));
    expect(left.map((l) => l.split(/\s+/)[3]).sort()).to.deep.equal(['NS', 'SOA']);
    // nothing of the five types left: not_found, and the SOA and NS stay
    await expectSocketError(run('record_remove', { name: 'apex.home.arpa' }), 'not_found');
    await unbound.control('local_data_remove apex.home.arpa.');
    expect(await rows()).to.deep.equal([]);
  });

  it('conflict: a record that exists, a CNAME beside other records, a record beside a CNAME', async () => {
    await run('record_add', { name: 'nas.home.arpa', type: 'A', data: '192.168.77.20' });
    await expectSocketError(run('record_add', { name: 'NAS.home.arpa.', type: 'A', data: '192.168.77.20', ttl: 60 }), 'conflict');
    await expectSocketError(run('record_add', { name: 'nas.home.arpa', type: 'CNAME', data: 'other.home.arpa' }), 'conflict');
    await run('record_add', { name: 'files.home.arpa', type: 'CNAME', data: 'nas.home.arpa' });
    await expectSocketError(run('record_add', { name: 'files.home.arpa', type: 'TXT', data: 'hello' }), 'conflict');
    await expectSocketError(run('record_add', { name: 'files.home.arpa', type: 'CNAME', data: 'nas2.home.arpa' }), 'conflict');
    // a record Unbound serves that the service did not add counts too
    expect(await unbound.control('local_data operator.home.arpa. 300 IN A 192.168.77.99')).to.equal('ok\n');
    await expectSocketError(run('record_add', { name: 'operator.home.arpa', type: 'CNAME', data: 'nas.home.arpa' }), 'conflict');
    // removing one record of a name keeps what the operator put there
    await run('record_add', { name: 'operator.home.arpa', type: 'TXT', data: 'managed' });
    await run('record_remove', { name: 'operator.home.arpa', type: 'TXT' });
    expect(await resolver().resolve4('operator.home.arpa')).to.deep.equal(['192.168.77.99']);
    await run('record_remove', { name: 'operator.home.arpa' });
    await run('record_remove', { name: 'files.home.arpa' });
    await run('record_remove', { name: 'nas.home.arpa' });
    expect(await rows()).to.deep.equal([]);
  });

  it('two instances adding to one name at once: one wins, the other hears conflict', async () => {
    const [a, b] = [make(), make()];
    for (let round = 0; round < 5; round++) {
      const name = `race${round}.home.arpa`;
      const results = await Promise.allSettled([
        a.addRecords([{ name, type: 'CNAME', data: 'nas.home.arpa' }]),
        b.addRecords([{ name, type: 'A', data: '192.168.77.70' }]),
        a.addRecords([{ name, type: 'TXT', data: 'third' }]),
      ]);
      expect(results.filter((r) => r.status === 'fulfilled').length, `round ${round}`).to.be.oneOf([1, 2]);
      const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => (r.reason as { code: string }).code);
      expect(refused.every((c) => c === 'conflict')).to.equal(true);
      const stored = (await rows()).filter((r) => r.name === `${name}.`);
      // a CNAME alone, or the A and TXT records without it
      expect(stored.some((r) => r.type === 'CNAME') ? stored.length : 0).to.be.oneOf([0, 1]);
      const { records } = (await run('records', { zone: `${name}.` })) as { records: Array<{ type: string }> };
      expect(records.map((r) => r.type).sort()).to.deep.equal(stored.map((r) => r.type).sort());
      await a.removeRecords(stored.map((r) => ({ name: r.name, type: r.type, data: r.data })));
    }
    expect(await rows()).to.deep.equal([]);
  });

  it('strict grammar: invalid_args naming the field, nothing reaches Unbound', async () => {
    expect(refused('record_add', { name: 'a.home.arpa', type: 'TXT', data: 'one\ntwo.home.arpa. A 192.0.2.1' })).to.deep.equal([
      { field: 'data', message: 'must be one line (no line breaks)' },
    ]);
    expect(refused('record_add', { name: 'a.home.arpa', type: 'TXT', data: 'x" "y' })).to.deep.equal([
      { field: 'data', message: 'must not hold a double quote or a backslash' },
    ]);
    expect(refused('record_add', { name: 'a.home.arpa', type: 'TXT', data: 'x'.repeat(256) })[0]!.field).to.equal('data');
    expect(refused('record_add', { name: 'a.home.arpa', type: 'A', data: '192.0.2.1 junk' })[0]!.field).to.equal('data');
    expect(refused('record_add', { name: 'a.home.arpa', type: 'A', data: '192.0.2.256' })[0]!.field).to.equal('data');
    expect(refused('record_add', { name: 'a.home.arpa', type: 'AAAA', data: '2001:db8::1::2' })[0]!.field).to.equal('data');
    expect(refused('record_add', { name: 'a.home.arpa', type: 'CNAME', data: 'b..home.arpa' })[0]!.field).to.equal('data');
    expect(refused('record_add', { name: 'bad_label.home.arpa', type: 'A', data: '192.0.2.1' })[0]!.field).to.equal('name');
    expect(refused('record_add', { name: '-x.home.arpa', type: 'A', data: '192.0.2.1' })[0]!.field).to.equal('name');
    expect(refused('record_add', { name: `${'a'.repeat(64)}.home.arpa`, type: 'A', data: '192.0.2.1' })[0]!.field).to.equal('name');
    expect(refused('record_add', { name: 'a.home.arpa flush x', type: 'A', data: '192.0.2.1' })[0]!.field).to.equal('name');
    expect(refused('record_add', { name: 'a.home.arpa', type: 'MX', data: '10 mail.home.arpa' })[0]!.field).to.equal('type');
    expect(refused('record_add', { name: 'a.home.arpa', type: 'A', data: '192.0.2.1', ttl: -1 })[0]!.field).to.equal('ttl');
    expect(refused('record_remove', { name: 'a.home.arpa', data: '192.0.2.1' })).to.deep.equal([
      { field: 'data', message: 'needs the type of the record beside it' },
    ]);
    expect(refused('flush', { name: 'a.home.arpa\nstop' })[0]!.field).to.equal('name');
    // the port checks the same
    const err = await expectSocketError(dns.addRecords([{ name: 'a.home.arpa', type: 'TXT', data: 'a"\nlocal_zone x. static' }]), 'invalid_args');
    expect(err.details).to.deep.equal([{ field: 'records[0].data', message: 'must be one line (no line breaks)' }]);
    expect(await rows()).to.deep.equal([]);
    expect(await unbound.control('list_local_data')).not.to.match(/a\.home\.arpa/);
  });

  it("a record whose name starts like Unbound's error answers is listed and removed like any other", async () => {
    await run('record_add', { name: 'error.home.arpa', type: 'TXT', data: 'error parsing nothing' });
    const { records } = (await run('records', { zone: 'error.home.arpa' })) as { records: unknown[] };
    expect(records).to.deep.equal([{ name: 'error.home.arpa.', type: 'TXT', ttl: 3600, data: 'error parsing nothing' }]);
    expect(await run('record_remove', { name: 'error.home.arpa' })).to.deep.include({ removed: 1 });
  });

  it('flush: the name leaves the cache', async () => {
    expect(await run('flush', { name: 'Some.Name.example' })).to.deep.equal({ flushed: 'some.name.example.' });
  });

  it('Unbound restarted: every record the service added is put back at the next check, by any instance', async () => {
    await run('record_add', { name: 'keep.home.arpa', type: 'A', data: '192.168.77.30' });
    await run('record_add', { name: 'keep.home.arpa', type: 'TXT', data: 'still here' });
    await dns.addRecords([{ name: '30.77.168.192.in-addr.arpa', type: 'PTR', data: 'keep.home.arpa' }], { reverseOf: '192.168.77.0/24' });
    expect(await unbound.control('list_local_zones')).to.include(MARKER_ZONE);
    await unbound.stop();
    await unbound.start();
    expect(await lookupError(resolver().resolve4('keep.home.arpa'))).to.equal('ENOTFOUND');
    // another instance on the same database notices first (the table is the truth)
    const other = make();
    expect(await other.health_check()).to.include({ available: true });
    const r = resolver();
    expect(await r.resolve4('keep.home.arpa')).to.deep.equal(['192.168.77.30']);
    expect(await r.resolveTxt('keep.home.arpa')).to.deep.equal([['still here']]);
    expect(await r.reverse('192.168.77.30')).to.deep.equal(['keep.home.arpa']);
    // a reload empties the local data as well
    expect(await unbound.control('reload')).to.equal('ok\n');
    expect(await lookupError(resolver().resolve4('keep.home.arpa'))).to.equal('ENOTFOUND');
    await new Promise((res) => setTimeout(res, 1100));
    expect(await dns.isAvailable()).to.equal(true);
    expect(await resolver().resolve4('keep.home.arpa')).to.deep.equal(['192.168.77.30']);
    await run('record_remove', { name: 'keep.home.arpa' });
    expect(await dns.removeRecords([{ name: '30.77.168.192.in-addr.arpa', type: 'PTR', data: 'keep.home.arpa' }])).to.equal(1);
  });

  it('Unbound stopped: unavailable within a second, back by itself when Unbound is', async () => {
    const fresh = make({ availabilityTtlMs: 300 });
    expect(await fresh.isAvailable()).to.equal(true);
    await unbound.stop();
    try {
      const started = Date.now();
      await expectSocketError(fresh.addRecords([{ name: 'away.home.arpa', type: 'A', data: '192.168.77.40' }]), 'unavailable');
      expect(await fresh.isAvailable()).to.equal(false);
      const health = await fresh.health_check();
      expect(health).to.deep.include({ available: false, version: null });
      expect(String(health.reason)).to.match(/Unbound/);
      expect(Date.now() - started).to.be.below(1000);
    } finally {
      await unbound.start();
    }
    await eventually(() => fresh.isAvailable(), 3000);
    await fresh.addRecords([{ name: 'back.home.arpa', type: 'A', data: '192.168.77.41' }]);
    expect(await resolver().resolve4('back.home.arpa')).to.deep.equal(['192.168.77.41']);
    await fresh.removeRecords([{ name: 'back.home.arpa', type: 'A', data: '192.168.77.41' }]);
  });

  it('Unbound frozen: every call ends at the timeout as unavailable, and it serves again once thawed', async () => {
    const fresh = make({ availabilityTtlMs: 0, timeoutMs: 300 });
    expect(await fresh.isAvailable()).to.equal(true);
    unbound.pause();
    try {
      const started = Date.now();
      const err = await expectSocketError(fresh.addRecords([{ name: 'frozen.home.arpa', type: 'A', data: '192.168.77.50' }]), 'unavailable');
      expect(err.message).to.match(/within 300 ms/);
      expect(Date.now() - started).to.be.below(1000);
      expect(await fresh.health_check()).to.deep.include({ available: false, version: null });
    } finally {
      unbound.resume();
    }
    expect(await fresh.isAvailable()).to.equal(true);
    expect(await rows()).to.deep.equal([]);
  });

  it('Unbound frozen while it is given a record: what it takes after thawing is taken out again at the next check', async () => {
    const fresh = make({ availabilityTtlMs: 0, timeoutMs: 300 });
    expect(await fresh.isAvailable()).to.equal(true);
    // freeze Unbound just as the record is written to its socket: the command waits there, and runs once thawed
    const control = (fresh as unknown as { control: { command(c: string, l?: readonly string[]): Promise<string> } }).control;
    const original = control.command.bind(control);
    control.command = (command, lines) => {
      if (command === 'local_datas') unbound.pause();
      return original(command, lines);
    };
    try {
      await expectSocketError(fresh.addRecords([{ name: 'limbo.home.arpa', type: 'A', data: '192.168.77.51' }]), 'unavailable');
    } finally {
      control.command = original;
      unbound.resume();
    }
    expect(await rows()).to.deep.equal([]);
    // the caller heard it failed: the name must not resolve once Unbound answers again
    await eventually(async () => (await fresh.isAvailable()) && !(await unbound.control('list_local_data')).includes('limbo.home.arpa.'));
    expect(await lookupError(resolver().resolve4('limbo.home.arpa'))).to.equal('ENOTFOUND');
  });

  it('instances with an Unbound each, on one database: what one adds or removes reaches the other at its next check', async () => {
    const second = await startUnbound();
    try {
      const b = make({ socketPath: second.controlSocket, availabilityTtlMs: 0 });
      expect(await b.isAvailable()).to.equal(true);
      const a = make({ availabilityTtlMs: 0 });
      await a.addRecords([{ name: 'shared.home.arpa', type: 'A', data: '192.168.77.60' }]);
      expect(await b.isAvailable()).to.equal(true);
      expect(await resolverOf(second.port).resolve4('shared.home.arpa')).to.deep.equal(['192.168.77.60']);
      // removed through b: a's Unbound lets it go at a's next check
      expect(await b.removeRecords([{ name: 'shared.home.arpa', type: 'A', data: '192.168.77.60' }])).to.equal(1);
      expect(await resolver().resolve4('shared.home.arpa')).to.deep.equal(['192.168.77.60']);
      expect(await a.isAvailable()).to.equal(true);
      expect(await lookupError(resolver().resolve4('shared.home.arpa'))).to.equal('ENOTFOUND');
      expect(await lookupError(resolverOf(second.port).resolve4('shared.home.arpa'))).to.equal('ENOTFOUND');
    } finally {
      await second.destroy();
    }
  });

  it('a configured zone Unbound does not declare is added as a static zone', async () => {
    const lab = make({ zones: ['lab.home.arpa.', 'lab.example.'] });
    expect(await lab.isAvailable()).to.equal(true);
    const zones = await unbound.control('list_local_zones');
    expect(zones).to.match(/^lab\.example\. static$/m);
    await lab.addRecords([{ name: 'box.lab.example', type: 'A', data: '192.0.2.50' }]);
    expect(await resolver().resolve4('box.lab.example')).to.deep.equal(['192.0.2.50']);
    // the zone answers for itself: other names are NXDOMAIN, not asked upstream
    expect(await lookupError(resolver().resolve4('other.lab.example'))).to.equal('ENOTFOUND');
    await lab.removeRecords([{ name: 'box.lab.example', type: 'A', data: '192.0.2.50' }]);
  });
});
