import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import type { Page } from 'playwright-core';
import { ADMIN, adminAuth, promoteToSuperadmin } from '../support/service.js';
import { createUser } from '../auth/helpers.js';
import { VERSION } from '../../src/version.js';
import {
  ARTIFACTS,
  expectNoProblems,
  forgetSession,
  openBrowser,
  signIn,
  signOut,
  startWebService,
  waitLive,
  type TestBrowser,
  type WebService,
} from './helpers.js';
import { measureFit, reportsPlugin } from './support.js';

const SHOTS = path.join(ARTIFACTS, 'screenshots');
const WIDTHS = [1280, 390] as const;

/** Every page of the UI, with what shows that its data has arrived. */
const PAGES: Array<{ name: string; path: string; ready: string[] }> = [
  { name: 'dashboard', path: '/', ready: ['[data-feed] li', '[data-providers] .provider'] },
  { name: 'account', path: '/settings', ready: ['[data-keys] tbody tr[data-key-id]', '[data-scope-list] .perm', '[data-factors] tbody tr'] },
  { name: 'users', path: '/admin/users', ready: ['[data-users] tr[data-username="quentin.long-name@example.test"]'] },
  { name: 'groups', path: '/admin/groups', ready: ['[data-permission-checks] input'] },
  { name: 'authentication', path: '/admin/authentication', ready: ['[data-auth-form] [name=oidc_label]'] },
  { name: 'integrations', path: '/admin/integrations', ready: ['[data-webhook-secret] [data-state] .pill', '[data-webhook-secret-gitlab] [data-state] .pill'] },
  { name: 'plugins', path: '/admin/plugins', ready: ['[data-plugins] tr[data-plugin="reports"] [data-state="loaded"]', '[data-plugin-settings="reports"]'] },
  { name: 'audit', path: '/admin/audit', ready: ['[data-events] tbody tr'] },
  { name: 'docs', path: '/docs', ready: ['.swagger-ui .opblock'] },
  { name: 'login', path: '/login', ready: ['#username'] },
  { name: 'error-404', path: '/nope', ready: ['main h1'] },
];

const INTEGRATIONS = PAGES.find((p) => p.name === 'integrations')!;
/** an administrator (INT_ADMIN) opens every administration page: users, groups, authentication, integrations, plugins, audit, host services */
const ADMIN_LINKS = 7;

