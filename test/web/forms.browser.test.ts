import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import type { Page } from 'playwright-core';
import { ADMIN, adminAuth } from '../support/service.js';
import { createUser } from '../auth/helpers.js';
import { GROUP_NAME, USERNAME } from '../../src/iam/schemas.js';
import { GROUP_RULE, USERNAME_RULE } from '../../src/web/pages.js';
import { expectNoProblems, openBrowser, signIn, startWebService, type TestBrowser, type WebService } from './helpers.js';
import { reportsPlugin } from './support.js';

/** In Chromium: what the forms say and do — plugin settings, name rules, labels, permissions, provider state. */
describe('browser: forms, messages and permissions', function () {
  this.timeout(60_000);
  let svc: WebService;
  let browser: TestBrowser;
  let page: Page;
  let dir: string;
  let socketPath: string;

  const msgOf = (form: string) => page.locator(`${form} [data-msg]`);

  before(async function () {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-web-forms-'));
    reportsPlugin(dir);
    socketPath = path.join(dir, 'no-daemon.sock');
    [svc, browser] = await Promise.all([
      startWebService({ SERVICE_PLUGINS_DIR: dir, SERVICE_PLUGIN_REPORTS_REGION: 'us', SERVICE_CONTAINER_SOCKET: socketPath }),
      openBrowser(),
    ]);
    await createUser(svc.url, { username: 'ada', password: 'ada-password-1', groups: ['INT_ADMIN'] });
    page = await browser.newPage();
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password);
  });
  after(async function () {
    await browser?.close();
    await svc?.destroy();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('edits plugin settings: sources shown, env locked, secret masked, the field the server refuses named', async function () {
    await page.goto(`${svc.origin}/admin/plugins`);
    const form = page.locator('[data-plugin-settings="reports"]');
    await form.waitFor();
    const source = (key: string) => form.locator(`[data-setting="${key}"] .src`).textContent();
    expect(await form.locator('[name=region]').inputValue()).to.equal('us');
    expect(await form.locator('[name=region]').getAttribute('readonly')).to.equal('');
    expect(await source('region')).to.include('environment (locked)');
    expect(await form.locator('[name=url]').inputValue()).to.equal('https://reports.example.test/in');
    expect(await source('url')).to.include('manifest default');
    expect(await form.locator('[name=token]').getAttribute('type')).to.equal('password');
    expect(await form.locator('[name=token]').getAttribute('placeholder')).to.equal('not set');
    expect(await form.textContent()).to.include('the token sent with each report');

    // a secret is stored and never shown back
    await form.locator('[name=token]').fill('reports-token-0123456789');
    await form.locator('button[type=submit]').click();
    await form.locator('[data-msg]:has-text("Saved; Reports restarted (loaded)")').waitFor();
    expect(await form.locator('[name=token]').inputValue()).to.equal('');
    expect(await form.locator('[name=token]').getAttribute('placeholder')).to.equal('set (unchanged)');
    expect(await source('token'))
      .to.include('saved here')
      .and.include('configured');
    expect(await page.content()).not.to.include('reports-token-0123456789');
    const stored = await request(svc.url).get('/api/plugins/reports/settings').set('Authorization', adminAuth()).expect(200);
    expect(stored.body.settings.find((s: { key: string }) => s.key === 'token')).to.include({ configured: true, source: 'store', value: null });

    // a new address without the token again: the server's rule, naming the field
    await form.locator('[name=url]').fill('https://elsewhere.example.test/in');
    await form.locator('button[type=submit]').click();
    const msg = form.locator('[data-msg]');
    await form.locator('[data-msg].error').waitFor();
    expect(await msg.textContent()).to.equal('token: must be entered again when url changes');
    expect(await form.locator('[name=token]').getAttribute('aria-invalid')).to.equal('true');
    // editing again clears the message
    await form.locator('[name=token]').fill('reports-token-abcdefghij');
    expect(await msg.textContent()).to.equal('');
    expect(await form.locator('[name=token]').getAttribute('aria-invalid')).to.equal(null);
    await form.locator('button[type=submit]').click();
    await form.locator('[data-msg]:has-text("Saved")').waitFor();
    expect(await form.locator('[name=url]').inputValue()).to.equal('https://elsewhere.example.test/in');
    expect(await source('url')).to.include('saved here');
    // the environment's value cannot be changed through the API either
    const locked = await request(svc.url).patch('/api/plugins/reports/settings').set('Authorization', adminAuth()).send({ region: 'eu' }).expect(409);
    expect(locked.body.error.details).to.deep.equal([{ field: 'region', message: 'is set in the environment (SERVICE_PLUGIN_REPORTS_REGION)' }]);
    expectNoProblems(browser);
  });

  it('says the rule of user and group names, the server rule, in the browser', async function () {
    await page.goto(`${svc.origin}/admin/users`);
    await page.waitForSelector('[data-users] tr[data-username="ada"]');
    await page.click('[data-new-user]');
    const form = page.locator('[data-user-form]');
    const username = form.locator('[name=username]');
    expect(await username.getAttribute('title')).to.equal(USERNAME_RULE);
    await username.fill('bad name!');
    await form.locator('button[type=submit]').click();
    expect(await username.evaluate((el: HTMLInputElement) => el.validationMessage)).to.equal(USERNAME_RULE);
    expect(await msgOf('[data-user-form]').textContent()).to.equal(USERNAME_RULE);
    // typing again clears it; a valid name is accepted
    await username.fill('good.name@x');
    expect(await msgOf('[data-user-form]').textContent()).to.equal('');
    expect(await username.evaluate((el: HTMLInputElement) => el.validity.valid)).to.equal(true);
    // saved without a password, with no single sign-on configured: the page says nobody can sign in with it yet
    await form.locator('button[type=submit]').click();
    await page.waitForSelector('[data-users] tr[data-username="good.name@x"]');
    const saved = page.locator('[data-list-msg]');
    expect(await saved.textContent()).to.match(
      /^Saved, but good\.name@x has no password and no single sign-on provider is configured: they cannot sign in until a password is set\. Edit the user to give them one\.$/,
    );
    expect(await saved.getAttribute('class')).to.include('error');

    // the browser's patterns and the server's rules agree
    const samples = ['ok', 'a.b_c@d-e', 'bad name', 'x'.repeat(64), 'x'.repeat(65), '-lead', '_lead', 'ünï', 'semi;colon', ''];
    await page.click('[data-new-user]');
    for (const s of samples.filter(Boolean)) {
      await username.fill(s);
      expect(await username.evaluate((el: HTMLInputElement) => !el.validity.patternMismatch), `username ${s}`).to.equal(USERNAME.test(s));
    }
    await form.locator('[data-cancel]').click();

    await page.goto(`${svc.origin}/admin/groups`);
    const group = page.locator('[data-new-group] [name=name]');
    await page.waitForSelector('[data-group-list] button');
    expect(await group.getAttribute('title')).to.equal(GROUP_RULE);
    for (const s of samples.filter(Boolean)) {
      await group.fill(s);
      expect(await group.evaluate((el: HTMLInputElement) => !el.validity.patternMismatch), `group ${s}`).to.equal(GROUP_NAME.test(s));
    }
    await group.fill('-ops');
    await page.click('[data-new-group] button[type=submit]');
    expect(await group.evaluate((el: HTMLInputElement) => el.validationMessage)).to.equal(GROUP_RULE);
    expect(await msgOf('[data-new-group]').textContent()).to.equal(GROUP_RULE);
    expect((await request(svc.url).get('/api/groups/-ops').set('Authorization', adminAuth())).status).to.not.equal(200);

    // success, then the next edit clears it
    await group.fill('ops');
    await page.click('[data-new-group] button[type=submit]');
    await page.waitForSelector('[data-new-group] [data-msg]:has-text("Created ops.")');
    await group.type('2');
    expect(await msgOf('[data-new-group]').textContent()).to.equal('');
    expectNoProblems(browser);
  });

  it('clears a server error of the user form when the input changes', async function () {
    await page.goto(`${svc.origin}/admin/users`);
    await page.waitForSelector('[data-users] tr[data-username="ada"]');
    await page.click('[data-new-user]');
    const form = page.locator('[data-user-form]');
    await form.locator('[name=username]').fill('ada');
    await form.locator('button[type=submit]').click();
    await page.waitForSelector('[data-user-form] [data-msg].error');
    expect(await msgOf('[data-user-form]').textContent()).to.match(/ada|exists|taken/i);
    await form.locator('[name=display_name]').fill('Another Ada');
    expect(await msgOf('[data-user-form]').textContent()).to.equal('');
    await form.locator('[data-cancel]').click();
  });

  it('shows permissions with their descriptions; what a wildcard or a group covers shows as granted', async function () {
    await page.goto(`${svc.origin}/admin/groups`);
    await page.click('[data-group-list] button[data-group="INT_ADMIN"]');
    const box = (id: string) => page.locator(`[data-permission-checks] input[value="${id}"]`);
    const label = (id: string) => page.locator(`[data-permission-checks] label:has(input[value="${id}"])`);
    await box('feature:admin.users').waitFor();
    expect(await box('feature:*').isChecked()).to.equal(true);
    expect(await box('feature:admin.users').isChecked()).to.equal(true);
    expect(await box('feature:admin.users').isDisabled()).to.equal(true);
    expect(await label('feature:admin.users').textContent())
      .to.include('manage users and their keys')
      .and.include('via feature:*');
    // unticking the wildcard frees what it covered; ticking it again covers them again
    await box('feature:*').uncheck();
    expect(await box('feature:admin.users').isDisabled()).to.equal(false);
    expect(await box('feature:admin.users').isChecked()).to.equal(false);
    await box('feature:*').check();
    expect(await box('feature:admin.users').isDisabled()).to.equal(true);
    // saving keeps the wildcard and copies nothing it covers
    const before = (await request(svc.url).get('/api/groups/INT_ADMIN').set('Authorization', adminAuth()).expect(200)).body.permissions;
    await page.fill('[data-group-form] [name=description]', 'administrators of everything');
    await page.click('[data-group-form] button[type=submit]');
    await page.waitForSelector('[data-group-form] [data-msg]:has-text("Saved")');
    const after = await request(svc.url).get('/api/groups/INT_ADMIN').set('Authorization', adminAuth()).expect(200);
    expect(after.body.permissions).to.have.members(before);

    // the user editor: the groups' grants show as granted, with the group named
    await page.goto(`${svc.origin}/admin/users`);
    await page.click('[data-users] tr[data-username="ada"] button:has-text("Edit")');
    const extra = (id: string) => page.locator(`[data-extra-permissions] input[value="${id}"]`);
    await extra('feature:admin.users').waitFor();
    expect(await extra('feature:admin.users').isDisabled()).to.equal(true);
    expect(await page.locator('[data-extra-permissions] label:has(input[value="feature:admin.users"])').textContent())
      .to.include('via group INT_ADMIN (feature:*)')
      .and.include('manage users and their keys');
    expect(await extra('socket:mounts:repair').isChecked()).to.equal(false);
    await page.uncheck('[data-group-checks] input[value=INT_ADMIN]');
    expect(await extra('feature:admin.users').isDisabled()).to.equal(false);
    expect(await extra('feature:admin.users').isChecked()).to.equal(false);
    await page.click('[data-user-form] [data-cancel]');

    // the access view (scopes of a new key): my permissions, described
    await page.goto(`${svc.origin}/settings`);
    const scope = page.locator('[data-scope-list] label:has(input[value="api:read"])');
    await scope.waitFor();
    expect(await scope.textContent()).to.include('read through the API');
    expectNoProblems(browser);
  });

  it('labels the authentication settings for people and names the mapping that is not JSON', async function () {
    await page.goto(`${svc.origin}/admin/authentication`);
    const auth = page.locator('[data-auth-settings]');
    await auth.locator('[name=ldap_bind_dn]').waitFor();
    const labelText = (name: string) => auth.locator(`label[data-field="${name}"]`).evaluate((el) => el.firstChild?.textContent ?? '');
    expect(await labelText('ldap_bind_dn')).to.equal('LDAP bind DN');
    expect(await labelText('oidc_client_id')).to.equal('OIDC client ID');
    expect(await labelText('ldap_group_mapping')).to.equal('LDAP group mapping');
    const labels = await auth.locator('label[data-field]').evaluateAll((els) => els.map((el) => el.firstChild?.textContent ?? ''));
    for (const l of labels) expect(l, l).not.to.match(/_/);

    const msg = auth.locator('[data-msg]');
    await auth.locator('button[type=submit]').click();
    await auth.locator('[data-msg]:has-text("Nothing changed.")').waitFor();
    await auth.locator('[name=ldap_group_mapping]').fill('{"cn=devs": [INT_USER]}');
    expect(await msg.textContent()).to.equal('');
    await auth.locator('button[type=submit]').click();
    expect(await msg.textContent()).to.match(/^LDAP group mapping is not valid JSON: .+/);
    expect(await auth.locator('[name=ldap_group_mapping]').getAttribute('aria-invalid')).to.equal('true');
    await auth.locator('[name=ldap_group_mapping]').fill('');

    // the server's refusal under the same labels
    await auth.locator('[name=ldap_url]').fill('http://not-ldap.example');
    await auth.locator('button[type=submit]').click();
    await auth.locator('[data-msg].error').waitFor();
    expect(await msg.textContent()).to.match(/^LDAP URL: /);
    expect(await auth.locator('[name=ldap_url]').getAttribute('aria-invalid')).to.equal('true');
    expectNoProblems(browser);
  });

  it('shows that a socket provider is unavailable, and why only to those who administer a host service', async function () {
    // the reason names the daemon's socket: an administrator without a socket permission reads that it is not available
    const list = await request(svc.url).get('/api/socket/providers').expect(200);
    expect(list.body.providers[0]).to.include({ name: 'container', available: false, reason: 'not available' });
    expect(list.body.host_facts_hidden).to.equal(true);
    await page.goto(`${svc.origin}/`);
    const provider = page.locator('[data-providers] [data-provider="container"]');
    await provider.waitFor();
    expect(await provider.locator('.pill').textContent()).to.equal('container unavailable');
    expect(await provider.locator('.reason').textContent()).to.equal('not available');
    expect(await provider.locator('[data-reason-hidden]').textContent()).to.equal('why is shown to a superadmin or a holder of a socket permission');
    // the host services page says the same
    await page.goto(`${svc.origin}/admin/hosts`);
    const listed = page.locator('[data-providers] [data-provider="container"]');
    await listed.waitFor();
    expect(await listed.locator('[data-reason]').textContent()).to.equal('not available');
    expect(await listed.locator('[data-reason-hidden]').textContent()).to.equal('why is shown to a superadmin or a holder of a socket permission');
    expectNoProblems(browser);
  });
});
