import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { ADMIN } from '../support/service.js';
import { LDAP_GROUPS, LDAP_PEOPLE, startSlapd, type Slapd } from '../support/slapd.js';
import { patchAuthSettings, unusedPort } from '../auth/helpers.js';
import { REFUSAL_TEXT } from '../../src/auth/providers/refusal.js';
import { expectNoProblems, forgetSession, openBrowser, signIn, startWebService, type TestBrowser, type WebService } from './helpers.js';

/** In Chromium: the LDAP checks of the Authentication page against a real slapd (warnings, test connection, test login, unsaved changes tried). */
describe('browser: the Authentication page tests the directory (real slapd)', function () {
  this.timeout(60_000);
  let svc: WebService;
  let slapd: Slapd;
  let browser: TestBrowser;
  let page: Page;

  before(async function () {
    this.timeout(120_000);
    [slapd, browser] = await Promise.all([startSlapd(), openBrowser()]);
    svc = await startWebService();
    await patchAuthSettings(svc.url, {
      auth_providers: 'ldap,local',
      ldap_url: slapd.url,
      ldap_bind_dn: slapd.bindDN,
      ldap_bind_password: slapd.bindPassword,
      ldap_base_dn: slapd.baseDN,
      ldap_group_mapping: { [LDAP_GROUPS.admins]: ['INT_ADMIN'] },
    }).expect(200);
    page = await browser.newPage();
  });
  after(async () => {
    await browser?.close();
    await svc?.destroy();
    await slapd?.stop();
  });

  it('shows the warning of a plain ldap:// server, tests the connection and a login, and tries an unsaved change', async () => {
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password, '/admin/authentication');
    const checks = page.locator('[data-ldap-checks]');
    await checks.waitFor();
    expect(await checks.locator('[data-ldap-warnings] li').allTextContents()).to.have.length(1);
    expect(await checks.locator('[data-ldap-warnings]').textContent())
      .to.include('plain ldap://')
      .and.include('ldap_starttls, SERVICE_LDAP_STARTTLS');

    const result = checks.locator('[data-ldap-result]');
    await checks.locator('[data-ldap-test=connection]').click();
    await page.waitForFunction(() => /Connected to|Failed/.test(document.querySelector('[data-ldap-result]')?.textContent ?? ''));
    expect(await result.textContent()).to.include(`Connected to ${slapd.url} (OpenLDAP`);

    await checks.locator('[name=ldap_test_username]').fill('alice');
    await checks.locator('[name=ldap_test_password]').fill(LDAP_PEOPLE.alice.password);
    await checks.locator('[data-ldap-test=login]').click();
    await page.waitForFunction(() => /would/.test(document.querySelector('[data-ldap-result]')?.textContent ?? ''));
    expect(await result.textContent())
      .to.include('would sign in')
      .and.include('Local groups from the mapping: INT_ADMIN');
    expect(await checks.locator('[name=ldap_test_password]').inputValue(), 'the password is cleared').to.equal('');

    // a base DN typed but not saved is what the test uses
    await page.fill('[data-auth-form] [name=ldap_base_dn]', 'dc=nowhere,dc=test');
    await checks.locator('[data-ldap-test=connection]').click();
    await page.waitForFunction(() => /does not exist/.test(document.querySelector('[data-ldap-result]')?.textContent ?? ''));
    expect(await result.getAttribute('class')).to.include('error');
    const saved = (await (
      await fetch(`${svc.url}/api/settings/auth`, {
        headers: { Authorization: `Basic ${Buffer.from(`${ADMIN.username}:${ADMIN.password}`).toString('base64')}` },
      })
    ).json()) as {
      settings: Record<string, { value: unknown }>;
    };
    expect(saved.settings.ldap_base_dn!.value).to.equal(slapd.baseDN);
    expectNoProblems(browser);
  });

  it('the login form says the directory is unavailable (not a wrong password) when no server answers', async () => {
    await patchAuthSettings(svc.url, { ldap_url: `ldap://127.0.0.1:${await unusedPort()}`, ldap_bind_password: slapd.bindPassword }).expect(200);
    try {
      await forgetSession(browser);
      await page.goto(`${svc.origin}/login`);
      await page.fill('#username', 'alice');
      await page.fill('#password', LDAP_PEOPLE.alice.password);
      await Promise.all([page.waitForURL((u) => u.searchParams.get('error') === 'directory_unavailable'), page.click('button[type=submit]')]);
      expect(await page.locator('p.error[role=alert]').textContent()).to.equal(REFUSAL_TEXT.directory_unavailable);
    } finally {
      await patchAuthSettings(svc.url, { ldap_url: slapd.url, ldap_bind_password: slapd.bindPassword }).expect(200);
    }
  });
});
