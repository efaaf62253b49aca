import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import type { Page } from 'playwright-core';
import { ADMIN, adminAuth } from '../support/service.js';
import { createUser, userNamed } from '../auth/helpers.js';
import { ARTIFACTS, expectNoProblems, openBrowser, signIn, signOut, startWebService, waitLive, type TestBrowser, type WebService } from './helpers.js';
import { measureFit } from './support.js';

const SHOTS = path.join(ARTIFACTS, 'screenshots');

interface Row {
  seq: number;
  action: string;
  outcome: string;
  actor: string;
  ip: string;
  target: string;
}

/** In Chromium: the audit page lists the trail, follows it live, filters it, shows an event whole, and is for its holders only. */
describe('browser: the audit page', function () {
  this.timeout(120_000);
  let svc: WebService;
  let browser: TestBrowser;
  let page: Page;
  const viewer = { username: 'vera', password: 'vera-password-1' };

  const rows = (p: Page = page): Promise<Row[]> =>
    p.$$eval('[data-events] tbody tr[data-seq]', (trs) =>
      trs.map((tr) => ({
        seq: Number((tr as HTMLElement).dataset.seq),
        action: (tr as HTMLElement).dataset.action ?? '',
        outcome: (tr as HTMLElement).dataset.outcome ?? '',
        actor: tr.querySelector('.actor-name')?.textContent ?? '',
        ip: tr.querySelector('.ip')?.textContent ?? '',
        target: tr.querySelector('.target-name')?.textContent ?? '',
      })),
    );
  const createGroup = async (name: string) => {
    const res = await request(svc.url)
      .post('/api/groups')
      .set('Authorization', adminAuth())
      .send({ name, permissions: ['api:read'] });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
  };
  /** Waits for the first row of the table to be this action on this target. */
  const waitTop = (action: string, target: string, timeout = 5_000) =>
    page.waitForFunction(
      ([a, t]) => {
        const tr = document.querySelector<HTMLElement>('[data-events] tbody tr[data-seq]');
        return tr?.dataset.action === a && tr.querySelector('.target-name')?.textContent === t;
      },
      [action, target] as const,
      { timeout },
    );
  const waitLoaded = () => page.waitForSelector('[data-events] tbody tr[data-seq], [data-empty]:not([hidden])', { timeout: 10_000 });

  before(async function () {
    [svc, browser] = await Promise.all([startWebService(), openBrowser()]);
    await createUser(svc.url, { ...viewer, groups: ['INT_VIEWER'] });
    await createGroup('ops-before');
    // a refused sign-in: actor vera, outcome failure
    await request(svc.url).post('/api/auth/login').send({ username: viewer.username, password: 'not-her-password' });
    page = await browser.newPage();
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password, '/admin/audit');
    await waitLive(page);
    await svc.service.iam.audit.flush();
    fs.mkdirSync(SHOTS, { recursive: true });
  });
  after(async function () {
    await browser?.close();
    await svc?.destroy();
  });

  it('shows the recent events newest first: time, actor with its address, action, target, outcome', async function () {
    await page.waitForSelector('[data-events] tr[data-action="auth.login"]');
    const list = await rows();
    expect(list.map((r) => r.seq)).to.deep.equal([...list.map((r) => r.seq)].sort((a, b) => b - a));
    const created = list.find((r) => r.action === 'user.created' && r.target === viewer.username);
    expect(created, JSON.stringify(list)).to.include({ actor: ADMIN.username, outcome: 'success' });
    expect(list.find((r) => r.action === 'group.created')).to.include({ target: 'ops-before', actor: ADMIN.username });
    expect(list.find((r) => r.action === 'auth.login_failed')).to.include({ actor: viewer.username, outcome: 'failure' });
    // the administrator's own sign-in through the form, from the browser's address
    const login = list.find((r) => r.action === 'auth.login' && r.actor === ADMIN.username);
    expect(login?.ip).to.match(/127\.0\.0\.1/);
    const time = page.locator('[data-events] tbody tr[data-seq] time').first();
    expect(await time.textContent()).to.match(/^\d{1,2} [A-Z][a-z]{2,3} \d{4}, \d{2}:\d{2}$/);
    expect(await page.getAttribute('[data-live-state]', 'data-state')).to.equal('live');
    expect(await page.getAttribute('.admin-nav a[href="/admin/audit"]', 'aria-current')).to.equal('page');
  });

  it('an action done through the API appears at the top within a second, without a reload', async function () {
    await page.evaluate(() => (document.body.dataset.sameDocument = 'yes'));
    const started = Date.now();
    await createGroup('ops-live');
    await waitTop('group.created', 'ops-live', 1000);
    const elapsed = Date.now() - started;
    expect(elapsed, `shown after ${elapsed} ms`).to.be.lessThan(1000);
    expect(await page.evaluate(() => document.body.dataset.sameDocument)).to.equal('yes');
    expect((await rows())[0]).to.include({ actor: ADMIN.username, outcome: 'success' });
  });

  it('filters narrow the table (and the live tail), follow the address, and clear', async function () {
    const all = (await rows()).length;
    await page.selectOption('[data-filters] select[name=action]', 'group.');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('action') === 'group.');
    await page.waitForFunction(() =>
      [...document.querySelectorAll<HTMLElement>('[data-events] tbody tr[data-seq]')].every((tr) => tr.dataset.action?.startsWith('group.')),
    );
    const groups = await rows();
    // (a service that seeded its default groups at its first boot shows those too, by the service)
    expect(groups.filter((r) => r.actor !== 'service').map((r) => r.target)).to.deep.equal(['ops-live', 'ops-before']);
    expect(groups.filter((r) => r.actor === 'service').map((r) => r.target)).to.satisfy((seeded: string[]) =>
      seeded.every((g) => ['INT_ADMIN', 'INT_USER', 'INT_VIEWER'].includes(g)),
    );
    expect(all).to.be.greaterThan(groups.length);
    // live: a user created now does not pass the filter, a group does
    await createUser(svc.url, { username: 'walt', password: 'walt-password-1', groups: ['INT_VIEWER'] });
    await createGroup('ops-filtered');
    await waitTop('group.created', 'ops-filtered', 1000);
    expect((await rows()).filter((r) => r.actor !== 'service').map((r) => r.action)).to.deep.equal(['group.created', 'group.created', 'group.created']);

    // the address keeps the filters across a reload
    await page.reload();
    await waitLoaded();
    expect(await page.inputValue('[data-filters] select[name=action]')).to.equal('group.');
    expect((await rows()).filter((r) => r.actor !== 'service').map((r) => r.target)).to.deep.equal(['ops-filtered', 'ops-live', 'ops-before']);

    // actor (typed, applied with Enter) and outcome
    await page.click('[data-clear-filters]');
    await page.fill('[data-filters] input[name=actor]', viewer.username);
    await page.press('[data-filters] input[name=actor]', 'Enter');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('actor') === 'vera');
    await page.waitForFunction(() => [...document.querySelectorAll('[data-events] tbody tr[data-seq] .actor-name')].every((el) => el.textContent === 'vera'));
    expect((await rows()).map((r) => r.action)).to.deep.equal(['auth.login_failed']);
    await page.selectOption('[data-filters] select[name=outcome]', 'success');
    await page.waitForSelector('[data-empty]:not([hidden])');
    expect(await rows()).to.deep.equal([]);

    // target, and a since in the future
    await page.click('[data-clear-filters]');
    await page.fill('[data-filters] input[name=target]', 'walt');
    await page.click('[data-filters] button[type=submit]');
    await page.waitForFunction(() => [...document.querySelectorAll('[data-events] tbody tr[data-seq] .target-name')].every((el) => el.textContent === 'walt'));
    expect((await rows()).map((r) => r.action)).to.deep.equal(['user.created']);
    await page.fill('[data-filters] input[name=since]', '2099-01-01T00:00:00');
    await page.waitForSelector('[data-empty]:not([hidden])');

    await page.click('[data-clear-filters]');
    await page.waitForFunction((n) => document.querySelectorAll('[data-events] tbody tr[data-seq]').length > n, all);
    expect(new URL(page.url()).search).to.equal('');
    expectNoProblems(browser);
  });

  it('shows an event whole on demand: its details as text, the hash and the seq', async function () {
    await createGroup('ops-details');
    const api = await request(svc.url)
      .get('/api/audit')
      .query({ action: 'group.created', target: 'ops-details' })
      .set('Authorization', adminAuth())
      .expect(200);
    const event = api.body.events[0] as { seq: number; hash: string; details: Record<string, unknown> };
    // details someone else controls, with markup in them
    const evil = '<img src=x onerror="document.body.dataset.pwned=1"></pre><b>bold</b>';
    svc.service.iam.audit.record({
      action: 'request.denied',
      actor: { user_id: null, username: 'probe', method: 'api_key', ip: '203.0.113.7' },
      target: { type: 'route', name: '/api/users' },
      outcome: 'denied',
      details: { reason: evil, path: '/api/users' },
    });
    await svc.service.iam.audit.flush();
    const row = page.locator('[data-events] tr[data-action="request.denied"]').first();
    await row.waitFor();
    const toggle = row.locator('[data-details-toggle]');
    expect(await toggle.getAttribute('aria-expanded')).to.equal('false');
    await toggle.click();
    expect(await toggle.getAttribute('aria-expanded')).to.equal('true');
    const seq = await row.getAttribute('data-seq');
    const details = page.locator(`[data-events] tr[data-details-of="${seq}"]`);
    expect(await details.isVisible()).to.equal(true);
    const json = await details.locator('[data-details-json]').textContent();
    expect(JSON.parse(json!)).to.deep.equal({ reason: evil, path: '/api/users' });
    expect(json).to.include('\n  "reason"'); // pretty-printed
    // text, never markup
    expect(await details.locator('img, b').count()).to.equal(0);
    expect(await page.evaluate(() => document.body.dataset.pwned)).to.equal(undefined);
    expect(await details.textContent())
      .to.include('203.0.113.7')
      .and.include('api_key');
    await toggle.click();
    expect(await details.isVisible()).to.equal(false);

    // the group's event: hash and seq as the API has them
    const groupRow = page.locator(`[data-events] tr[data-seq="${event.seq}"]`);
    await groupRow.locator('[data-details-toggle]').click();
    const groupDetails = page.locator(`[data-events] tr[data-details-of="${event.seq}"]`);
    expect(await groupDetails.locator('.hash').textContent()).to.equal(event.hash);
    expect(await groupDetails.locator('dd').first().textContent()).to.equal(String(event.seq));
    expect(JSON.parse((await groupDetails.locator('[data-details-json]').textContent())!)).to.deep.equal(event.details);
    expectNoProblems(browser);
  });

  it('at 1280 and 390 px: fits the screen, the table becomes cards on a phone; screenshots saved', async function () {
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: width < 600 ? 844 : 900 });
      await page.goto(`${svc.origin}/admin/audit`);
      await page.waitForSelector('[data-events] tr[data-action="request.denied"]');
      await page.waitForSelector('[data-live-state][data-state=live]', { timeout: 10_000 });
      await page.locator('[data-events] tr[data-action="request.denied"] [data-details-toggle]').first().click();
      const fit = await measureFit(page);
      expect(fit.scrollWidth, `page ${fit.scrollWidth} px wide at ${width}`).to.be.at.most(fit.innerWidth);
      expect(fit.wrappedBadges, `badges broken over lines at ${width}`).to.deep.equal([]);
      expect(fit.navRows, 'navigation rows').to.equal(1);
      // an actor's address is one line in the table (a range over its text has one box per line)
      const wrappedAddresses = await page.locator('[data-events] .ip').evaluateAll((els) =>
        els
          .filter((el) => {
            const range = document.createRange();
            range.selectNodeContents(el);
            return range.getClientRects().length > 1;
          })
          .map((el) => el.textContent),
      );
      if (width === 1280) expect(wrappedAddresses, 'addresses broken over lines').to.deep.equal([]);
      if (width === 390) {
        expect(await page.locator('[data-events] thead').isVisible()).to.equal(false);
        const labels = await page
          .locator('[data-events] tbody tr[data-seq]')
          .first()
          .locator('td')
          .evaluateAll((tds) => tds.map((td) => (td as HTMLElement).dataset.label ?? ''));
        expect(labels.slice(0, 5)).to.deep.equal(['Time', 'Actor', 'Action', 'Target', 'Outcome']);
        const box = await page.locator('[data-events] tr.details').first().boundingBox();
        expect(box!.x + box!.width).to.be.at.most(390);
      }
      const file = path.join(SHOTS, `audit-page-${width}.png`);
      await page.screenshot({ path: file, fullPage: true });
      expect(fs.statSync(file).size, file).to.be.greaterThan(5_000);
    }
    await page.setViewportSize({ width: 1280, height: 900 });
    expectNoProblems(browser);
  });

  it('pausing holds new events until resumed', async function () {
    await page.goto(`${svc.origin}/admin/audit`);
    await waitLoaded();
    await page.waitForSelector('[data-live-state][data-state=live]', { timeout: 10_000 });
    await page.click('[data-pause]');
    expect(await page.getAttribute('[data-live-state]', 'data-state')).to.equal('paused');
    await createGroup('ops-paused');
    await page.waitForFunction(() => document.querySelector('[data-pause]')?.textContent === 'Resume (1 new)');
    expect((await rows()).some((r) => r.target === 'ops-paused')).to.equal(false);
    await page.click('[data-pause]');
    await waitTop('group.created', 'ops-paused', 1000);
    expect(await page.getAttribute('[data-live-state]', 'data-state')).to.equal('live');
  });

  it('what happened while the connection was down shows once it is back', async function () {
    await page.goto(`${svc.origin}/admin/audit`);
    await waitLoaded();
    await page.waitForSelector('[data-live-state][data-state=live]', { timeout: 10_000 });
    await browser.context.setOffline(true);
    try {
      await page.waitForSelector('[data-live-state][data-state=offline]');
      await createGroup('ops-offline');
    } finally {
      await browser.context.setOffline(false);
    }
    await waitTop('group.created', 'ops-offline', 10_000);
    expect(await page.getAttribute('[data-live-state]', 'data-state')).to.equal('live');
    expect((await rows()).filter((r) => r.target === 'ops-offline')).to.have.length(1);
  });

  it('"Load older" pages back with next_before', async function () {
    for (let i = 0; i < 60; i++) {
      svc.service.iam.audit.record({
        action: 'request.denied',
        actor: { user_id: null, username: 'probe', method: 'basic', ip: '203.0.113.8' },
        target: { type: 'route', name: `/api/probe/${i}` },
        outcome: 'denied',
        details: { n: i },
      });
    }
    await svc.service.iam.audit.flush();
    await page.goto(`${svc.origin}/admin/audit?actor=probe`);
    await waitLoaded();
    expect(await rows()).to.have.length(50);
    const older = page.locator('[data-load-older]');
    expect(await older.isVisible()).to.equal(true);
    await older.click();
    await page.waitForFunction(() => document.querySelectorAll('[data-events] tbody tr[data-seq]').length === 61);
    const list = await rows();
    expect(new Set(list.map((r) => r.seq)).size).to.equal(61);
    expect(list.map((r) => r.seq)).to.deep.equal([...list.map((r) => r.seq)].sort((a, b) => b - a));
    expect(list.at(-1)!.target).to.equal('/api/users');
    expect(await older.isVisible()).to.equal(false);
  });

  it('the summary column names the settings changed, what a user change did, and nothing secret', async function () {
    await page.goto(`${svc.origin}/admin/audit`);
    await waitLoaded();
    await page.waitForSelector('[data-live-state][data-state=live]', { timeout: 10_000 });
    const summaryOfTop = () => page.locator('[data-events] tbody tr[data-seq]').first().locator('[data-summary]').textContent();
    const secret = 'a-webhook-secret-the-page-never-shows';
    await request(svc.url).patch('/api/settings/auth').set('Authorization', adminAuth()).send({ oidc_label: 'Summed SSO' }).expect(200);
    await waitTop('settings.changed', 'login settings');
    expect(await summaryOfTop()).to.equal('oidc_label');
    await request(svc.url).put('/api/settings/webhook-secret').set('Authorization', adminAuth()).send({ secret }).expect(204);
    await waitTop('settings.changed', 'scm_webhook_secret');
    expect(await summaryOfTop()).to.equal('scm_webhook_secret set');
    const walt = await userNamed(svc.url, 'walt');
    await request(svc.url)
      .patch(`/api/users/${walt.id}`)
      .set('Authorization', adminAuth())
      .send({ disabled: true, groups: ['INT_USER'] })
      .expect(200);
    await waitTop('user.updated', 'walt');
    expect(await summaryOfTop()).to.equal('disabled, groups +INT_USER -INT_VIEWER');
    expect(await page.textContent('[data-events]')).not.to.include(secret);
    expect(await page.locator('[data-events] thead th').allTextContents()).to.deep.equal(['Time', 'Actor', 'Action', 'Target', 'Outcome', 'Summary', '']);
    expectNoProblems(browser);
  });

  it('a viewer cannot open the page (403 page) and receives no audit frames', async function () {
    await signOut(page);
    const viewerPage = await browser.newPage();
    const frames: string[] = [];
    viewerPage.on('websocket', (ws) => ws.on('framereceived', ({ payload }) => frames.push(String(payload))));
    await signIn(viewerPage, svc.origin, viewer.username, viewer.password, '/');
    const res = await viewerPage.goto(`${svc.origin}/admin/audit`);
    expect(res?.status()).to.equal(403);
    expect(await viewerPage.textContent('h1')).to.equal('Access denied');
    expect(await viewerPage.textContent('main'))
      .to.include('feature:admin.audit')
      .and.include('route:/admin/audit');
    expect(await viewerPage.evaluate(() => fetch('/api/audit').then((r) => r.status))).to.equal(403);

    await viewerPage.goto(`${svc.origin}/`);
    await waitLive(viewerPage);
    expect(await viewerPage.locator('a[href="/admin/audit"], a[href="/admin"]').count()).to.equal(0);
    await createGroup('ops-unseen');
    // a broadcast after the change: once it is here, the change's event would have been too
    const sent = await request(svc.url)
      .post('/api/notifications')
      .set('Authorization', adminAuth())
      .send({ title: 'after the change', message: 'sent after the group was created', level: 'info' })
      .expect(202);
    await viewerPage.waitForSelector(`.toast[data-toast="${sent.body.id}"]`, { timeout: 2000 });
    expect(frames.some((f) => f.includes('"system:notify"'))).to.equal(true);
    expect(frames.filter((f) => f.includes('audit:event'))).to.deep.equal([]);
    await viewerPage.close();
    expectNoProblems(browser);
  });
});