/** In Chromium at desktop and phone width: no page scrolls sideways, one top bar, one footer, one date style. */
describe('browser: layout of every page at 1280 and 390 px', function () {
  this.timeout(120_000);
  let svc: WebService;
  let browser: TestBrowser;
  let page: Page;
  let pluginsDir: string;

  before(async function () {
    pluginsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-web-layout-'));
    reportsPlugin(pluginsDir);
    // no container daemon: the dashboard shows the provider as unavailable, with its reason
    [svc, browser] = await Promise.all([
      startWebService({ SERVICE_PLUGINS_DIR: pluginsDir, SERVICE_CONTAINER_SOCKET: path.join(pluginsDir, 'docker.sock') }),
      openBrowser(),
    ]);
    // what made the phone layout break: long names, many badges per row, SSO-style identities
    await createUser(svc.url, {
      username: 'quentin.long-name@example.test',
      password: 'quentin-password-1',
      display_name: 'Quentin With A Rather Long Display Name',
      email: 'quentin.long-name@example.test',
      groups: ['INT_ADMIN', 'INT_USER', 'INT_VIEWER'],
      extra_permissions: ['route:/admin/plugins'],
    });
    await createUser(svc.url, { username: 'vera', password: 'vera-password-1', groups: ['INT_VIEWER'] });
    for (const n of [
      { title: 'Nightly backup finished', message: '42 GiB in 6 min', level: 'success', source: 'backup' },
      {
        title: 'Disk 80% full on runner-3',
        message: 'Clean up old images soon: /var/lib/containers/storage/overlay is the largest folder.',
        level: 'warning',
        source: 'monitor',
        link: '/settings',
      },
    ]) {
      await request(svc.url).post('/api/notifications').set('Authorization', adminAuth()).send(n).expect(202);
    }
    page = await browser.newPage();
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password);
    await page.evaluate(() =>
      fetch('/api/me/api-keys', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ label: 'deploy script', scopes: ['api:read'] }),
      }),
    );
    fs.mkdirSync(SHOTS, { recursive: true });
  });
  after(async function () {
    await browser?.close();
    await svc?.destroy();
    if (pluginsDir) fs.rmSync(pluginsDir, { recursive: true, force: true });
  });

  const open = async (p: (typeof PAGES)[number], width: number) => {
    await page.setViewportSize({ width, height: width < 600 ? 844 : 900 });
    await page.goto(`${svc.origin}${p.path}`, { waitUntil: 'load' });
    for (const sel of p.ready) await page.locator(sel).first().waitFor();
  };

  for (const width of WIDTHS) {
    it(`at ${width} px: no page overflows sideways, badges stay whole, the navigation is one row, /docs has the top bar of the others, every page ends with the footer naming the release; screenshots saved`, async function () {
      let dashboardNav: Array<string | null> = [];
      for (const p of PAGES) {
        await open(p, width);
        expect((await page.textContent('.site-footer'))?.trim(), p.name).to.equal(`service-core ${VERSION}`);
        const nav = await page.$$eval('.topbar nav a', (as) => as.map((a) => a.getAttribute('href')));
        if (p.name === 'dashboard') dashboardNav = nav;
        if (p.name === 'docs') {
          // Swagger UI's page (it loaded: open() waited for its operations) with the bar of the others
          expect(nav).to.deep.equal(dashboardNav).and.include('/docs');
          expect(await page.getAttribute('.topbar nav a[href="/docs"]', 'aria-current')).to.equal('page');
          expect(await page.textContent('.topbar .username')).to.equal(ADMIN.username);
          expect(await page.isVisible('.topbar [data-bell]')).to.equal(true);
        }
        const fit = await measureFit(page);
        expect(fit.scrollWidth, `${p.name} at ${width}: page ${fit.scrollWidth} px wide`).to.be.at.most(fit.innerWidth);
        expect(fit.wrappedBadges, `${p.name} at ${width}: badges broken over lines`).to.deep.equal([]);
        if (p.name !== 'login') {
          expect(fit.navRows, `${p.name} at ${width}: navigation rows`).to.equal(1);
          expect(fit.barHeadAligned, `${p.name} at ${width}: brand and account on one row`).to.equal(true);
        }
        if (p.path.startsWith('/admin/')) {
          // the administration pages: a column beside the page at 1280 px, one row above it at 390 px; the page's own link is current
          expect(fit.adminNav, `${p.name} at ${width}`).to.deep.equal(
            width === 1280
              ? { links: ADMIN_LINKS, columns: 1, rows: ADMIN_LINKS, besideMain: true }
              : { links: ADMIN_LINKS, columns: ADMIN_LINKS, rows: 1, besideMain: false },
          );
          expect(await page.getAttribute(`.admin-nav a[href="${p.path}"]`, 'aria-current'), p.name).to.equal('page');
          expect(await page.getAttribute('.topbar nav a[href="/admin"]', 'aria-current'), p.name).to.equal('true');
        } else expect(fit.adminNav, p.name).to.equal(null);
        const file = path.join(SHOTS, `${p.name}-${width}.png`);
        await page.screenshot({ path: file, fullPage: true });
        expect(fs.statSync(file).size, file).to.be.greaterThan(5_000);
      }
      expectNoProblems(browser);
    });
  }

  it('at 390 px the users table is a list of cards, each cell named by its column', async function () {
    await open(PAGES[2]!, 390);
    const row = page.locator('[data-users] tr[data-username="quentin.long-name@example.test"]');
    expect(await page.locator('[data-users] thead').isVisible()).to.equal(false);
    const labels = await row.locator('td').evaluateAll((tds) => tds.map((td) => (td as HTMLElement).dataset.label ?? ''));
    expect(labels.slice(0, 6)).to.deep.equal(['Username', 'Name', 'Email', 'Groups', 'Sign-in', 'State']);
    const box = await row.boundingBox();
    expect(box!.width).to.be.at.most(390);
    // "active" and "INT_ADMIN" read whole
    for (const text of ['active', 'INT_ADMIN']) {
      const pill = row.locator('.pill', { hasText: text }).first();
      const height = await pill.evaluate((el) => el.getBoundingClientRect().height);
      expect(height, text).to.be.lessThan(24);
    }
  });

  it("a user's keys, opened on the users page, fit at 1280 and 390 px", async function () {
    for (const width of WIDTHS) {
      await open(PAGES[2]!, width);
      await page.click('[data-users] tr[data-username="admin"] [data-user-keys-of="admin"]');
      await page.locator('[data-user-keys] [data-keys] tr[data-label="deploy script"]').waitFor();
      await page.locator('[data-user-keys] [data-sessions] tbody tr[data-key-id]').first().waitFor();
      const fit = await measureFit(page);
      expect(fit.scrollWidth, `users with keys at ${width}: page ${fit.scrollWidth} px wide`).to.be.at.most(fit.innerWidth);
      expect(fit.wrappedBadges, `users with keys at ${width}: badges broken over lines`).to.deep.equal([]);
      await page.screenshot({ path: path.join(SHOTS, `users-keys-${width}.png`), fullPage: true });
    }
    expectNoProblems(browser);
  });

  /** The send form's labels (each holding its field) and buttons that a toast covers, in the page as it is. */
  const coveredFields = (): Promise<{ covered: string[]; toast: { top: number; bottom: number }; viewport: number }> =>
    page.evaluate(() => {
      const t = document.querySelector('[data-toasts]')!.getBoundingClientRect();
      const covered = [...document.querySelectorAll('[data-send-form] label, [data-send-form] button')]
        .filter((el) => {
          const r = el.getBoundingClientRect();
          return r.bottom > t.top && r.top < t.bottom && r.right > t.left && r.left < t.right;
        })
        .map((el) => (el.textContent ?? '').trim().split('\n')[0]!.trim());
      return { covered, toast: { top: t.top, bottom: t.bottom }, viewport: window.innerHeight };
    });

  const sendLive = async (n: Record<string, string>): Promise<string> => {
    const sent = await request(svc.url).post('/api/notifications').set('Authorization', adminAuth()).send(n).expect(202);
    await page.waitForSelector(`.toast[data-toast="${sent.body.id}"]`);
    return sent.body.id as string;
  };

  it('at 390 px a live toast covers none of the send form, wherever the form is on the screen', async function () {
    await open(PAGES[0]!, 390);
    await waitLive(page);
    // an error stays 12 s: one toast for every position
    await sendLive({ title: 'Runner runner-3 stopped', message: 'exit code 137 (out of memory) after 2 h 14 min', level: 'error', source: 'monitor' });
    await page.waitForTimeout(250); // the toast's entry animation
    for (const where of ['as opened', 'end', 'center', 'start'] as const) {
      if (where !== 'as opened') {
        await page.evaluate((block) => document.querySelector('[data-send-form]')!.scrollIntoView({ block }), where);
        await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
      }
      const { covered, toast, viewport } = await coveredFields();
      expect(covered, `form scrolled to ${where}: fields under the toast`).to.deep.equal([]);
      // and the toast is still on the screen, whole
      expect(toast.top, where).to.be.at.least(0);
      expect(toast.bottom, where).to.be.at.most(viewport);
      if (where === 'as opened') await page.screenshot({ path: path.join(SHOTS, 'dashboard-toast-390.png') });
    }
    expectNoProblems(browser);
  });

  it('at 1280 px the dashboard with a live toast beside the form (the picture of the README and docs/web.md)', async function () {
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(`${svc.origin}/`, { waitUntil: 'load' });
    for (const sel of PAGES[0]!.ready) await page.locator(sel).first().waitFor();
    await waitLive(page);
    await sendLive({
      title: 'Deploy of service-core finished',
      message: `Version ${VERSION} is live on production.`,
      level: 'success',
      source: 'ci',
      link: 'https://ci.example.test/builds/1289',
    });
    await page.waitForTimeout(250); // the toast's entry animation
    const { covered } = await coveredFields();
    expect(covered).to.deep.equal([]);
    const file = path.join(SHOTS, 'dashboard-toast-1280.png');
    await page.screenshot({ path: file });
    expect(fs.statSync(file).size, file).to.be.greaterThan(10_000);
    expectNoProblems(browser);
  });

  it('a page that does not exist keeps the top bar when signed in (a card without it when not)', async function () {
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.goto(`${svc.origin}/`);
    const dashboardNav = await page.$$eval('.topbar nav a', (as) => as.map((a) => a.getAttribute('href')));
    for (const width of WIDTHS) {
      await page.setViewportSize({ width, height: width < 600 ? 844 : 900 });
      const res = await page.goto(`${svc.origin}/no/such/page`);
      expect(res!.status()).to.equal(404);
      expect(await page.$$eval('.topbar nav a', (as) => as.map((a) => a.getAttribute('href'))), `at ${width}`).to.deep.equal(dashboardNav);
      expect(await page.$$('.topbar nav a[aria-current]'), 'no page of the navigation is the current one').to.have.length(0);
      expect(await page.textContent('.topbar .username')).to.equal(ADMIN.username);
      expect(await page.isVisible('.topbar [data-bell]')).to.equal(true);
      expect(await page.isVisible('.topbar [data-logout]')).to.equal(true);
      expect(await page.textContent('main h1')).to.equal('Page not found');
      expect(await page.textContent('main'))
        .to.include('/no/such/page')
        .and.match(/request id [0-9a-f-]{36}/);
      const fit = await measureFit(page);
      expect(fit.scrollWidth, `at ${width}`).to.be.at.most(fit.innerWidth);
      expect(fit.navRows, `at ${width}`).to.equal(1);
    }
    const anonymous = await request(svc.url).get('/no/such/page').set('Accept', 'text/html').expect(404);
    expect(anonymous.text).to.include('<main class="card">').and.include('Page not found').and.not.include('class="topbar"');
    // its Sign out works like every page's (and the bell counts the unread)
    await page.waitForFunction(() => !document.querySelector('[data-bell-count]')?.hasAttribute('hidden'), undefined, { timeout: 10_000 });
    const session = (await browser.context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
    await request(svc.url).get('/api/me').set('Cookie', session).expect(200);
    await signOut(page);
    await request(svc.url).get('/api/me').set('Cookie', session).expect(401);
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password);
    expectNoProblems(browser);
  });

  it('/docs, to someone who is not signed in, has the top bar with a way to sign in; /healthz names the release of the footer', async function () {
    // signed in: the layout tests above
    const res = await request(svc.url).get('/docs').expect(200);
    expect(res.text).to.include('<header class="topbar">').and.include('href="/login?next=%2Fdocs"').and.not.include('data-logout');
    const health = await request(svc.url).get('/healthz').expect(200);
    expect(health.body.version).to.equal(VERSION);
  });

  it('integrations of an administrator who is no superadmin: without the system key, the webhook secret takes the whole row', async function () {
    for (const width of WIDTHS) {
      await open(INTEGRATIONS, width);
      expect(await page.locator('[data-system-key]').count()).to.equal(0);
      const box = async (sel: string) => (await page.locator(sel).boundingBox())!;
      const [webhook, row] = [await box('[data-webhook-secret]'), await box('.admin-main > .grid')];
      expect(webhook.x, `at ${width} px`).to.be.closeTo(row.x, 1);
      expect(webhook.width, `at ${width} px`).to.be.closeTo(row.width, 1);
    }
  });

  it('the account page holds the account only: the settings of the service are administration pages', async function () {
    for (const width of WIDTHS) {
      await open(PAGES[1]!, width);
      for (const sel of ['[data-auth-settings]', '[data-webhook-secret]', '[data-system-key]', '.admin-nav'])
        expect(await page.locator(sel).count(), sel).to.equal(0);
      // the profile is not left half-width beside an empty gap: it spans the row the Security panel spans
      const box = async (sel: string) => (await page.locator(sel).boundingBox())!;
      const [profile, security] = [await box('section:has(#profile-title)'), await box('[data-security]')];
      expect({ x: profile.x, width: profile.width }, `at ${width} px`).to.deep.equal({ x: security.x, width: security.width });
    }
  });

  it('integrations of a superadmin: the system key and the webhook secret share a row (side by side at 1280 px, stacked at 390 px)', async function () {
    const root = (
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', adminAuth())
        .send({ username: 'root-layout', password: 'root-layout-password', groups: ['INT_ADMIN'] })
        .expect(201)
    ).body;
    await promoteToSuperadmin(svc, root.id);
    await forgetSession(browser);
    await signIn(page, svc.origin, 'root-layout', 'root-layout-password');
    try {
      for (const width of WIDTHS) {
        await open({ ...INTEGRATIONS, ready: [...INTEGRATIONS.ready, '[data-system-key] [data-state] .pill'] }, width);
        const box = async (sel: string) => (await page.locator(sel).boundingBox())!;
        const [key, webhook, row] = [await box('[data-system-key]'), await box('[data-webhook-secret]'), await box('.admin-main > .grid')];
        // edges within a pixel: the grid's fractions fall between pixels
        const right = (b: { x: number; width: number }) => b.x + b.width;
        expect(key.x, `at ${width} px`).to.be.closeTo(row.x, 1);
        expect(right(webhook), `at ${width} px`).to.be.closeTo(right(row), 1);
        if (width === 1280) expect(webhook.y, 'side by side').to.equal(key.y);
        else {
          expect(webhook.x, 'stacked').to.be.closeTo(row.x, 1);
          expect(right(key), 'stacked').to.be.closeTo(right(row), 1);
        }
      }
    } finally {
      await forgetSession(browser);
      await signIn(page, svc.origin, ADMIN.username, ADMIN.password);
    }
  });

  it('shows every date in one style, with the ISO time in its title', async function () {
    await page.setViewportSize({ width: 1280, height: 900 });
    const seen: string[] = [];
    for (const p of [PAGES[0]!, PAGES[1]!]) {
      await open(p, 1280);
      const times = await page.$$eval('time', (els) =>
        els.map((el) => ({ text: el.textContent ?? '', title: el.getAttribute('title') ?? '', datetime: el.getAttribute('datetime') ?? '' })),
      );
      expect(times.length, p.name).to.be.greaterThan(0);
      for (const t of times) {
        expect(t.text, p.name).to.match(/^\d{1,2} [A-Z][a-z]{2,3} \d{4}, \d{2}:\d{2}$/); // en-GB writes "Sept"
        expect(t.title).to.equal(new Date(t.datetime).toISOString());
        seen.push(t.text);
      }
    }
    // no other style left behind (relative times, locale dates)
    expect(await page.textContent('main')).not.to.match(/\bago\b|\d+\/\d+\/\d{4}/);
    expect(seen.length).to.be.greaterThan(3);
  });
});
