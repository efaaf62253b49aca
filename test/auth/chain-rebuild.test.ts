import { expect } from 'chai';
import { startService, type TestService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';
import { patchAuthSettings } from './helpers.js';

/**
 * A change of the auth settings builds the provider chain once on the instance that made it,
 * and once on each other instance: the instance's own poll for changes made elsewhere (every
 * 5 s without Redis) does not take its own change for someone else's.
 */
describe('auth settings: one chain build per change and instance', function () {
  this.timeout(40_000);
  const logsA = capturingLogger('info');
  const logsB = capturingLogger('info');
  let a: TestService;
  let b: TestService;

  before(async () => {
    a = await startService({ logger: logsA.logger });
    b = await startService({ dataDir: a.dataDir, databaseUrl: a.databaseUrl, logger: logsB.logger });
  });

  after(async () => {
    await b?.stop();
    await a?.destroy();
  });

  const lines = (logs: ReturnType<typeof capturingLogger>) => logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  const builds = (logs: ReturnType<typeof capturingLogger>) => lines(logs).filter((l) => l.msg === 'auth provider chain built').length;
  const elsewhere = (logs: ReturnType<typeof capturingLogger>) => lines(logs).filter((l) => String(l.msg).includes('changed elsewhere')).length;

  it('the instance that changed the settings builds once, also after its next look for changes elsewhere; the other instance once', async () => {
    const [aBefore, bBefore] = [builds(logsA), builds(logsB)];
    await patchAuthSettings(a.url, { sso_default_groups: 'INT_USER' }).expect(200);
    expect(builds(logsA)).to.equal(aBefore + 1);
    // the poll runs every 5 s: let it run, and look once more by hand
    await new Promise((r) => setTimeout(r, 5500));
    expect(await a.service.auth.followAuthSettings()).to.equal(false);
    expect(builds(logsA), 'builds on the instance that made the change').to.equal(aBefore + 1);
    expect(elsewhere(logsA)).to.equal(0);
    // the other instance saw a change made elsewhere, once
    await b.service.auth.followAuthSettings();
    expect(builds(logsB), 'builds on the other instance').to.equal(bBefore + 1);
    expect(elsewhere(logsB)).to.equal(1);
    expect(b.service.auth.authSettings.current().ssoDefaultGroups).to.deep.equal(['INT_USER']);
  });
});
