import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import type { Page } from 'playwright-core';
import { expectNoProblems, forgetSession, openBrowser, signIn, startWebService, type TestBrowser, type WebService } from './helpers.js';
import { measureFit } from './support.js';
import { previousStepCode } from '../auth/helpers.js';
import { startKea, type TestKea } from '../support/kea.js';
import { startUnbound, type TestUnbound } from '../support/unbound.js';
import { startSystemdUser, type SystemdUser } from '../support/systemd-user.js';
import { promoteToSuperadmin, SYSTEM_KEY } from '../support/service.js';

/**
 * In the page (as text: the test runner's transform would wrap a named function in a helper the
 * page lacks): the pairs of form fields, row buttons, provider heads and panel heads that overlap,
 * and whatever control, cell or pill reaches past the right edge.
 */
const OVERLAPS = `(() => {
  const found = [];
  const shown = (e) => e.getClientRects().length > 0;
  const label = (e) => (e.textContent || '').trim().slice(0, 30);
  for (const container of document.querySelectorAll('.host-fields, .unit-actions, .host-provider-head, .panel-head')) {
    const items = [...container.children].filter(shown).map((e) => ({ e, r: e.getBoundingClientRect() }));
    for (let i = 0; i < items.length; i++)
      for (let j = i + 1; j < items.length; j++) {
        const a = items[i].r, b = items[j].r;
        if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) found.push(label(items[i].e) + ' / ' + label(items[j].e));
      }
  }
  for (const e of document.querySelectorAll('main input, main select, main button, main td, main .pill, dialog[open] *'))
    if (shown(e) && e.getBoundingClientRect().right > window.innerWidth + 0.5) found.push(e.tagName + ' ' + label(e) + ' ends at ' + e.getBoundingClientRect().right);
  return found;
})()`;

const unitFile = (description: string) => `[Unit]\nDescription=${description}\n\n[Service]\nExecStart=/bin/sleep 1000\n`;

/**
 * The host services page in Chromium, against a real Unbound, a real Kea and a systemd user
 * manager on a private bus: a superadmin adds a DNS record, a reservation with its records,
 * removes it, releases a lease, restarts a unit; the API's refusals appear beside the field they
 * name; a viewer without the host permissions sees the health only; an operator whose session
 * has a second factor confirms it in the step-up dialog first. At 1280 and 390 px.
 */
