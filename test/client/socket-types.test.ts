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
  void client.request('pgsql:health').then((r) => r.result);
  void client.request('someplugin:frob', { anything: 1 });
}

const spawnArgs: SocketArgs<'container:spawn'> = { image: 'busybox:latest', name: 'runner-a' };
const cleanup: SocketResult<'container:cleanup'> | null = null;
const names: SocketOperation[] = ['container:spawn', 'container:resolve_mounts', 'container:storage_root'];

describe('client: typed socket operations', () => {
  it('names every built-in operation as socket:request does', () => {
    expect(names).to.have.length(3);
    expect(spawnArgs.image).to.equal('busybox:latest');
    expect(cleanup).to.equal(null);
  });
});
