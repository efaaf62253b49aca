import { expect } from 'chai';
import request from 'supertest';
import type { Page } from 'playwright-core';
import { ADMIN, adminAuth } from '../support/service.js';
import { createUser } from '../auth/helpers.js';
import { startIdp, type RunningIdp } from '../support/oidc-idp.js';
import { expectNoProblems, openBrowser, signIn, signOut, startWebService, waitLive, type TestBrowser, type WebService, forgetSession } from './helpers.js';

/** In Chromium: local login and logout, page access of a viewer, OIDC login end to end. */
describe('browser: sign-in and page access', function () {
  this.timeout(60_000);
  let svc: WebService;
  let browser: TestBrowser;
  let page: Page;
  const viewer = { username: 'vera', password: 'vera-password-1' };

  before(async function () {
    [svc, browser] = await Promise.all([startWebService(), openBrowser()]);
    await createUser(svc.url, { ...viewer, display_name: 'Vera Viewer', groups: ['INT_VIEWER'] });
    page = await browser.newPage();
  });
  after(async function () {
    await browser?.close();
    await svc?.destroy();
  });
  afterEach(async function () {
    await forgetSession(browser);
  });

  it('local login and logout', async function () {
    // a page asks for a sign-in and comes back after it
    await page.goto(`${svc.origin}/settings`);
    expect(new URL(page.url()).pathname).to.equal('/login');
    await page.fill('#username', ADMIN.username);
    await page.fill('#password', 'wrong-password');
    await Promise.all([page.waitForURL(/error=invalid_credentials/), page.click('button[type=submit]')]);
    expect(await page.textContent('[role=alert]')).to.include('Wrong username or password');

    await page.fill('#username', ADMIN.username);
    await page.fill('#password', ADMIN.password);
    await Promise.all([page.waitForURL(`${svc.origin}/settings`), page.click('button[type=submit]')]);
    expect(await page.textContent('[data-profile-username]')).to.equal(ADMIN.username);
    expect(await page.textContent('.topbar .username')).to.equal(ADMIN.username);

    // the page is live before the sign-out (one that is still opening its connection when its
    // session ends has the browser log the refused upgrade, which is not what this test is about)
    await waitLive(page);
    await signOut(page);
    expect(new URL(page.url()).pathname).to.equal('/login');
    // the session is gone on the server too
    await page.goto(`${svc.origin}/`);
    expect(new URL(page.url()).pathname).to.equal('/login');
    expectNoProblems(browser);
  });

  it('a viewer does not see admin pages and gets 403 on their URLs', async function () {
    await signIn(page, svc.origin, viewer.username, viewer.password);
    const links = await page.$$eval('.topbar nav a', (as) => as.map((a) => a.getAttribute('href')));
    expect(links).to.deep.equal(['/', '/settings', '/docs']);
    expect(await page.textContent('.topbar .username')).to.equal('Vera Viewer');
    expect(await page.$('[data-send-form]')).to.equal(null);
    for (const path of ['/admin/users', '/admin/groups', '/admin/plugins']) {
      const res = await page.goto(`${svc.origin}${path}`);
      expect(res?.status(), path).to.equal(403);
      expect(await page.textContent('h1')).to.equal('Access denied');
    }
    // and the API behind them says the same
    const api = await page.evaluate(async () => (await fetch('/api/users')).status);
    expect(api).to.equal(403);
  });

  describe('OIDC login through the in-process identity provider', function () {
    let idp: RunningIdp;
    const CLIENT = { client_id: 'service-core-web', client_secret: 'web-flow-client-secret-0123456789' };

    before(async function () {
      idp = await startIdp({
        clients: [{ ...CLIENT, redirect_uris: [`${svc.origin}/auth/callback/oidc`] }],
        accounts: { 'olga-sub': { email: 'olga@example.test', email_verified: true, preferred_username: 'olga', name: 'Olga SSO', groups: ['idp-devs'] } },
      });
      const res = await request(svc.url)
        .patch('/api/settings/auth')
        .set('Authorization', adminAuth())
        .send({
          auth_providers: 'local,oidc',
          oidc_issuer: idp.issuer,
          oidc_client_id: CLIENT.client_id,
          oidc_client_secret: CLIENT.client_secret,
          oidc_label: 'Example SSO',
          oidc_group_mapping: { 'idp-devs': ['INT_USER'] },
        });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
    });
    after(async function () {
      await idp?.stop();
    });

    /**
     * The test IdP's interaction endpoints answer JSON (it has no login UI), so the browser
     * posts its login and consent forms from the IdP's own page, as its UI would.
     */
    async function answerIdp(sub: string): Promise<void> {
      for (let step = 0; step < 4 && page.url().startsWith(idp.issuer); step++) {
        const prompt = JSON.parse((await page.textContent('body')) ?? '{}') as { uid: string; prompt: string };
        const action = prompt.prompt === 'login' ? 'login' : 'confirm';
        const here = page.url();
        await Promise.all([
          page.waitForURL((u) => u.href !== here),
          page.evaluate(
            ({ uid, action, sub }) => {
              const form = document.createElement('form');
              form.method = 'post';
              form.action = `/interaction/${uid}/${action}`;
              const input = document.createElement('input');
              input.name = 'login';
              input.value = sub;
              form.append(input);
              document.body.append(form);
              form.submit();
            },
            { uid: prompt.uid, action, sub },
          ),
        ]);
      }
    }

    it('signs in with the SSO button and lands on the page it asked for', async function () {
      await page.goto(`${svc.origin}/settings`);
      expect(new URL(page.url()).pathname).to.equal('/login');
      await Promise.all([page.waitForURL((u) => u.href.startsWith(idp.issuer)), page.click('a.sso')]);
      await answerIdp('olga-sub');
      await page.waitForURL(`${svc.origin}/settings`);
      expect(await page.textContent('[data-profile-username]')).to.equal('olga');
      expect(await page.textContent('.topbar .username')).to.equal('Olga SSO');
      // the session token never showed in any URL of our origin
      const me = await page.evaluate(async () => (await fetch('/api/me')).json());
      expect(me).to.include({ username: 'olga', method: 'session_cookie' });
      expect(me.groups).to.include('INT_USER');
      await waitLive(page);
      await signOut(page);
      expectNoProblems(browser);
    });
  });
});
