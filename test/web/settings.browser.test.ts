import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import type { Page } from 'playwright-core';
import { adminAuth, ADMIN } from '../support/service.js';
import { createUser } from '../auth/helpers.js';
import { expectNoProblems, openBrowser, signIn, startWebService, type TestBrowser, type WebService, forgetSession } from './helpers.js';

/** A plugin folder for the plugins page: loads, does nothing. */
function helloPlugin(dir: string): void {
  const folder = path.join(dir, 'hello');
  fs.mkdirSync(folder, { recursive: true });
  const manifest = { id: 'hello', name: 'Hello', version: '1.2.3', description: 'says hello', entry: 'index.mjs', permissions: { subscribe: [], emit: [] } };
  fs.writeFileSync(path.join(folder, 'plugin.json'), JSON.stringify(manifest));
  fs.writeFileSync(path.join(folder, 'index.mjs'), 'export async function setup() {}\n');
}

/** In Chromium: API keys from the account page, administration pages, the API docs. */
describe('browser: account, administration and API docs', function () {
  this.timeout(60_000);
  let svc: WebService;
  let browser: TestBrowser;
  let page: Page;
  let pluginsDir: string;
  const carol = { username: 'carol', password: 'carol-password-1' };

  before(async function () {
    pluginsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-web-plugins-'));
    helloPlugin(pluginsDir);
    [svc, browser] = await Promise.all([startWebService({ SERVICE_PLUGINS_DIR: pluginsDir, SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' }), openBrowser()]);
    await createUser(svc.url, { ...carol, groups: ['INT_USER'] });
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: svc.origin });
    page = await browser.newPage();
  });
  after(async function () {
    await browser?.close();
    await svc?.destroy();
    if (pluginsDir) fs.rmSync(pluginsDir, { recursive: true, force: true });
  });

  it('creates an API key in settings, uses it with the API, revokes it', async function () {
    await signIn(page, svc.origin, carol.username, carol.password, '/settings');
    // my session is listed, marked as this browser
    await page.waitForSelector('[data-sessions] tbody tr:has-text("this browser")');

    await page.fill('[data-key-form] [name=label]', 'deploy script');
    await page.check('[data-scope-list] input[value="api:read"]');
    await page.selectOption('[data-key-form] [name=expires]', '7');
    await page.click('[data-key-form] button[type=submit]');
    await page.waitForSelector('[data-new-token]:not([hidden])');
    const token = await page.inputValue('[data-token-value]');
    expect(token.length).to.be.greaterThan(40);
    await page.click('[data-copy]');
    await page.waitForFunction(() => document.querySelector('[data-copy]')?.textContent === 'Copied');
    expect(await page.evaluate(() => navigator.clipboard.readText())).to.equal(token);

    const row = page.locator('[data-keys] tbody tr[data-label="deploy script"]');
    await row.waitFor();
    expect(await row.textContent())
      .to.include('api:read')
      .and.not.include(token);

    // the key works, within its scope
    const me = await request(svc.url).get('/api/me').set('X-API-Key', token).expect(200);
    expect(me.body).to.include({ username: carol.username, method: 'api_key' });
    await request(svc.url).get('/api/notifications').set('Authorization', `Bearer ${token}`).expect(200);
    await request(svc.url).get('/api/users').set('X-API-Key', token).expect(403);

    // revoke asks once more in place, then the key is gone
    await row.locator('[data-revoke]').click();
    expect(await row.locator('[data-revoke]').textContent()).to.equal('Confirm revoke');
    await row.locator('[data-revoke]').click();
    await row.waitFor({ state: 'detached' });
    await request(svc.url).get('/api/me').set('X-API-Key', token).expect(401);
    expectNoProblems(browser);
  });

  it('lets a superadmin set and clear the system key and change provider settings', async function () {
    await forgetSession(browser);
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password, '/admin/integrations');
    const section = page.locator('[data-system-key]');
    await section.locator('[data-state]:has-text("not set")').waitFor();
    await section.locator('[data-generate]').click();
    const key = await section.locator('[name=key]').inputValue();
    expect(key.length).to.be.greaterThanOrEqual(32);
    await section.locator('button[type=submit]').click();
    await section.locator('[data-state]:has-text("configured")').waitFor();
    const sys = await request(svc.url).get('/api/me').set('X-API-Key', key).expect(200);
    expect(sys.body.is_system).to.equal(true);
    await section.locator('[data-clear]').click();
    await section.locator('[data-clear]').click();
    await section.locator('[data-state]:has-text("not set")').waitFor();
    await request(svc.url).get('/api/me').set('X-API-Key', key).expect(401);

    // provider settings: change one field, the rest stays
    await page.click('.admin-nav a[href="/admin/authentication"]');
    await page.waitForURL(`${svc.origin}/admin/authentication`);
    const auth = page.locator('[data-auth-settings]');
    await auth.locator('[name=oidc_label]').fill('Company SSO');
    await auth.locator('button[type=submit]').click();
    await auth.locator('[data-msg]:has-text("Saved")').waitFor();
    const view = await request(svc.url).get('/api/settings/auth').set('Authorization', adminAuth()).expect(200);
    expect(view.body.settings.oidc_label).to.include({ value: 'Company SSO', source: 'store' });
    expect(view.body.settings.auth_providers.value).to.deep.equal(['local']);
    expectNoProblems(browser);
  });

  it('administers users, groups and plugins', async function () {
    // users: create, then edit
    await page.goto(`${svc.origin}/admin/users`);
    await page.waitForSelector('[data-users] tr[data-username="admin"]');
    await page.click('[data-new-user]');
    const form = page.locator('[data-user-form]');
    await form.locator('[name=username]').fill('pete');
    await form.locator('[name=display_name]').fill('Pete Ops');
    await form.locator('[name=password]').fill('pete-password-1');
    await form.locator('button[type=submit]').click();
    const pete = page.locator('[data-users] tr[data-username="pete"]');
    await pete.waitFor();
    expect(await pete.textContent())
      .to.include('Pete Ops')
      .and.include('INT_VIEWER')
      .and.include('local');
    await pete.locator('button:has-text("Edit")').click();
    await form.locator('input[name=groups][value=INT_USER]').check();
    await form.locator('button[type=submit]').click();
    await page.waitForFunction(() => document.querySelector('[data-users] tr[data-username="pete"]')?.textContent?.includes('INT_USER'));

    // groups: create one, grant a permission from the catalog, add a member
    await page.goto(`${svc.origin}/admin/groups`);
    await page.fill('[data-new-group] [name=name]', 'ops');
    await page.click('[data-new-group] button[type=submit]');
    await page.waitForFunction(() => document.querySelector('[data-group-title]')?.textContent === 'ops');
    await page.check('[data-permission-checks] input[value="feature:notifications.send"]');
    await page.click('[data-group-form] button[type=submit]');
    await page.waitForSelector('[data-group-form] [data-msg]:has-text("Saved")');
    await page.selectOption('[data-user-options]', { label: 'pete' });
    await page.click('[data-add-member] button[type=submit]');
    await page.waitForSelector('[data-members] li[data-member="pete"]');
    const group = await request(svc.url).get('/api/groups/ops').set('Authorization', adminAuth()).expect(200);
    expect(group.body).to.deep.include({ permissions: ['feature:notifications.send'], members: ['pete'] });

    // plugins: state, disable, enable
    await page.goto(`${svc.origin}/admin/plugins`);
    const hello = page.locator('[data-plugins] tr[data-plugin="hello"]');
    await hello.locator('[data-state="loaded"]').waitFor();
    expect(await hello.textContent())
      .to.include('Hello')
      .and.include('1.2.3');
    await hello.locator('[data-toggle]').click();
    await hello.locator('[data-state="disabled"]').waitFor();
    await hello.locator('[data-toggle]:has-text("Enable")').click();
    await hello.locator('[data-state="loaded"]').waitFor();
    expectNoProblems(browser);
  });

  it("lists, issues and revokes a user's keys and web sessions from the users page", async function () {
    const dora = { username: 'dora', password: 'dora-password-1' };
    await createUser(svc.url, { ...dora, groups: ['INT_VIEWER'] });
    const session = (await request(svc.url).post('/api/auth/login').send(dora).expect(200)).body;
    await forgetSession(browser);
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password, '/admin/users');
    await page.click('[data-users] tr[data-username="dora"] [data-user-keys-of="dora"]');
    const panel = page.locator('[data-user-keys]');
    await panel.locator('[data-user-keys-title]:has-text("API keys of dora")').waitFor();
    await panel.locator('[data-keys] tbody td:has-text("No API keys yet.")').waitFor();
    const sessionRow = panel.locator('[data-sessions] tbody tr[data-key-id]');
    expect(await sessionRow.count()).to.equal(1);

    // a scope the owner does not hold is refused, named
    await panel.locator('[name=label]').fill('dora report job');
    await panel.locator('[data-scope-list] input[value="feature:admin.users"]').check();
    await panel.locator('[data-key-form] button[type=submit]').click();
    await panel.locator('[data-key-form] [data-msg].error').waitFor();
    expect(await panel.locator('[data-key-form] [data-msg]').textContent()).to.include('dora does not hold feature:admin.users');

    // within the owner's permissions: issued, its token shown once, listed without it
    await panel.locator('[data-scope-list] input[value="feature:admin.users"]').uncheck();
    await panel.locator('[data-scope-list] input[value="api:read"]').check();
    await panel.locator('[data-key-form] button[type=submit]').click();
    await panel.locator('[data-new-token]:not([hidden])').waitFor();
    const token = await panel.locator('[data-token-value]').inputValue();
    const row = panel.locator('[data-keys] tbody tr[data-label="dora report job"]');
    await row.waitFor();
    expect(await row.textContent())
      .to.include('api:read')
      .and.not.include(token);
    const me = await request(svc.url).get('/api/me').set('X-API-Key', token).expect(200);
    expect(me.body).to.include({ username: 'dora', method: 'api_key' });

    // while a key is being created, the panel keeps its owner: its token is never shown under another name
    await page.route('**/api/users/*/api-keys', async (route) => {
      if (route.request().method() !== 'POST') return route.continue();
      await new Promise((r) => setTimeout(r, 400));
      await route.continue();
    });
    await panel.locator('[name=label]').fill('dora slow job');
    await panel.locator('[data-key-form] button[type=submit]').click();
    await page.click('[data-users] tr[data-username="carol"] [data-user-keys-of="carol"]');
    expect(await page.locator('[data-list-msg]').textContent()).to.equal('Wait for the key of dora to be created.');
    await panel.locator('[data-keys] tbody tr[data-label="dora slow job"]').waitFor();
    expect(await panel.locator('[data-user-keys-title]').textContent()).to.equal('API keys of dora');
    expect(await panel.locator('[data-token-value]').inputValue()).to.not.equal(token);
    await page.unroute('**/api/users/*/api-keys');

    // another user's panel starts empty: no token of dora's left on screen
    await page.click('[data-users] tr[data-username="carol"] [data-user-keys-of="carol"]');
    await panel.locator('[data-user-keys-title]:has-text("API keys of carol")').waitFor();
    expect(await panel.locator('[data-new-token]').isHidden()).to.equal(true);
    expect(await panel.locator('[data-token-value]').inputValue()).to.equal('');
    await page.click('[data-users] tr[data-username="dora"] [data-user-keys-of="dora"]');
    await panel.locator('[data-user-keys-title]:has-text("API keys of dora")').waitFor();

    // revoking the key and the web session ends both at once
    await row.locator('[data-revoke]').click();
    await row.locator('[data-revoke]:has-text("Confirm revoke")').click();
    await row.waitFor({ state: 'detached' });
    await request(svc.url).get('/api/me').set('X-API-Key', token).expect(401);
    await request(svc.url).get('/api/me').set('Authorization', `Bearer ${session.token}`).expect(200);
    await sessionRow.locator('[data-revoke]').click();
    await sessionRow.locator('[data-revoke]:has-text("Confirm")').click();
    await panel.locator('[data-sessions] tbody td:has-text("No web sessions.")').waitFor();
    await request(svc.url).get('/api/me').set('Authorization', `Bearer ${session.token}`).expect(401);
    const trail = await request(svc.url).get('/api/audit?action=key.revoked').set('Authorization', adminAuth()).expect(200);
    const revoked = trail.body.events.filter((e: { details: { owner?: string } }) => e.details.owner === 'dora');
    expect(revoked.map((e: { actor: { username: string } }) => e.actor.username)).to.deep.equal(['admin', 'admin']);

    await panel.locator('[data-close-keys]').click();
    expect(await panel.isHidden()).to.equal(true);
    expectNoProblems(browser);
  });

  it('/docs: Authorize with an API key, then "Try it out" on /api/me answers 200', async function () {
    const created = await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).send({ label: 'docs' }).expect(201);
    await forgetSession(browser); // the key, not a session, must authenticate the call
    const docs = await browser.newPage();
    await docs.goto(`${svc.origin}/docs`);
    await docs.waitForSelector('.swagger-ui .btn.authorize');
    await docs.click('.swagger-ui .btn.authorize');
    const dialog = docs.locator('.swagger-ui .dialog-ux');
    const apiKeyBlock = dialog.locator('.auth-container').filter({ hasText: 'ApiKeyAuth' });
    await apiKeyBlock.locator('input').fill(created.body.token);
    await apiKeyBlock.locator('button.authorize').click();
    await dialog.locator('button.close-modal').click();

    const op = docs.locator('#operations-me-getMe');
    await op.locator('.opblock-summary').click();
    await op.locator('.try-out__btn').click();
    await op.locator('.execute').click();
    const status = op.locator('.live-responses-table .response .response-col_status').first();
    await status.waitFor({ timeout: 10_000 });
    expect((await status.textContent())?.trim()).to.equal('200');
    expect(await op.locator('.live-responses-table .response .response-col_description').first().textContent())
      .to.include('"username": "admin"')
      .and.include('"method": "api_key"');
    expectNoProblems(browser);
    await docs.close();
  });
});