describe('browser: host services page (real Unbound, Kea, systemd)', function () {
  this.timeout(120_000);
  let svc: WebService;
  let browser: TestBrowser;
  let page: Page;
  let kea: TestKea;
  let unbound: TestUnbound;
  let systemd: SystemdUser;
  // screenshots: in SERVICE_TEST_SHOTS_DIR when set (kept, to be looked at), else in a temp dir removed afterwards
  const keepShots = process.env.SERVICE_TEST_SHOTS_DIR;
  const shots = keepShots ? (fs.mkdirSync(keepShots, { recursive: true }), keepShots) : fs.mkdtempSync(path.join(os.tmpdir(), 'hosts-shots-'));
  const sys = { 'X-API-Key': SYSTEM_KEY };
  const users = {
    sam: { username: 'sam', password: 'sam-password-1' },
    vera: { username: 'vera', password: 'vera-password-1' },
    otto: { username: 'otto', password: 'otto-password-1' },
    uma: { username: 'uma', password: 'uma-password-1' },
  };
  let ottoId: string;

  const createUser = async (u: { username: string; password: string }, groups: string[]): Promise<string> =>
    (
      await request(svc.url)
        .post('/api/users')
        .set(sys)
        .send({ ...u, groups })
        .expect(201)
    ).body.id;

  before(async () => {
    [kea, unbound, systemd, browser] = await Promise.all([
      startKea(),
      startUnbound({ zones: ['home.arpa.', '2.0.192.in-addr.arpa.'] }),
      startSystemdUser({ 'svc-web-a.service': unitFile('Web test unit A'), 'svc-web-b.service': unitFile('Web test unit B') }),
      openBrowser(),
    ]);
    svc = await startWebService({
      SERVICE_SYSTEM_API_KEY: SYSTEM_KEY,
      SERVICE_DNS_CONTROL_SOCKET: unbound.controlSocket,
      SERVICE_DNS_ZONES: 'home.arpa.',
      SERVICE_DHCP_CONTROL_SOCKET: kea.socketPath,
      SERVICE_INIT_BUS: systemd.address,
      SERVICE_INIT_UNITS: 'svc-web-*.service',
      SERVICE_HOST_SERVICE_TIMEOUT_MS: '3000',
    });
    await promoteToSuperadmin(svc, await createUser(users.sam, ['INT_ADMIN']));
    // a plain administrator: opens the page (feature:admin.plugins), holds no host permission
    await createUser(users.vera, ['INT_ADMIN']);
    await request(svc.url)
      .post('/api/groups')
      .set(sys)
      .send({ name: 'dns-ops', permissions: ['socket:dns:read', 'socket:dns:write'] })
      .expect(201);
    ottoId = await createUser(users.otto, ['INT_USER', 'dns-ops']);
    expect((await kea.command('lease4-add', { 'ip-address': '192.0.2.150', 'hw-address': '0a:00:00:00:00:01', hostname: 'laptop.home.arpa' })).result).to.equal(
      0,
    );
    page = await browser.newPage();
  });
  after(async () => {
    await browser?.close();
    await svc?.destroy();
    await Promise.all([kea?.stop(), unbound?.destroy(), systemd?.destroy()]);
    if (!keepShots) fs.rmSync(shots, { recursive: true, force: true });
  });

  const atWidth = (width: number) => page.setViewportSize({ width, height: width < 600 ? 844 : 900 });
  const loaded = async () => {
    await page.waitForFunction(() => Boolean(document.body.dataset.hostsLoaded));
  };
  const open = async () => {
    await page.goto(`${svc.origin}/admin/hosts`);
    await loaded();
  };
  /** Presses Refresh until `done` says so (at most 10 s). */
  const refreshUntil = async (done: () => Promise<boolean>) => {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const before = await page.evaluate(() => document.body.dataset.hostsLoaded);
      await page.click('[data-refresh]');
      await page.waitForFunction((b) => document.body.dataset.hostsLoaded !== b, before);
      if (await done()) return;
      if (Date.now() > deadline) throw new Error('the page did not come to the state awaited within 10 s');
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  /** Otto's web sessions: their last verification out of the step-up window, as 16 minutes passing would. */
  const ageSession = async () => {
    await svc.service
      .db('api_keys')
      .where({ user_id: ottoId, kind: 'session' })
      .update({ mfa_at: Date.now() - 16 * 60_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'user', user_id: ottoId });
  };
  const row = (table: string, text: string) => page.locator(`[${table}] tbody tr`, { hasText: text });
  const fieldMsg = (form: string, field: string) => page.locator(`[${form}] [data-field-msg="${field}"]`);

  /** Fits the width (no sideways scroll), nothing overlaps in the forms and rows; saves a full-page screenshot. */
  const checkLayout = async (name: string, width: number) => {
    const fit = await measureFit(page);
    expect(fit.scrollWidth, `${name} at ${width}: the page is ${fit.scrollWidth} px wide`).to.be.at.most(fit.innerWidth);
    expect(fit.wrappedBadges, `${name} at ${width}: badges broken over lines`).to.deep.equal([]);
    const overlaps = await page.evaluate<string[]>(OVERLAPS);
    expect(overlaps, `${name} at ${width}`).to.deep.equal([]);
    const file = path.join(shots, `${name}-${width}.png`);
    // the sticky top bar stays at the top of a full-page screenshot instead of over its middle
    await page.evaluate(() => document.querySelector<HTMLElement>('.topbar')?.style.setProperty('position', 'static'));
    await page.screenshot({ path: file, fullPage: true });
    await page.evaluate(() => document.querySelector<HTMLElement>('.topbar')?.style.removeProperty('position'));
    expect(fs.statSync(file).size).to.be.greaterThan(5_000);
  };

  it('a superadmin sees every provider healthy, adds a DNS record and sees it; refusals are shown beside their field', async () => {
    await atWidth(1280);
    await signIn(page, svc.origin, users.sam.username, users.sam.password, '/admin/hosts');
    await loaded();
    for (const name of ['dns', 'dhcp', 'init']) expect(await page.locator(`[data-provider="${name}"] .pill`).textContent()).to.equal('available');
    expect(await page.locator('[data-facts="dns"]').textContent()).to.contain('home.arpa.');
    expect(await page.locator('[data-facts="dhcp"]').textContent()).to.contain('192.0.2.0/24');

    const form = page.locator('[data-dns-add]');
    await form.locator('[name=name]').fill('web.home.arpa');
    await form.locator('[name=type]').selectOption('A');
    await form.locator('[name=data]').fill('192.0.2.50');
    await form.locator('button[type=submit]').click();
    await row('data-dns-records', '192.0.2.50').waitFor();
    expect(await row('data-dns-records', '192.0.2.50').locator('td').allTextContents()).to.deep.equal(['web.home.arpa.', 'A', '192.0.2.50', '3600', 'Remove']);
    expect(await form.locator('[data-msg]').textContent()).to.equal('Added web.home.arpa. A 192.0.2.50.');

    // the same record again: a conflict, beside the name
    await form.locator('[name=name]').fill('web.home.arpa');
    await form.locator('[name=data]').fill('192.0.2.50');
    await form.locator('button[type=submit]').click();
    await fieldMsg('data-dns-add', 'name').filter({ hasText: 'Already taken' }).waitFor();
    expect(await form.locator('[name=name]').getAttribute('aria-invalid')).to.equal('true');
    // a name outside the zones
    await form.locator('[name=name]').fill('web.example.com');
    await form.locator('button[type=submit]').click();
    await fieldMsg('data-dns-add', 'name').filter({ hasText: 'Outside the zones' }).waitFor();
    // data that is not an address of the type: the API's validation, beside the data
    await form.locator('[name=name]').fill('other.home.arpa');
    await form.locator('[name=data]').fill('not-an-address');
    await form.locator('button[type=submit]').click();
    await fieldMsg('data-dns-add', 'data').filter({ hasText: /./ }).waitFor();
    expect(await form.locator('[name=data]').getAttribute('aria-invalid')).to.equal('true');
    expect(await fieldMsg('data-dns-add', 'name').textContent()).to.equal('');
    expect(await form.locator('[data-msg]').textContent()).to.contain('Nothing was changed');
    await checkLayout('hosts-dns-errors', 1280);
    // editing the field clears its message
    await form.locator('[name=data]').fill('192.0.2.51');
    expect(await fieldMsg('data-dns-add', 'data').isVisible()).to.equal(false);
    expect(await form.locator('[data-msg]').textContent()).to.equal('');

    // Unbound away: said under the form in words; nothing is added
    await unbound.stop();
    try {
      await form.locator('button[type=submit]').click();
      await form.locator('[data-msg].error', { hasText: 'The service behind this provider is unavailable' }).waitFor();
    } finally {
      await unbound.start();
    }
    // Unbound back: the provider says so again within its availability check (a second), and
    // has put back the record it lost; Refresh shows both
    await refreshUntil(async () => (await page.locator('[data-provider=dns] .pill').textContent()) === 'available');
    await row('data-dns-records', '192.0.2.50').waitFor();
    expect(await unbound.control('list_local_data')).to.contain('web.home.arpa');
    // a record's Remove asks first, then removes it from Unbound
    await form.locator('[name=name]').fill('old.home.arpa');
    await form.locator('[name=type]').selectOption('TXT');
    // the data field shows what data of the type looks like
    expect(await form.locator('[name=data]').getAttribute('placeholder')).to.equal('any text');
    await form.locator('[name=data]').fill('to be removed');
    await form.locator('[name=ttl]').fill('60');
    await form.locator('button[type=submit]').click();
    await row('data-dns-records', 'old.home.arpa.').waitFor();
    expect(await row('data-dns-records', 'old.home.arpa.').locator('td').allTextContents()).to.deep.equal([
      'old.home.arpa.',
      'TXT',
      'to be removed',
      '60',
      'Remove',
    ]);
    const remove = row('data-dns-records', 'old.home.arpa.').locator('[data-remove-record]');
    await remove.click();
    await remove.click();
    await row('data-dns-records', 'old.home.arpa.').waitFor({ state: 'detached' });
    expect(await page.locator('[data-part=dns] [data-list-msg]').textContent()).to.equal('Removed old.home.arpa. TXT to be removed.');
    expect(await unbound.control('list_local_data')).to.not.contain('old.home.arpa');
    expect(await unbound.control('list_local_data')).to.contain('web.home.arpa');
    expectNoProblems(browser);
  });

  it('a superadmin adds a reservation with its DNS records, sees both, removes it; releases a lease', async () => {
    const form = page.locator('[data-reservation-add]');
    await form.locator('[name=subnet_id]').selectOption('1');
    await form.locator('[name=hw_address]').fill('02:AA:00:00:00:09');
    await form.locator('[name=ip_address]').fill('192.0.2.60');
    await form.locator('[name=hostname]').fill('printer');
    await form.locator('[name=dns]').check();
    await form.locator('button[type=submit]').click();
    await row('data-reservations', '02:aa:00:00:00:09').waitFor();
    expect(await row('data-reservations', '02:aa:00:00:00:09').locator('td').allTextContents()).to.deep.equal([
      '1',
      '02:aa:00:00:00:09',
      '192.0.2.60',
      'printer.home.arpa',
      'A and PTR',
      'Remove',
    ]);
    await row('data-dns-records', 'printer.home.arpa.').first().waitFor();
    expect(await row('data-dns-records', '60.2.0.192.in-addr.arpa.').locator('td').nth(2).textContent()).to.equal('printer.home.arpa.');
    // the same address for another machine: beside the address
    await form.locator('[name=hw_address]').fill('02:aa:00:00:00:0a');
    await form.locator('[name=ip_address]').fill('192.0.2.60');
    await form.locator('button[type=submit]').click();
    await fieldMsg('data-reservation-add', 'ip_address').filter({ hasText: 'Already taken' }).waitFor();
    expect(await fieldMsg('data-reservation-add', 'ip_address').textContent()).to.equal('Already taken: 192.0.2.60 is already reserved in subnet 1');
    // an Ethernet address that is none: the API's rule, beside it
    await form.locator('[name=hw_address]').fill('02:aa:00:00:00');
    await form.locator('button[type=submit]').click();
    await fieldMsg('data-reservation-add', 'hw_address').filter({ hasText: 'must be an Ethernet address like aa:bb:cc:dd:ee:ff' }).waitFor();
    expect(await form.locator('[name=hw_address]').getAttribute('aria-invalid')).to.equal('true');
    expect(await fieldMsg('data-reservation-add', 'ip_address').textContent()).to.equal('');
    await form.locator('[name=hw_address]').fill('02:aa:00:00:00:0a');
    await form.locator('button[type=submit]').click();
    await fieldMsg('data-reservation-add', 'ip_address').filter({ hasText: 'Already taken' }).waitFor();
    await checkLayout('hosts-dhcp', 1280);

    // remove: the button asks first, the second click removes the reservation and its records
    const remove = row('data-reservations', '02:aa:00:00:00:09').locator('[data-remove-reservation]');
    await remove.click();
    expect(await remove.textContent()).to.equal('Remove?');
    await remove.click();
    await row('data-reservations', '02:aa:00:00:00:09').waitFor({ state: 'detached' });
    await row('data-dns-records', 'printer.home.arpa.').first().waitFor({ state: 'detached' });
    expect(await page.locator('[data-reservations-msg]').textContent()).to.contain('and its 2 DNS records');
    expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations ?? []).to.deep.equal([]);

    const release = row('data-leases', '192.0.2.150').locator('[data-release-lease]');
    await release.click();
    await release.click();
    await row('data-leases', '192.0.2.150').waitFor({ state: 'detached' });
    expect((await kea.command('lease4-get', { 'ip-address': '192.0.2.150' })).result).to.equal(3);
    expectNoProblems(browser);
  });

  it('a superadmin starts and restarts units; the state follows', async () => {
    const b = row('data-units', 'svc-web-b.service');
    expect(await b.locator('.pill').textContent()).to.equal('inactive');
    await b.locator('[data-unit-action=start]').click();
    await page.locator('[data-part=init] [data-list-msg]').filter({ hasText: 'svc-web-b.service started: now active' }).waitFor();
    await row('data-units', 'svc-web-b.service')
      .locator('.pill', { hasText: /^active$/ })
      .waitFor();
    await b.locator('[data-unit-action=restart]').click();
    await page.locator('[data-part=init] [data-list-msg]').filter({ hasText: 'svc-web-b.service restarted: now active' }).waitFor();
    await b.locator('[data-unit-action=stop]').click();
    await page.locator('[data-part=init] [data-list-msg]').filter({ hasText: 'svc-web-b.service stopped: now inactive' }).waitFor();
    await row('data-units', 'svc-web-b.service')
      .locator('.pill', { hasText: /^inactive$/ })
      .waitFor();
    await b.locator('[data-unit-action=restart]').click();
    await page.locator('[data-part=init] [data-list-msg]').filter({ hasText: 'svc-web-b.service restarted: now active' }).waitFor();
    // a unit that cannot reload: the conflict in words
    await b.locator('[data-unit-action=reload]').click();
    await page.locator('[data-part=init] [data-list-msg].error', { hasText: 'The unit cannot do this' }).waitFor();
    for (const width of [1280, 390]) {
      await atWidth(width);
      await checkLayout('hosts-superadmin', width);
    }
    await atWidth(1280);
    expectNoProblems(browser);
  });

  it('a viewer without the host permissions sees the health only, and an unavailable provider says why', async () => {
    await forgetSession(browser);
    // signed out: the login page, coming back here; without any permission that opens it: 403 naming them
    const anonymous = await request(svc.url).get('/admin/hosts').expect(302);
    expect(anonymous.headers.location).to.equal(`/login?${new URLSearchParams({ next: '/admin/hosts' })}`);
    await createUser(users.uma, ['INT_USER']);
    await signIn(page, svc.origin, users.uma.username, users.uma.password, '/admin/hosts');
    expect(await page.locator('h1').textContent()).to.equal('Access denied');
    expect(await page.locator('main li code').allTextContents()).to.include.members([
      'socket:dns:read',
      'socket:dhcp:read',
      'socket:init:read',
      'feature:admin.plugins',
    ]);
    await forgetSession(browser);
    await signIn(page, svc.origin, users.vera.username, users.vera.password, '/admin/hosts');
    await loaded();
    expect(await page.locator('[data-provider]').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.provider))).to.include.members([
      'dns',
      'dhcp',
      'init',
    ]);
    expect(await page.locator('main form:visible').count()).to.equal(0);
    expect(await page.locator('main table:visible').count()).to.equal(0);
    expect(await page.locator('main button:visible').allTextContents()).to.deep.equal(['Refresh']);
    expect(await page.locator('[data-part]:visible').count()).to.equal(0);
    expect(await page.locator('[data-access-note]').textContent()).to.contain('socket:dns:read');
    await unbound.stop();
    try {
      await refreshUntil(async () => (await page.locator('[data-provider=dns] .pill').textContent()) === 'unavailable');
      expect(await page.locator('[data-provider=dns] [data-reason]').textContent()).to.match(/\S/);
      for (const width of [1280, 390]) {
        await atWidth(width);
        await checkLayout('hosts-viewer', width);
      }
    } finally {
      await unbound.start();
    }
    await atWidth(1280);
    expectNoProblems(browser);
  });

  it('an operator whose session has a second factor confirms it in the step-up dialog, then the record is added', async () => {
    await forgetSession(browser);
    await signIn(page, svc.origin, users.otto.username, users.otto.password, '/admin/hosts');
    await loaded();
    // an authenticator app enrolled from this very session
    const post = (url: string, body: unknown) =>
      page.evaluate(
        async ([u, b]) => {
          const res = await fetch(u as string, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
          return { status: res.status, body: await res.json().catch(() => null) };
        },
        [url, body] as const,
      );
    const enrol = await post('/api/me/mfa/totp', {});
    expect(enrol.status).to.equal(200);
    const confirmed = await post('/api/me/mfa/totp/confirm', { code: await previousStepCode(enrol.body.secret) });
    expect(confirmed.status).to.equal(200);
    const recovery: string[] = confirmed.body.recovery_codes;
    await ageSession();
    await open();
    // dns only: no dhcp or init part
    expect(await page.locator('[data-part]:visible').evaluateAll((els) => els.map((e) => (e as HTMLElement).dataset.part))).to.deep.equal(['dns']);

    const form = page.locator('[data-dns-add]');
    await form.locator('[name=name]').fill('nas.home.arpa');
    await form.locator('[name=data]').fill('192.0.2.70');
    await form.locator('button[type=submit]').click();
    const dialog = page.locator('dialog[data-step-up]');
    await dialog.waitFor();
    for (const width of [1280, 390]) {
      await atWidth(width);
      await checkLayout('hosts-step-up', width);
    }
    await dialog.locator('[name=code]').fill(recovery[0]!);
    await dialog.locator('button[type=submit]').click();
    await row('data-dns-records', '192.0.2.70').waitFor();
    expect(await form.locator('[data-msg]').textContent()).to.equal('Added nas.home.arpa. A 192.0.2.70.');
    // cancelled: nothing is added, and the form says why
    await ageSession();
    await form.locator('[name=name]').fill('nas2.home.arpa');
    await form.locator('[name=data]').fill('192.0.2.71');
    await form.locator('button[type=submit]').click();
    await dialog.waitFor();
    await page.click('[data-step-up-cancel]');
    await form.locator('[data-msg]', { hasText: 'second factor was not confirmed' }).waitFor();
    expect(await row('data-dns-records', '192.0.2.71').count()).to.equal(0);
    // a row's button asks too: the record goes once the factor is confirmed
    await ageSession();
    const remove = row('data-dns-records', '192.0.2.70').locator('[data-remove-record]');
    await remove.click();
    await remove.click();
    await dialog.waitFor();
    await dialog.locator('[name=code]').fill(recovery[1]!);
    await dialog.locator('button[type=submit]').click();
    await row('data-dns-records', '192.0.2.70').waitFor({ state: 'detached' });
    expect(await unbound.control('list_local_data')).to.not.contain('nas.home.arpa');
    await atWidth(1280);
    expectNoProblems(browser);
  });
});
