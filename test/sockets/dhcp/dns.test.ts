import fs from 'node:fs';
import { expect } from 'chai';
import type { Knex } from 'knex';
import request from 'supertest';
import { DhcpProvider } from '../../../src/sockets/dhcp/provider.js';
import { DnsProvider } from '../../../src/sockets/dns/provider.js';
import { SocketError } from '../../../src/sockets/errors.js';
import { startKea, type TestKea } from '../../support/kea.js';
import { migratedDb, PG_URL, startService, SYSTEM_KEY, type TestService } from '../../support/service.js';
import { startUnbound, type TestUnbound } from '../../support/unbound.js';
import { eventually, expectSocketError, quietLogger } from '../helpers.js';
import { WsClient } from '../../gateway/helpers.js';
import { lookupError, resolverOf } from '../dns/helpers.js';

/**
 * Reservations with `dns: true` against a real Kea and a real Unbound: the name and its PTR
 * resolve over DNS while the reservation exists, and nothing is left half done when either
 * side fails.
 */
describe('dhcp reservations with dns (real Kea, real Unbound)', function () {
  this.timeout(30_000);
  let kea: TestKea;
  let unbound: TestUnbound;
  let database: { db: Knex; drop(): Promise<void> };
  let dns: DnsProvider;
  let dhcp: DhcpProvider;

  const op = async (name: string, args: Record<string, unknown> = {}): Promise<any> => {
    const operation = dhcp.operations()[name]!;
    const checked = operation.schema.validate(args, { convert: false, abortEarly: false });
    if (checked.error) throw new SocketError('invalid_args', checked.error.message);
    return operation.run(checked.value);
  };
  const resolver = () => resolverOf(unbound.port);
  const keaReservations = async (subnet = 0) => (await kea.command('config-get')).arguments.Dhcp4.subnet4[subnet].reservations as any[];
  const rows = () => database.db('dns_records').select('name', 'type', 'data', 'owner').orderBy(['name', 'type']);

  before(async () => {
    [kea, unbound, database] = await Promise.all([startKea(), startUnbound({ zones: ['home.arpa.', '2.0.192.in-addr.arpa.'] }), migratedDb()]);
    dns = new DnsProvider({ socketPath: unbound.controlSocket, zones: ['home.arpa.'], db: database.db, timeoutMs: 1000, checkIntervalMs: 0 }, quietLogger());
    dhcp = new DhcpProvider(
      { socketPath: kea.socketPath, timeoutMs: 2000, dnsZones: ['home.arpa.'], db: database.db, postgres: Boolean(PG_URL), dnsProvider: () => dns },
      quietLogger(),
    );
  });
  after(async () => {
    await dns?.close();
    await Promise.all([kea?.stop(), unbound?.destroy()]);
    await database?.drop();
  });

  it('dns: true makes the name and its PTR resolve; removing the reservation (after Kea restarted) removes both', async () => {
    const added = await op('reservation_add', { subnet_id: 1, hw_address: '02:dd:00:00:00:01', ip_address: '192.0.2.10', hostname: 'printer', dns: true });
    const printer = { subnet_id: 1, hw_address: '02:dd:00:00:00:01', ip_address: '192.0.2.10', hostname: 'printer.home.arpa', dns: true };
    expect(added).to.deep.equal({ reservation: printer });
    expect(await resolver().resolve4('printer.home.arpa')).to.deep.equal(['192.0.2.10']);
    expect(await resolver().reverse('192.0.2.10')).to.deep.equal(['printer.home.arpa']);
    // the dns provider keeps them, as the reservation's
    expect(await rows()).to.deep.equal([
      { name: '10.2.0.192.in-addr.arpa.', type: 'PTR', data: 'printer.home.arpa.', owner: 'dhcp:1:02:dd:00:00:00:01' },
      { name: 'printer.home.arpa.', type: 'A', data: '192.0.2.10', owner: 'dhcp:1:02:dd:00:00:00:01' },
    ]);
    // Kea's configuration (and its file) says the reservation has records
    const inKea = (await keaReservations()).find((r) => r['hw-address'] === '02:dd:00:00:00:01');
    expect(inKea['user-context']).to.deep.equal({ 'service-core': { dns: true } });
    expect((await kea.configOnDisk()).Dhcp4.subnet4[0].reservations[0]['user-context']).to.deep.equal({ 'service-core': { dns: true } });
    expect((await op('reservations', { subnet_id: 1 })).reservations).to.deep.equal([printer]);

    await kea.halt();
    await kea.start();
    const removed = await op('reservation_remove', { subnet_id: 1, hw_address: '02:dd:00:00:00:01' });
    expect(removed).to.deep.equal({ removed: true, reservation: printer, records_removed: 2 });
    expect(await lookupError(resolver().resolve4('printer.home.arpa'))).to.equal('ENOTFOUND');
    expect(await lookupError(resolver().reverse('192.0.2.10'))).to.be.oneOf(['ENOTFOUND', 'ENODATA']);
    expect(await rows()).to.deep.equal([]);
    expect(await keaReservations()).to.deep.equal([]);
  });

  it('the dns side refuses (the name holds a CNAME): no reservation, no record', async () => {
    await dns.addRecords([{ name: 'alias.home.arpa.', type: 'CNAME', data: 'printer.home.arpa.' }]);
    try {
      const err = await expectSocketError(
        op('reservation_add', { subnet_id: 1, hw_address: '02:dd:00:00:00:02', ip_address: '192.0.2.11', hostname: 'alias', dns: true }),
        'conflict',
      );
      expect(err.message).to.match(/^dns: /);
      expect((err.details as any)[0].field).to.equal('hostname');
      expect(await keaReservations()).to.deep.equal([]);
      expect(await lookupError(resolver().reverse('192.0.2.11'))).to.be.oneOf(['ENOTFOUND', 'ENODATA']);
      expect((await rows()).map((r) => r.name)).to.deep.equal(['alias.home.arpa.']);
      // a name outside the zones is refused before either side is asked
      await expectSocketError(
        op('reservation_add', { subnet_id: 1, hw_address: '02:dd:00:00:00:02', ip_address: '192.0.2.11', hostname: 'host.example.com', dns: true }),
        'forbidden_zone',
      );
      expect(await keaReservations()).to.deep.equal([]);
    } finally {
      await dns.removeRecords([{ name: 'alias.home.arpa.', type: 'CNAME', data: 'printer.home.arpa.' }]);
    }
  });

  it("dns: true for a name or an address that already resolves (another subnet's reservation, an operator's PTR) is a conflict", async () => {
    await op('reservation_add', { subnet_id: 1, hw_address: '02:dd:00:00:00:20', ip_address: '192.0.2.20', hostname: 'pc', dns: true });
    try {
      // the same host name in another subnet: pc.home.arpa would get a second address
      const name = await expectSocketError(
        op('reservation_add', { subnet_id: 2, hw_address: '02:dd:00:00:00:21', ip_address: '198.51.100.20', hostname: 'pc', dns: true }),
        'conflict',
      );
      expect((name.details as any)[0].field).to.equal('hostname');
      expect(await resolver().resolve4('pc.home.arpa')).to.deep.equal(['192.0.2.20']);
      // an address whose reverse name holds the operator's PTR: a second PTR is not added
      expect(await unbound.control('local_data 21.2.0.192.in-addr.arpa. 300 IN PTR router.home.arpa.')).to.equal('ok\n');
      const address = await expectSocketError(
        op('reservation_add', { subnet_id: 1, hw_address: '02:dd:00:00:00:22', ip_address: '192.0.2.21', hostname: 'laptop', dns: true }),
        'conflict',
      );
      expect((address.details as any)[0].field).to.equal('ip_address');
      expect(await resolver().reverse('192.0.2.21')).to.deep.equal(['router.home.arpa']);
      expect((await keaReservations()).map((r) => r['hw-address'])).to.deep.equal(['02:dd:00:00:00:20']);
      expect((await rows()).map((r) => r.name)).to.deep.equal(['20.2.0.192.in-addr.arpa.', 'pc.home.arpa.']);
    } finally {
      await unbound.control('local_data_remove 21.2.0.192.in-addr.arpa.');
      await op('reservation_remove', { subnet_id: 1, hw_address: '02:dd:00:00:00:20' });
    }
  });

  it("Kea's side fails after the records were added: the records are removed again", async () => {
    const file = await fs.promises.readFile(kea.configPath);
    await fs.promises.rm(kea.configPath);
    await fs.promises.mkdir(kea.configPath);
    try {
      await expectSocketError(
        op('reservation_add', { subnet_id: 1, hw_address: '02:dd:00:00:00:03', ip_address: '192.0.2.12', hostname: 'scanner', dns: true }),
        'failed',
      );
    } finally {
      await fs.promises.rmdir(kea.configPath);
      await fs.promises.writeFile(kea.configPath, file);
    }
    expect(await keaReservations()).to.deep.equal([]);
    expect(await lookupError(resolver().resolve4('scanner.home.arpa'))).to.equal('ENOTFOUND');
    expect(await rows()).to.deep.equal([]);
  });

  it('Unbound away: a reservation with dns is refused and Kea untouched; its removal is refused and the reservation stays', async () => {
    await op('reservation_add', { subnet_id: 1, hw_address: '02:dd:00:00:00:04', ip_address: '192.0.2.13', hostname: 'tv', dns: true });
    await unbound.stop();
    try {
      await expectSocketError(
        op('reservation_add', { subnet_id: 1, hw_address: '02:dd:00:00:00:05', ip_address: '192.0.2.14', hostname: 'radio', dns: true }),
        'unavailable',
      );
      await expectSocketError(op('reservation_remove', { subnet_id: 1, hw_address: '02:dd:00:00:00:04' }), 'unavailable');
      // put back, in the running server and in its file
      expect((await keaReservations()).map((r) => r['hw-address'])).to.deep.equal(['02:dd:00:00:00:04']);
      expect((await kea.configOnDisk()).Dhcp4.subnet4[0].reservations.map((r: any) => r['hw-address'])).to.deep.equal(['02:dd:00:00:00:04']);
    } finally {
      await unbound.start();
    }
    // Unbound restarted empty: the dns provider's next check (it keeps an answer for a second) puts its records back
    await eventually(() => dns.isAvailable());
    expect(await resolver().resolve4('tv.home.arpa')).to.deep.equal(['192.0.2.13']);
    const removed = await op('reservation_remove', { subnet_id: 1, hw_address: '02:dd:00:00:00:04' });
    expect(removed.records_removed).to.equal(2);
    expect(await lookupError(resolver().resolve4('tv.home.arpa'))).to.equal('ENOTFOUND');
    expect(await keaReservations()).to.deep.equal([]);
  });
});

