import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import type { Page } from 'playwright-core';
import { ADMIN, adminAuth } from '../support/service.js';
import { createUser } from '../auth/helpers.js';
import { ARTIFACTS, expectNoProblems, openBrowser, signIn, startWebService, waitLive, type TestBrowser, type WebService } from './helpers.js';

/** In Chromium: live toasts, the bell, history actions, and nothing missed while offline. */
describe('browser: dashboard with live notifications', function () {
  this.timeout(60_000);
  let svc: WebService;
  let browser: TestBrowser;
  let page: Page;

  const notify = async (body: Record<string, unknown>) => {
    const res = await request(svc.url).post('/api/notifications').set('Authorization', adminAuth()).send(body);
    expect(res.status, JSON.stringify(res.body)).to.equal(202);
    return res.body as { id: string; seq: number };
  };
  const bell = () => page.textContent('[data-bell-count]');
  const feedIds = () => page.$$eval('[data-feed] li', (lis) => lis.map((li) => (li as HTMLElement).dataset.id));

  before(async function () {
    [svc, browser] = await Promise.all([startWebService(), openBrowser()]);
    await createUser(svc.url, { username: 'dana', password: 'dana-password-1', groups: ['INT_USER'] });
    // history from before the page was opened
    await notify({ title: 'Nightly backup finished', message: '42 GiB in 6 min', level: 'success', source: 'backup' });
    await notify({ title: 'Disk 80% full on runner-3', message: 'Clean up old images soon.', level: 'warning', source: 'monitor' });
    page = await browser.newPage();
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password);
    await waitLive(page);
  });
  after(async function () {
    await browser?.close();
    await svc?.destroy();
  });

  it('shows the history and the unread count', async function () {
    await page.waitForFunction(() => document.querySelectorAll('[data-feed] li').length === 2);
    expect(await bell()).to.equal('2');
    expect(await page.textContent('[data-feed] li:first-child .title')).to.equal('Disk 80% full on runner-3');
  });

  it('a notification posted through the API appears as a toast and in the bell within a second', async function () {
    const started = Date.now();
    const sent = await notify({
      title: 'Deploy of service-core finished',
      message: 'Version 0.1.0 is live on production.',
      level: 'success',
      source: 'ci',
      link: '/settings',
    });
    await page.waitForSelector(`.toast[data-toast="${sent.id}"]`, { timeout: 1000 });
    await page.waitForFunction(() => document.querySelector('[data-bell-count]')?.textContent === '3', undefined, {
      timeout: Math.max(50, 1000 - (Date.now() - started)),
    });
    const elapsed = Date.now() - started;
    expect(elapsed, `toast and bell after ${elapsed} ms`).to.be.lessThan(1000);
    expect(await page.textContent(`.toast[data-toast="${sent.id}"] .title`)).to.equal('Deploy of service-core finished');
    expect((await feedIds())[0]).to.equal(sent.id);
    // the artefact (and the README picture): the dashboard with its toast
    await page.waitForTimeout(250); // the toast's entry animation
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'dashboard.png') });
    expect(fs.statSync(path.join(ARTIFACTS, 'dashboard.png')).size).to.be.greaterThan(10_000);
  });

  it('a user notification reaches only its user', async function () {
    await notify({ title: 'For dana only', message: 'not for admin', user: 'dana' });
    const mine = await notify({ title: 'Your report is ready', message: 'admin only', user: ADMIN.username });
    await page.waitForSelector(`.toast[data-toast="${mine.id}"]`, { timeout: 1000 });
    expect(await page.$('.toast:has-text("For dana only")')).to.equal(null);
    expect(await page.$('[data-feed] li:has-text("For dana only")')).to.equal(null);
  });

  it('marks read, dismisses and reads all, and the bell follows', async function () {
    await page.waitForFunction(() => document.querySelector('[data-bell-count]')?.textContent === '4');
    const first = page.locator('[data-feed] li').first();
    const id = await first.getAttribute('data-id');
    await first.locator('[data-action=read]').click();
    await page.waitForFunction(() => document.querySelector('[data-bell-count]')?.textContent === '3');
    expect(await first.getAttribute('class')).to.include('read');
    await page.locator(`[data-feed] li[data-id="${id}"] [data-action=dismiss]`).click();
    await page.waitForFunction((gone) => !document.querySelector(`[data-feed] li[data-id="${gone}"]`), id);
    await page.click('[data-read-all]');
    await page.waitForFunction(() => (document.querySelector('[data-bell-count]') as HTMLElement | null)?.hidden === true);
    // the server agrees
    const res = await request(svc.url).get('/api/notifications').set('Authorization', adminAuth()).expect(200);
    expect(res.body.unread).to.equal(0);
    expect(res.body.notifications.map((n: { id: string }) => n.id)).not.to.include(id);
  });

  it('going offline and back misses nothing', async function () {
    const before = await feedIds();
    await browser.context.setOffline(true);
    await page.waitForFunction(() => document.body.dataset.live === 'offline');
    expect(await page.isVisible('[data-conn-state]')).to.equal(true);
    const missed = [];
    for (let i = 1; i <= 4; i++) missed.push(await notify({ title: `While offline ${i}`, message: `number ${i}`, level: i === 4 ? 'error' : 'info' }));
    missed.push(await notify({ title: 'While offline, just for me', message: 'targeted', user: ADMIN.username }));
    await page.waitForTimeout(300);
    expect(await feedIds()).to.deep.equal(before);

    await browser.context.setOffline(false);
    await waitLive(page);
    await page.waitForFunction((n) => document.querySelectorAll('[data-feed] li').length === n, before.length + missed.length);
    const ids = await feedIds();
    for (const m of missed) expect(ids).to.include(m.id);
    expect(new Set(ids).size).to.equal(ids.length);
    await page.waitForFunction(() => document.querySelector('[data-bell-count]')?.textContent === '5');
    // five missed: one summary toast instead of five
    await page.waitForSelector('.toast:has-text("5 new notifications")');
    expect(await page.isVisible('[data-conn-state]')).to.equal(false);

    // and live delivery goes on after the reconnect
    const after = await notify({ title: 'Back online', message: 'live again' });
    await page.waitForSelector(`.toast[data-toast="${after.id}"]`, { timeout: 1000 });
    expectNoProblems(browser);
  });

  it('a notification link never leads off the site in disguise: what the API takes, Chromium resolves as written', async function () {
    const candidates = [
      '/\t/evil.example/x', // a tab that the browser drops: //evil.example/x
      '/\n/evil.example/x',
      '/\\evil.example/x', // a backslash the browser reads as a slash
      '//evil.example/x',
      '/ /evil.example/x',
      'javascript:alert(1)',
      ' https://evil.example/x',
      '/status',
      '/settings?tab=keys#api',
      '/%09/evil.example/x', // encoded: stays a path
      'https://ci.example.com/build/42',
    ];
    for (const link of candidates) {
      const res = await request(svc.url).post('/api/notifications').set('Authorization', adminAuth()).send({ title: 'link check', message: 'm', link });
      // where Chromium, on our page, would take a click on this link
      const target = await page.evaluate((href) => {
        const a = document.createElement('a');
        a.href = href;
        return { origin: a.origin, protocol: a.protocol };
      }, link);
      const stays = target.origin === svc.origin;
      const writtenAsWebUrl = /^https?:\/\//.test(link) && (target.protocol === 'http:' || target.protocol === 'https:');
      if (res.status === 202) expect(stays || writtenAsWebUrl, `${JSON.stringify(link)} accepted but leads to ${target.origin}`).to.equal(true);
      else expect(res.status, JSON.stringify(link)).to.equal(400);
    }
    const attack = await request(svc.url)
      .post('/api/notifications')
      .set('Authorization', adminAuth())
      .send({ title: 'x', message: 'm', link: '/\t/evil.example/x' });
    expect(attack.status).to.equal(400);
    expect(attack.body.error.details[0].field).to.equal('link');
    for (const ok of ['/status', '/%09/evil.example/x', 'https://ci.example.com/build/42']) {
      expect(
        (await request(svc.url).post('/api/notifications').set('Authorization', adminAuth()).send({ title: 'x', message: 'm', link: ok })).status,
        ok,
      ).to.equal(202);
    }
  });

  it('keeps the feed after a reload (history) and the send form posts a broadcast', async function () {
    await page.reload();
    await waitLive(page);
    expect((await feedIds()).length).to.be.greaterThan(5);
    await page.fill('[data-send-form] [name=title]', 'Maintenance at 18:00');
    await page.fill('[data-send-form] [name=message]', 'Ten minutes of downtime.');
    await page.selectOption('[data-send-form] [name=level]', 'warning');
    await page.click('[data-send-form] button[type=submit]');
    await page.waitForSelector('.toast:has-text("Maintenance at 18:00")', { timeout: 2000 });
    expect(await page.textContent('[data-send-form] [data-msg]')).to.equal('Sent.');
    expectNoProblems(browser);
  });

  it('loads older notifications under the first page until the history ends', async function () {
    const archive = Array.from({ length: 120 }, (_, i) => ({ title: `Archived ${i + 1}`, message: 'from the archive', toast: false }));
    const res = await request(svc.url).post('/api/notifications/batch').set('Authorization', adminAuth()).send({ notifications: archive });
    expect(res.status, JSON.stringify(res.body)).to.equal(202);
    const history = await request(svc.url).get('/api/notifications?limit=200').set('Authorization', adminAuth()).expect(200);
    const everything = history.body.notifications.map((n: { id: string }) => n.id) as string[];
    expect(everything.length, 'more than the first page holds').to.be.greaterThan(100);
    const titles = () => page.$$eval('[data-feed] li .title', (els) => els.map((el) => el.textContent));
    const older = page.locator('[data-load-older]');

    await page.reload();
    await waitLive(page);
    await page.waitForFunction(() => document.querySelectorAll('[data-feed] li').length === 100);
    expect(await titles())
      .to.include('Archived 21')
      .and.not.include('Archived 20');
    expect(await older.isVisible()).to.equal(true);

    // each click adds the next 50 below the lowest seq shown; a short page hides the button
    for (let shown = 100; shown < everything.length; shown += 50) {
      await older.click();
      await page.waitForFunction((n) => document.querySelectorAll('[data-feed] li').length === n, Math.min(shown + 50, everything.length));
    }
    const after = await titles();
    for (let i = 1; i <= 20; i++) expect(after).to.include(`Archived ${i}`);
    expect(await feedIds()).to.deep.equal(everything);
    if (everything.length % 50 !== 0) await older.waitFor({ state: 'hidden' });
    else {
      await older.click(); // a page of exactly 50 was not yet known to be the last
      await older.waitFor({ state: 'hidden' });
      expect(await feedIds()).to.deep.equal(everything);
    }
    expectNoProblems(browser);
  });
});
