import { expect } from 'chai';
import type { GatewayClient } from '../../src/client/gateway-client.js';
import type { SocketArgs, SocketOperation, SocketResult } from '../../src/client/api-types.js';

/**
 * The client's socket operations are typed from the API document (checked by `tsc`, which
 * `npm run typecheck` runs over the tests): a built-in operation takes its args and answers its
 * result; a name the document does not list stays open for plugins' providers.
 */
export function typedRequests(client: GatewayClient): void {
  void client.request('container:spawn', { image: 'busybox:latest', name: 'runner-a' }).then((r) => r.result?.name.toUpperCase());
  // @ts-expect-error spawn needs its image
  void client.request('container:spawn', { name: 'runner-a' });
  // @ts-expect-error cleanup's max_age_minutes is a number
  void client.request('container:cleanup', { max_age_minutes: 'old' });
  void client.request('container:runners').then((r) => r.result?.runners.map((x) => x.name));
  // an operation without args takes {} (docs/client.md's example), and nothing else
  void client.request('container:health', {}, { timeoutMs: 5000 }).then((r) => r.result?.healthy);
  // @ts-expect-error health takes no args
  void client.request('container:health', { verbose: true });
  // the host services and the plugins under plugins/ are in the document too
  void client.request('dns:record_add', { name: 'printer.home.arpa.', type: 'A', data: '192.0.2.10' }).then((r) => r.result?.record.name);
  // @ts-expect-error a DNS record's type is one of A, AAAA, CNAME, TXT, PTR
  void client.request('dns:record_add', { name: 'printer.home.arpa.', type: 'MX', data: 'x' });
  void client.request('dhcp:reservation_add', { subnet_id: 1, hw_address: '3c:52:82:aa:bb:cc', ip_address: '192.0.2.50', dns: true });
  // @ts-expect-error a unit action is start, stop, restart or reload
  void client.request('init:unit_action', { unit: 'nginx.service', action: 'kill' });
  void client.request('containerd:call', { method: 'containerd.services.version.v1.Version/Version' }).then((r) => r.result?.response);
  void client.request('pgsql:health').then((r) => r.result?.healthy);
  void client.request('someplugin:frob', { anything: 1 });
}

const spawnArgs: SocketArgs<'container:spawn'> = { image: 'busybox:latest', name: 'runner-a' };
const cleanup: SocketResult<'container:cleanup'> | null = null;
const names: SocketOperation[] = ['container:spawn', 'dns:records', 'dhcp:leases', 'init:units', 'containerd:call', 'pgsql:server_info'];

describe('client: typed socket operations', () => {
  it('names every built-in operation as socket:request does', () => {
    expect(names).to.have.length(6);
    expect(spawnArgs.image).to.equal('busybox:latest');
    expect(cleanup).to.equal(null);
  });
});