describe('dhcp with dns through the service (real Kea, real Unbound)', function () {
  this.timeout(60_000);
  let kea: TestKea;
  let unbound: TestUnbound;
  let svc: TestService;

  before(async () => {
    [kea, unbound] = await Promise.all([startKea(), startUnbound({ zones: ['home.arpa.', '2.0.192.in-addr.arpa.'] })]);
    svc = await startService({
      env: {
        SERVICE_DHCP_CONTROL_SOCKET: kea.socketPath,
        SERVICE_DNS_CONTROL_SOCKET: unbound.controlSocket,
        SERVICE_DNS_ZONES: 'home.arpa.',
        SERVICE_SYSTEM_API_KEY: SYSTEM_KEY,
      },
    });
  });
  after(async () => {
    await svc?.destroy();
    await Promise.all([kea?.stop(), unbound?.destroy()]);
  });

  it('a reservation with dns: true over HTTP resolves; over ws its removal removes the records', async () => {
    const sys = { 'X-API-Key': SYSTEM_KEY };
    const body = { subnet_id: 1, hw_address: '02:dd:00:00:01:01', ip_address: '192.0.2.20', hostname: 'nas.home.arpa', dns: true };
    const added = (await request(svc.url).post('/api/socket/dhcp/reservation-add').set(sys).send(body).expect(200)).body;
    expect(added.reservation).to.include({ hostname: 'nas.home.arpa', dns: true });
    expect(await resolverOf(unbound.port).resolve4('nas.home.arpa')).to.deep.equal(['192.0.2.20']);
    expect(await resolverOf(unbound.port).reverse('192.0.2.20')).to.deep.equal(['nas.home.arpa']);
    const records = (await request(svc.url).get('/api/socket/dns/records').set(sys).expect(200)).body.records;
    expect(records).to.deep.include({ name: 'nas.home.arpa.', type: 'A', ttl: 3600, data: '192.0.2.20' });

    const ws = await WsClient.connect(svc, { headers: sys });
    try {
      ws.send({
        event: 'socket:request',
        payload: { request_id: 'rm', operation: 'dhcp:reservation_remove', args: { subnet_id: 1, hw_address: '02:dd:00:00:01:01' } },
      });
      const removed = (await ws.next('socket:response', (f) => f.payload.request_id === 'rm')).payload;
      expect(removed.ok, JSON.stringify(removed.error)).to.equal(true);
      expect(removed.result.records_removed).to.equal(2);
    } finally {
      await ws.close();
    }
    expect(await lookupError(resolverOf(unbound.port).resolve4('nas.home.arpa'))).to.equal('ENOTFOUND');
  });
});
