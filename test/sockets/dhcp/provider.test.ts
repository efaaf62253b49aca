import fs from 'node:fs';
import { expect } from 'chai';
import knex, { type Knex } from 'knex';
import { DHCP_CONFIG_LOCK_KEY } from '../../../src/sockets/dhcp/lock.js';
import { DhcpProvider } from '../../../src/sockets/dhcp/provider.js';
import { SocketError } from '../../../src/sockets/errors.js';
import { startKea, type TestKea } from '../../support/kea.js';
import { freshDatabase, PG_URL, type TestDb } from '../../support/service.js';
import { eventually, expectSocketError, quietLogger } from '../helpers.js';

/**
 * The dhcp provider against a real Kea DHCPv4 2.2 (test/support/kea.ts), called as the bus
 * handler calls it: args validated by the operation's schema (no conversion), then run.
 */
describe('dhcp provider (real Kea)', function () {
  this.timeout(30_000);
  let kea: TestKea;
  let pg: TestDb | null = null;
  let db: Knex | undefined;
  let dhcp: DhcpProvider;

  const make = (extra: Record<string, unknown> = {}) =>
    new DhcpProvider({ socketPath: kea.socketPath, timeoutMs: 2000, dnsZones: ['home.arpa.'], db, postgres: Boolean(db), ...extra }, quietLogger());

  /** one operation as the bus handler runs it: the schema (convert: false), then run */
  const op = async (provider: DhcpProvider, name: string, args: Record<string, unknown> = {}): Promise<any> => {
    const operation = provider.operations()[name]!;
    const checked = operation.schema.validate(args, { convert: false, abortEarly: false });
    if (checked.error)
      throw new SocketError(
        'invalid_args',
        checked.error.message,
        checked.error.details.map((d) => ({ field: d.path.join('.') })),
      );
    const result = await operation.run(checked.value);
    // what it answers is what it documents
    const shape = operation.result.validate(result);
    expect(shape.error, shape.error?.message).to.equal(undefined);
    return result;
  };

  before(async () => {
    kea = await startKea();
    if (PG_URL) {
      pg = await freshDatabase(PG_URL);
      db = knex({ client: 'pg', connection: pg.url!, pool: { min: 0, max: 4 } });
    }
    dhcp = make();
  });
  after(async () => {
    await db?.destroy();
    await pg?.drop();
    await kea?.stop();
  });

  it('health: available, the version and the subnets', async () => {
    expect(await dhcp.isAvailable()).to.equal(true);
    expect(await op(dhcp, 'health')).to.deep.equal({
      available: true,
      version: '2.2.0',
      subnets: [
        { id: 1, subnet: '192.0.2.0/24' },
        { id: 2, subnet: '198.51.100.0/24' },
      ],
    });
  });

  it('leases: every filter finds the leases Kea holds; release deletes one', async () => {
    const add = async (lease: Record<string, unknown>) => expect((await kea.command('lease4-add', lease)).result).to.equal(0);
    await add({ 'ip-address': '192.0.2.150', 'hw-address': '0a:00:00:00:00:01', hostname: 'laptop.home.arpa' });
    await add({ 'ip-address': '192.0.2.151', 'hw-address': '0a:00:00:00:00:02', hostname: 'phone.home.arpa' });
    await add({ 'ip-address': '198.51.100.150', 'hw-address': '0a:00:00:00:00:03', hostname: 'tv.home.arpa' });
    const ips = (r: { leases: Array<{ ip_address: string }> }) => r.leases.map((l) => l.ip_address).sort();

    const all = await op(dhcp, 'leases');
    expect(ips(all)).to.deep.equal(['192.0.2.150', '192.0.2.151', '198.51.100.150']);
    const laptop = all.leases.find((l: any) => l.ip_address === '192.0.2.150');
    expect(laptop).to.include({ hw_address: '0a:00:00:00:00:01', hostname: 'laptop.home.arpa', subnet_id: 1, state: 'active' });
    // added now with Kea's valid-lifetime of an hour
    const ends = Date.parse(laptop.expires_at) - Date.now();
    expect(ends).to.be.within(3590_000, 3610_000);

    expect(ips(await op(dhcp, 'leases', { subnet_id: 1 }))).to.deep.equal(['192.0.2.150', '192.0.2.151']);
    expect(ips(await op(dhcp, 'leases', { subnet_id: 2 }))).to.deep.equal(['198.51.100.150']);
    // any accepted form of the address, answered in Kea's form
    expect(ips(await op(dhcp, 'leases', { hw_address: '0A-00-00-00-00-02' }))).to.deep.equal(['192.0.2.151']);
    expect(ips(await op(dhcp, 'leases', { hostname: 'TV.home.arpa.' }))).to.deep.equal(['198.51.100.150']);
    expect(ips(await op(dhcp, 'leases', { ip_address: '192.0.2.150' }))).to.deep.equal(['192.0.2.150']);
    // the filters combine
    expect(ips(await op(dhcp, 'leases', { subnet_id: 2, hw_address: '0a:00:00:00:00:01' }))).to.deep.equal([]);
    expect(ips(await op(dhcp, 'leases', { ip_address: '192.0.2.99' }))).to.deep.equal([]);
    await expectSocketError(op(dhcp, 'leases', { subnet_id: 99 }), 'not_found');
    await expectSocketError(op(dhcp, 'leases', { hw_address: 'not-a-mac' }), 'invalid_args');

    expect(await op(dhcp, 'lease_release', { ip_address: '192.0.2.151' })).to.deep.equal({ released: true, ip_address: '192.0.2.151' });
    expect((await kea.command('lease4-get', { 'ip-address': '192.0.2.151' })).result).to.equal(3);
    expect(ips(await op(dhcp, 'leases', { subnet_id: 1 }))).to.deep.equal(['192.0.2.150']);
    const again = await expectSocketError(op(dhcp, 'lease_release', { ip_address: '192.0.2.151' }), 'not_found');
    expect(again.details).to.deep.equal([{ field: 'ip_address', message: 'no lease for this address' }]);
  });

  it('reservations: added, listed, kept in the configuration file, still there after Kea restarts, removed', async () => {
    const added = await op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:AA:BB:CC:DD:01', ip_address: '192.0.2.10', hostname: 'printer' });
    // a bare label is qualified by the first zone; the address in Kea's form
    const printer = { subnet_id: 1, hw_address: '02:aa:bb:cc:dd:01', ip_address: '192.0.2.10', hostname: 'printer.home.arpa', dns: false };
    expect(added).to.deep.equal({ reservation: printer });
    await op(dhcp, 'reservation_add', { subnet_id: 2, hw_address: '02aabbccdd02', ip_address: '198.51.100.10', hostname: 'nas.home.arpa.' });
    const nas = { subnet_id: 2, hw_address: '02:aa:bb:cc:dd:02', ip_address: '198.51.100.10', hostname: 'nas.home.arpa', dns: false };
    expect((await op(dhcp, 'reservations')).reservations).to.deep.equal([printer, nas]);
    expect((await op(dhcp, 'reservations', { subnet_id: 2 })).reservations).to.deep.equal([nas]);
    await expectSocketError(op(dhcp, 'reservations', { subnet_id: 99 }), 'not_found');

    // config-write rewrote the operator's file
    const onDisk = await kea.configOnDisk();
    expect(onDisk.Dhcp4.subnet4[0].reservations).to.have.length(1);
    expect(onDisk.Dhcp4.subnet4[0].reservations[0]).to.include({
      'hw-address': '02:aa:bb:cc:dd:01',
      'ip-address': '192.0.2.10',
      hostname: 'printer.home.arpa',
    });

    await kea.halt();
    await kea.start();
    expect((await op(dhcp, 'reservations')).reservations).to.deep.equal([printer, nas]);

    const removed = await op(dhcp, 'reservation_remove', { subnet_id: 1, hw_address: '02-aa-bb-cc-dd-01' });
    expect(removed).to.deep.equal({ removed: true, reservation: printer, records_removed: 0 });
    expect((await op(dhcp, 'reservations')).reservations).to.deep.equal([nas]);
    expect((await kea.configOnDisk()).Dhcp4.subnet4[0].reservations).to.deep.equal([]);
    await expectSocketError(op(dhcp, 'reservation_remove', { subnet_id: 1, hw_address: '02:aa:bb:cc:dd:01' }), 'not_found');
    await op(dhcp, 'reservation_remove', { subnet_id: 2, hw_address: '02:aa:bb:cc:dd:02' });
  });

  it('refuses a reservation strictly: a taken address or name, an unknown subnet, an address outside the subnet, a name outside the zones', async () => {
    await op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:01:01', ip_address: '192.0.2.20', hostname: 'first' });
    try {
      const sameMac = await expectSocketError(
        op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:01:01', ip_address: '192.0.2.21' }),
        'conflict',
      );
      expect(sameMac.details).to.deep.equal([{ field: 'hw_address', message: '02:00:00:00:01:01 already has a reservation in subnet 1' }]);
      const sameIp = await expectSocketError(
        op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:01:02', ip_address: '192.0.2.20' }),
        'conflict',
      );
      expect((sameIp.details as any)[0].field).to.equal('ip_address');
      const sameName = await expectSocketError(
        op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:01:02', ip_address: '192.0.2.22', hostname: 'first.home.arpa' }),
        'conflict',
      );
      expect((sameName.details as any)[0].field).to.equal('hostname');

      const noSubnet = await expectSocketError(
        op(dhcp, 'reservation_add', { subnet_id: 99, hw_address: '02:00:00:00:01:03', ip_address: '192.0.2.23' }),
        'not_found',
      );
      expect((noSubnet.details as any)[0].field).to.equal('subnet_id');
      for (const ip of ['198.51.100.23', '192.0.2.0', '192.0.2.255']) {
        const outside = await expectSocketError(op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:01:03', ip_address: ip }), 'invalid_args');
        expect(outside.details, ip).to.deep.equal([{ field: 'ip_address', message: 'must be a host address inside subnet 1 (192.0.2.0/24)' }]);
      }
      const zone = await expectSocketError(
        op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:01:03', ip_address: '192.0.2.23', hostname: 'www.example.com' }),
        'forbidden_zone',
      );
      expect((zone.details as any)[0].field).to.equal('hostname');
      const noDns = await expectSocketError(
        op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:01:03', ip_address: '192.0.2.23', hostname: 'x', dns: true }),
        'invalid_args',
      );
      expect((noDns.details as any)[0].field).to.equal('dns');
      for (const [args, field] of [
        [{ subnet_id: '1', hw_address: '02:00:00:00:01:03', ip_address: '192.0.2.23' }, 'subnet_id'],
        [{ subnet_id: 1, hw_address: '02:00:00:00:01', ip_address: '192.0.2.23' }, 'hw_address'],
        [{ subnet_id: 1, hw_address: '02:00:00:00:01:03', ip_address: '192.0.2.300' }, 'ip_address'],
        [{ subnet_id: 1, hw_address: '02:00:00:00:01:03', ip_address: '192.0.2.23', hostname: 'bad_name' }, 'hostname'],
        [{ subnet_id: 1, hw_address: '02:00:00:00:01:03', ip_address: '192.0.2.23', dns: 'yes' }, 'dns'],
      ] as const) {
        const bad = await expectSocketError(op(dhcp, 'reservation_add', args), 'invalid_args');
        expect((bad.details as any)[0].field, JSON.stringify(args)).to.equal(field);
      }
      // nothing of the refused ones reached Kea
      const kept = (await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations;
      expect(kept.map((r: any) => r['hw-address'])).to.deep.equal(['02:00:00:00:01:01']);
    } finally {
      await op(dhcp, 'reservation_remove', { subnet_id: 1, hw_address: '02:00:00:00:01:01' });
    }
  });

  it("an address Kea has leased to another client is taken (conflict); the client's own lease, or an expired one, is not", async () => {
    const now = Math.floor(Date.now() / 1000);
    expect((await kea.command('lease4-add', { 'ip-address': '192.0.2.160', 'hw-address': '02:00:00:00:02:99', 'subnet-id': 1 })).result).to.equal(0);
    expect((await kea.command('lease4-add', { 'ip-address': '192.0.2.161', 'hw-address': '02:00:00:00:02:01', 'subnet-id': 1 })).result).to.equal(0);
    const old = { 'ip-address': '192.0.2.162', 'hw-address': '02:00:00:00:02:98', 'subnet-id': 1, 'valid-lft': 60, expire: now - 10 };
    const added = await kea.command('lease4-add', old);
    expect(added.result, added.text).to.equal(0);
    try {
      const leased = await expectSocketError(
        op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:02:01', ip_address: '192.0.2.160' }),
        'conflict',
      );
      expect(leased.details).to.deep.equal([{ field: 'ip_address', message: '192.0.2.160 is leased to another client (release its lease first)' }]);
      expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations ?? []).to.deep.equal([]);
      // the client's own address, and an address whose lease ran out, may be reserved
      await op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:02:01', ip_address: '192.0.2.161' });
      await op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:02:02', ip_address: '192.0.2.162' });
      await op(dhcp, 'reservation_remove', { subnet_id: 1, hw_address: '02:00:00:00:02:01' });
      await op(dhcp, 'reservation_remove', { subnet_id: 1, hw_address: '02:00:00:00:02:02' });
      // released, the address is free
      await op(dhcp, 'lease_release', { ip_address: '192.0.2.160' });
      await op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:02:01', ip_address: '192.0.2.160' });
      await op(dhcp, 'reservation_remove', { subnet_id: 1, hw_address: '02:00:00:00:02:01' });
    } finally {
      for (const ip of ['192.0.2.160', '192.0.2.161', '192.0.2.162']) await kea.command('lease4-del', { 'ip-address': ip });
    }
  });

  for (const frozenAt of ['config-set', 'config-write']) {
    it(`Kea frozen as it is sent ${frozenAt}: unavailable, and once it runs again its configuration and its file are as before`, async () => {
      const frozen = new DhcpProvider({ socketPath: kea.socketPath, timeoutMs: 300, dnsZones: ['home.arpa.'] }, quietLogger());
      const runningBefore = (await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations ?? [];
      const diskBefore = (await kea.configOnDisk()).Dhcp4.subnet4[0].reservations ?? [];
      // the real client, made to freeze Kea (SIGSTOP) just before the command goes: Kea reads it once thawed
      const client = (frozen as unknown as { kea: { call(c: string, a?: unknown): Promise<unknown> } }).kea;
      const original = client.call.bind(client);
      client.call = (command, args) => {
        if (command === frozenAt) kea.pause();
        return original(command, args);
      };
      try {
        await expectSocketError(op(frozen, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:03:01', ip_address: '192.0.2.171' }), 'unavailable');
      } finally {
        client.call = original;
        kea.resume();
      }
      // the caller heard it failed: Kea neither runs nor keeps the reservation, now or after a restart
      await eventually(async () => (await kea.command('version-get').catch(() => null))?.result === 0);
      await new Promise((r) => setTimeout(r, 300));
      const hw = (list: any[]) => list.map((r) => r['hw-address']);
      expect(hw((await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations ?? [])).to.deep.equal(hw(runningBefore));
      expect(hw((await kea.configOnDisk()).Dhcp4.subnet4[0].reservations ?? [])).to.deep.equal(hw(diskBefore));
    });
  }

  it("an operator's change of Kea's configuration made during a reservation change is not overwritten: conflict, and the operator's change stays", async () => {
    const racing = new DhcpProvider({ socketPath: kea.socketPath, timeoutMs: 2000, dnsZones: ['home.arpa.'] }, quietLogger());
    const client = (racing as unknown as { kea: { call(c: string, a?: unknown): Promise<unknown> } }).kea;
    const original = client.call.bind(client);
    let reads = 0;
    // the operator's config-set lands between the change's read of the configuration and its write
    client.call = async (command, args) => {
      if (command === 'config-get' && ++reads === 2) {
        const config = (await kea.command('config-get')).arguments;
        config.Dhcp4.subnet4[1].reservations = [{ 'hw-address': '02:00:00:00:04:99', 'ip-address': '198.51.100.99' }];
        delete config.hash;
        expect((await kea.command('config-set', config)).result).to.equal(0);
      }
      return original(command, args);
    };
    try {
      const err = await expectSocketError(
        op(racing, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:04:01', ip_address: '192.0.2.181' }),
        'conflict',
      );
      expect(err.message).to.match(/changed while this change was made/);
    } finally {
      client.call = original;
    }
    const running = (await kea.command('config-get')).arguments.Dhcp4.subnet4;
    expect((running[0].reservations ?? []).map((r: any) => r['hw-address'])).to.not.include('02:00:00:00:04:01');
    expect(running[1].reservations.map((r: any) => r['hw-address'])).to.deep.equal(['02:00:00:00:04:99']);
    // tried again, it is made on top of the operator's change
    await op(racing, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:04:01', ip_address: '192.0.2.181' });
    expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[1].reservations.map((r: any) => r['hw-address'])).to.deep.equal(['02:00:00:00:04:99']);
    await op(racing, 'reservation_remove', { subnet_id: 1, hw_address: '02:00:00:00:04:01' });
    await op(racing, 'reservation_remove', { subnet_id: 2, hw_address: '02:00:00:00:04:99' });
  });

  it('a configuration file Kea cannot write: the reservation is refused and Kea runs the configuration it had', async () => {
    const file = await fs.promises.readFile(kea.configPath);
    await fs.promises.rm(kea.configPath);
    await fs.promises.mkdir(kea.configPath);
    try {
      const err = await expectSocketError(op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:02:01', ip_address: '192.0.2.30' }), 'failed');
      expect(err.message).to.match(/could not write its configuration file/);
      expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations).to.deep.equal([]);
    } finally {
      await fs.promises.rmdir(kea.configPath);
      await fs.promises.writeFile(kea.configPath, file);
    }
  });

  it('a subnet inside a shared network: listed by health, its reservations added and removed', async () => {
    const config = (await kea.command('config-get')).arguments;
    const original = structuredClone(config);
    config.Dhcp4['shared-networks'] = [{ name: 'lab', subnet4: [{ id: 3, subnet: '203.0.113.0/24', pools: [{ pool: '203.0.113.100 - 203.0.113.200' }] }] }];
    expect((await kea.command('config-set', config)).result, 'config-set').to.equal(0);
    try {
      expect((await op(dhcp, 'health')).subnets).to.deep.include({ id: 3, subnet: '203.0.113.0/24' });
      await op(dhcp, 'reservation_add', { subnet_id: 3, hw_address: '02:cc:00:00:00:01', ip_address: '203.0.113.5', hostname: 'lab1' });
      const inKea = (await kea.command('config-get')).arguments.Dhcp4['shared-networks'][0].subnet4[0].reservations;
      expect(inKea.map((r: any) => r['ip-address'])).to.deep.equal(['203.0.113.5']);
      expect((await op(dhcp, 'reservations', { subnet_id: 3 })).reservations).to.deep.equal([
        { subnet_id: 3, hw_address: '02:cc:00:00:00:01', ip_address: '203.0.113.5', hostname: 'lab1.home.arpa', dns: false },
      ]);
      await op(dhcp, 'reservation_remove', { subnet_id: 3, hw_address: '02:cc:00:00:00:01' });
      expect((await op(dhcp, 'reservations', { subnet_id: 3 })).reservations).to.deep.equal([]);
    } finally {
      expect((await kea.command('config-set', original)).result).to.equal(0);
      expect((await kea.command('config-write')).result).to.equal(0);
    }
  });

  it('reads an answer that comes in many pieces (250 reservations with options) and changes it', async () => {
    const config = (await kea.command('config-get')).arguments;
    const original = structuredClone(config);
    config.Dhcp4.subnet4[1].reservations = Array.from({ length: 250 }, (_, i) => ({
      'hw-address': `02:bb:00:00:00:${i.toString(16).padStart(2, '0')}`,
      'ip-address': `198.51.100.${i + 1}`,
      'option-data': [{ name: 'domain-name', data: `${'x'.repeat(60)}.${'y'.repeat(60)}.home.arpa` }],
    }));
    expect((await kea.command('config-set', config)).result).to.equal(0);
    try {
      expect(JSON.stringify((await kea.command('config-get')).arguments).length).to.be.above(64 * 1024);
      expect((await op(dhcp, 'reservations', { subnet_id: 2 })).reservations).to.have.length(250);
      await op(dhcp, 'reservation_add', { subnet_id: 2, hw_address: '02:bb:ff:ff:ff:ff', ip_address: '198.51.100.251' });
      expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[1].reservations).to.have.length(251);
    } finally {
      expect((await kea.command('config-set', original)).result).to.equal(0);
      expect((await kea.command('config-write')).result).to.equal(0);
    }
  });

  it(`concurrent changes lose nothing (${PG_URL ? 'two providers: the PostgreSQL advisory lock' : 'one provider: the in-process queue'})`, async () => {
    const other = PG_URL ? make() : dhcp;
    const macs = Array.from({ length: 8 }, (_, i) => `02:00:00:00:03:0${i}`);
    await Promise.all(macs.map((mac, i) => op(i % 2 ? other : dhcp, 'reservation_add', { subnet_id: 1, hw_address: mac, ip_address: `192.0.2.${40 + i}` })));
    const listed = (await op(dhcp, 'reservations', { subnet_id: 1 })).reservations.map((r: any) => r.hw_address).sort();
    expect(listed).to.deep.equal(macs);
    await Promise.all(macs.map((mac, i) => op(i % 2 ? other : dhcp, 'reservation_remove', { subnet_id: 1, hw_address: mac })));
    expect((await op(dhcp, 'reservations', { subnet_id: 1 })).reservations).to.deep.equal([]);
  });

  // what only PostgreSQL has: other instances on the same database
  if (PG_URL) {
    it('another instance holding the configuration lock: a change waits for it, and past six timeouts answers unavailable', async () => {
      const quick = make({ timeoutMs: 200 });
      const held = await db!.transaction();
      await held.raw('SELECT pg_advisory_xact_lock(?::bigint)', [DHCP_CONFIG_LOCK_KEY]);
      try {
        const started = Date.now();
        const err = await expectSocketError(
          op(quick, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:05:01', ip_address: '192.0.2.60' }),
          'unavailable',
        );
        expect(err.message).to.match(/another instance is changing Kea's configuration/);
        expect(Date.now() - started).to.be.within(1100, 3000);
        // a change that waits less than that goes through once the lock is free
        const waiting = op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:05:02', ip_address: '192.0.2.61' });
        await new Promise((r) => setTimeout(r, 300));
        expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations).to.deep.equal([]);
        await held.commit();
        expect((await waiting).reservation.hw_address).to.equal('02:00:00:00:05:02');
      } finally {
        if (!held.isCompleted()) await held.rollback();
      }
      await op(dhcp, 'reservation_remove', { subnet_id: 1, hw_address: '02:00:00:00:05:02' });
    });
  }

  for (const [how, signal] of [
    ['stopped (its socket removed)', 'SIGTERM'],
    ['killed (its socket file left behind)', 'SIGKILL'],
  ] as const) {
    it(`Kea ${how}: unavailable within a second, then back by itself`, async () => {
      await kea.halt(signal);
      try {
        const started = Date.now();
        await expectSocketError(op(dhcp, 'leases'), 'unavailable');
        await expectSocketError(op(dhcp, 'reservation_add', { subnet_id: 1, hw_address: '02:00:00:00:04:01', ip_address: '192.0.2.50' }), 'unavailable');
        // what the bus handler asks before an operation: the failed call said so already
        expect(await dhcp.isAvailable()).to.equal(false);
        expect(dhcp.unavailable_reason).to.match(/Kea is not running/);
        const health = await op(dhcp, 'health');
        expect(health).to.include({ available: false, version: null });
        expect(health.subnets).to.deep.equal([]);
        expect(Date.now() - started).to.be.below(1000);
      } finally {
        await kea.start();
      }
      expect((await op(dhcp, 'health')).available).to.equal(true);
      expect(await op(dhcp, 'leases', { ip_address: '192.0.2.150' })).to.have.nested.property('leases[0].ip_address', '192.0.2.150');
      expect(await dhcp.isAvailable()).to.equal(true);
    });
  }

  it('Kea that stops answering (paused): unavailable after the timeout, back when it answers', async () => {
    const quick = make({ timeoutMs: 500 });
    kea.pause();
    try {
      const started = Date.now();
      const err = await expectSocketError(op(quick, 'leases'), 'unavailable');
      expect(err.message).to.match(/did not answer lease4-get-all within 500 ms/);
      expect(Date.now() - started).to.be.below(1000);
      expect(await quick.isAvailable()).to.equal(false);
    } finally {
      kea.resume();
    }
    await new Promise((r) => setTimeout(r, 1000));
    expect(await quick.isAvailable()).to.equal(true);
    expect((await op(quick, 'leases')).leases.length).to.be.at.least(1);
  });
});
