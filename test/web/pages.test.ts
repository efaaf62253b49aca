import { expect } from 'chai';
import request from 'supertest';
import { adminAuth, basic, startService, type TestService, promoteToSuperadmin } from '../support/service.js';
import { createUser } from '../auth/helpers.js';
import { collectEndpoints } from '../../src/http/api.js';

/** Server side of the web UI: page access, security headers, static assets, /docs. */
describe('web pages: access, headers, assets', function () {
  let svc: TestService;
  const viewer = { username: 'vera', password: 'vera-password-1' };
  const user = { username: 'uma', password: 'uma-password-1' };

  /** Runs `check` while INT_VIEWER (vera's group) also holds `permission`, then takes it back. */
  async function withViewerGranted(permission: string, check: () => Promise<void>): Promise<void> {
    const grant = (permissions: string[]) =>
      request(svc.url).patch('/api/groups/INT_VIEWER').set('Authorization', adminAuth()).send({ permissions }).expect(200);
    await grant(['feature:dashboard.view', 'api:read', permission]);
    try {
      await check();
    } finally {
      await grant(['feature:dashboard.view', 'api:read']);
    }
  }

  /** A page's administration navigation, and the links of a navigation in order. */
  const adminNavOf = (page: string) => /<nav class="admin-nav"[^>]*>(.*?)<\/nav>/s.exec(page)?.[1] ?? '';
  const linksOf = (nav: string) => [...nav.matchAll(/href="([^"]+)"/g)].map((m) => m[1]);

  before(async function () {
    svc = await startService();
    await createUser(svc.url, { ...viewer, groups: ['INT_VIEWER'] });
    await createUser(svc.url, { ...user, groups: ['INT_USER'] });
  });
  after(async function () {
    await svc?.destroy();
  });

  const pages = ['/', '/settings', '/admin', '/admin/users', '/admin/groups', '/admin/authentication', '/admin/integrations', '/admin/plugins'];

  it('sends an unauthenticated page request to /login with next', async function () {
    for (const path of pages) {
      const res = await request(svc.url)
        .get(path)
        .query(path === '/' ? {} : { tab: '1' })
        .expect(302);
      const target = new URL(res.headers.location, svc.url);
      expect(target.pathname, path).to.equal('/login');
      expect(target.searchParams.get('next'), path).to.equal(path === '/' ? '/' : `${path}?tab=1`);
    }
  });

  it('enforces page permissions on the server: 403 page for a viewer on admin pages', async function () {
    const auth = basic(viewer.username, viewer.password);
    for (const path of ['/admin', '/admin/users', '/admin/groups', '/admin/authentication', '/admin/integrations', '/admin/plugins']) {
      const res = await request(svc.url).get(path).set('Authorization', auth).expect(403);
      expect(res.headers['content-type']).to.match(/^text\/html/);
      expect(res.text).to.include('Access denied').and.include('feature:admin.');
    }
    for (const path of ['/', '/settings']) await request(svc.url).get(path).set('Authorization', auth).expect(200);
  });

  it('opens the account page for every signed-in person, whatever their groups, and starts there one who may not see the dashboard', async function () {
    const bare = { username: 'no-groups-pages', password: 'no-groups-password-1' };
    await createUser(svc.url, { ...bare, groups: [] });
    const auth = basic(bare.username, bare.password);
    const account = await request(svc.url).get('/settings').set('Authorization', auth).expect(200);
    expect(account.text).to.include('<h1>Account</h1>').and.include('data-key-form').and.include('data-security');
    expect(account.text).not.to.include('data-auth-settings').and.not.include('data-webhook-secret').and.not.include('data-moved-note');
    // no dashboard to read notifications on: no bell that leads nowhere (live toasts still come)
    expect(account.text).not.to.include('data-bell');
    // the dashboard is not theirs: their start page is the account
    const start = await request(svc.url).get('/').set('Authorization', auth).expect(302);
    expect(start.headers.location).to.equal('/settings');
  });

  it('opens the administration at the first of its pages one may open', async function () {
    const admin = await request(svc.url).get('/admin').set('Authorization', adminAuth()).expect(302);
    expect(admin.headers.location).to.equal('/admin/users');
    expect(admin.headers['cache-control']).to.equal('no-store');
    await withViewerGranted('feature:admin.settings', async () => {
      const settingsOnly = await request(svc.url).get('/admin').set('Authorization', basic(viewer.username, viewer.password)).expect(302);
      expect(settingsOnly.headers.location).to.equal('/admin/authentication');
      // the administration pages it may open beside the page, and nothing else
      const page = await request(svc.url).get('/admin/integrations').set('Authorization', basic(viewer.username, viewer.password)).expect(200);
      const adminNav = adminNavOf(page.text);
      expect(linksOf(adminNav)).to.deep.equal(['/admin/authentication', '/admin/integrations']);
      expect(adminNav).to.include('<a href="/admin/integrations" aria-current="page">');
      expect(page.text).to.include('<a href="/admin" aria-current="true">Administration</a>');
    });
  });

  it('shows only the pages an identity may open in the navigation', async function () {
    const nav = async (auth: string) => {
      const res = await request(svc.url).get('/').set('Authorization', auth).expect(200);
      return linksOf(/<nav aria-label="Main">(.*?)<\/nav>/s.exec(res.text)?.[1] ?? '');
    };
    expect(await nav(basic(viewer.username, viewer.password))).to.deep.equal(['/', '/settings', '/docs']);
    // the administration pages are one link, to the first of them
    expect(await nav(adminAuth())).to.deep.equal(['/', '/settings', '/admin', '/docs']);
    const users = await request(svc.url).get('/admin/users').set('Authorization', adminAuth()).expect(200);
    expect(linksOf(adminNavOf(users.text))).to.deep.equal([
      '/admin/users',
      '/admin/groups',
      '/admin/authentication',
      '/admin/integrations',
      '/admin/plugins',
      '/admin/audit',
      '/admin/hosts',
    ]);
  });

  it('opens a page through its route:<ui_route> permission, and says once which permission its data needs', async function () {
    const auth = basic(viewer.username, viewer.password);
    await withViewerGranted('route:/admin/plugins', async () => {
      const page = await request(svc.url).get('/admin/plugins').set('Authorization', auth).expect(200);
      // the page opens; its data still needs the API permission
      await request(svc.url).get('/api/plugins').set('Authorization', auth).expect(403);
      // so it says that once, with no panels (and no module) that would each answer 403
      const notice = /<p class="note" data-without-data>(.*?)<\/p>/s.exec(page.text)?.[1];
      expect(notice, page.text).to.be.a('string');
      expect(notice).to.include('<code>route:/admin/plugins</code>').and.include('<code>feature:admin.plugins</code>');
      expect(page.text).not.to.include('src="/static/plugins.js"');
      expect(page.text).to.include('<a href="/admin/plugins" aria-current="page">');
    });
    // with the data's permission the page is whole
    await withViewerGranted('feature:admin.plugins', async () => {
      const page = await request(svc.url).get('/admin/plugins').set('Authorization', auth).expect(200);
      expect(page.text).to.include('src="/static/plugins.js"').and.not.include('data-without-data');
    });
  });

  it("lists, on /admin's 403 page, each administration page with the permissions that open it", async function () {
    const refused = await request(svc.url).get('/admin').set('Authorization', basic(viewer.username, viewer.password)).expect(403);
    const items = [...refused.text.matchAll(/<li>(.*?)<\/li>/gs)].map((m) => m[1]!);
    expect(items).to.have.length(7);
    expect(items).to.include('Users: <code>feature:admin.users</code> or <code>route:/admin/users</code>');
    expect(items.find((i) => i.startsWith('Host services: '))).to.include('<code>socket:dns:read</code>, ');
  });

  it('gates the Audit page by feature:admin.audit or route:/admin/audit (its data by the API)', async function () {
    const viewerAuth = basic(viewer.username, viewer.password);
    const anonymous = await request(svc.url).get('/admin/audit').expect(302);
    expect(new URL(anonymous.headers.location, svc.url).searchParams.get('next')).to.equal('/admin/audit');
    const refused = await request(svc.url).get('/admin/audit').set('Authorization', viewerAuth).expect(403);
    expect(refused.text).to.include('Access denied').and.include('feature:admin.audit').and.include('route:/admin/audit');
    expect(refused.text).not.to.include('data-events');
    const admin = await request(svc.url).get('/admin/audit').set('Authorization', adminAuth()).expect(200);
    expect(admin.text)
      .to.include('data-events')
      .and.include('src="/static/audit.js"')
      .and.include('<option value="user.">')
      .and.include('<option>request.denied</option>');
    expect(admin.text).to.include('<a href="/admin/audit" aria-current="page">Audit</a>');
    const viewerHome = await request(svc.url).get('/').set('Authorization', viewerAuth).expect(200);
    expect(viewerHome.text).not.to.include('href="/admin/audit"');
    await withViewerGranted('route:/admin/audit', async () => {
      await request(svc.url).get('/admin/audit').set('Authorization', viewerAuth).expect(200);
      // the page opens; the trail still needs feature:admin.audit
      await request(svc.url).get('/api/audit').set('Authorization', viewerAuth).expect(403);
    });
  });

  it('renders the admin-only sections only for those who may use them', async function () {
    const userDash = await request(svc.url).get('/').set('Authorization', basic(user.username, user.password)).expect(200);
    expect(userDash.text).to.include('status-title'); // INT_USER has feature:dashboard.admin_sections
    expect(userDash.text).not.to.include('data-send-form');
    const viewerDash = await request(svc.url).get('/').set('Authorization', basic(viewer.username, viewer.password)).expect(200);
    expect(viewerDash.text).not.to.include('status-title');
    // the account page is one's own; the service's settings are on the administration pages
    const adminAccount = await request(svc.url).get('/settings').set('Authorization', adminAuth()).expect(200);
    expect(adminAccount.text).to.include('data-key-form').and.include('data-moved-note');
    expect(adminAccount.text).not.to.include('data-auth-settings').and.not.include('data-webhook-secret').and.not.include('data-system-key');
    const authentication = await request(svc.url).get('/admin/authentication').set('Authorization', adminAuth()).expect(200);
    expect(authentication.text).to.include('data-auth-settings').and.not.include('data-webhook-secret');
    // the system key hands out the host: its panel is for superadmins (and the system key) only
    const adminIntegrations = await request(svc.url).get('/admin/integrations').set('Authorization', adminAuth()).expect(200);
    expect(adminIntegrations.text).to.include('data-webhook-secret').and.include('data-webhook-secret-gitlab');
    expect(adminIntegrations.text).not.to.include('data-system-key');
    const root = (
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', adminAuth())
        .send({ username: 'root-pages', password: 'root-pages-password', groups: ['INT_ADMIN'] })
        .expect(201)
    ).body;
    await promoteToSuperadmin(svc, root.id);
    const rootIntegrations = await request(svc.url).get('/admin/integrations').set('Authorization', basic('root-pages', 'root-pages-password')).expect(200);
    expect(rootIntegrations.text).to.include('data-system-key').and.include('data-webhook-secret');
    const rootAccount = await request(svc.url).get('/settings').set('Authorization', basic('root-pages', 'root-pages-password')).expect(200);
    expect(rootAccount.text).not.to.include('data-system-key');
    const viewerSettings = await request(svc.url).get('/settings').set('Authorization', basic(viewer.username, viewer.password)).expect(200);
    expect(viewerSettings.text).not.to.include('data-system-key');
    expect(viewerSettings.text).to.include('data-key-form');
  });

  it('sends the security headers: CSP without inline script, frame-ancestors none, no-referrer, nosniff', async function () {
    const res = await request(svc.url).get('/').set('Authorization', adminAuth()).expect(200);
    const csp = res.headers['content-security-policy'];
    expect(csp).to.include("script-src 'self'").and.include("frame-ancestors 'none'").and.include("default-src 'none'");
    expect(csp).not.to.include('unsafe-inline');
    expect(csp).not.to.include('unsafe-eval');
    expect(res.headers['referrer-policy']).to.equal('no-referrer');
    expect(res.headers['x-content-type-options']).to.equal('nosniff');
    expect(res.headers['x-frame-options']).to.equal('DENY');
    expect(res.headers['cache-control']).to.equal('no-store');
    // every script is an external module of this origin: no inline script anywhere
    for (const m of res.text.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)) {
      expect(m[1]).to.match(/src="\/static\//);
      expect(m[2].trim()).to.equal('');
    }
    const docs = await request(svc.url).get('/docs').expect(200);
    expect(docs.headers['content-security-policy']).to.include("script-src 'self'").and.include("frame-ancestors 'none'");
    for (const m of docs.text.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)) expect(m[2].trim()).to.equal('');
    const api = await request(svc.url).get('/api/me').set('Authorization', adminAuth()).expect(200);
    expect(api.headers['content-security-policy']).to.include("frame-ancestors 'none'");
  });

  it('escapes what users control in the page', async function () {
    const evil = await createUser(svc.url, {
      username: 'eve',
      password: 'eve-password-1',
      display_name: '<img src=x onerror=alert(1)>',
      groups: ['INT_VIEWER'],
    });
    expect(evil).to.be.a('string');
    const res = await request(svc.url).get('/settings').set('Authorization', basic('eve', 'eve-password-1')).expect(200);
    expect(res.text).not.to.include('<img src=x');
    expect(res.text).to.include('&lt;img src=x onerror=alert(1)&gt;');
  });

  it('serves the assets: own modules and stylesheet, Swagger UI from the npm package', async function () {
    const css = await request(svc.url).get('/static/app.css').expect(200);
    expect(css.headers['content-type']).to.match(/^text\/css/);
    const etag = css.headers.etag;
    await request(svc.url).get('/static/app.css').set('If-None-Match', etag).expect(304);
    const js = await request(svc.url).get('/static/dashboard.js').expect(200);
    expect(js.headers['content-type']).to.match(/^text\/javascript/);
    const bundle = await request(svc.url).get('/static/swagger/swagger-ui-bundle.js').expect(200);
    expect(bundle.headers['content-type']).to.match(/javascript/);
    expect(Number(bundle.headers['content-length'] ?? bundle.text.length)).to.be.greaterThan(100_000);
    await request(svc.url).get('/static/swagger/swagger-ui.css').expect(200);
    await request(svc.url).get('/static/swagger/package.json').expect(404);
    await request(svc.url).get('/static/..%2F..%2Fpackage.json').expect(404);
    await request(svc.url).get('/static/nope.js').expect(404);
    const docs = await request(svc.url).get('/docs').expect(200);
    expect(docs.text).to.include('/static/swagger/swagger-ui-bundle.js').and.include('/static/docs.js');
    expect(docs.text).not.to.match(/https?:\/\/(?!localhost)[^"']*\.js/);
  });

  it('signs out with POST /logout (same origin only) and lands on /login', async function () {
    const agent = request.agent(svc.url);
    const origin = svc.config.publicUrl;
    await agent.post('/login').type('form').set('Origin', origin).send({ username: viewer.username, password: viewer.password }).expect(303);
    await agent.get('/').expect(200);
    await agent.post('/logout').set('Origin', 'https://evil.example').expect(403);
    await agent.get('/').expect(200);
    const out = await agent.post('/logout').set('Origin', origin).expect(303);
    expect(out.headers.location).to.equal('/login?signed_out=1');
    expect((await agent.get(out.headers.location).expect(200)).text).to.include('You are signed out.');
    await agent.get('/').expect(302);
  });

  it('mounts no /api route without a definition (so the OpenAPI document covers every one)', async function () {
    const { undocumented, endpoints } = collectEndpoints(svc.service.app);
    expect(undocumented, JSON.stringify(undocumented)).to.deep.equal([]);
    expect(endpoints.length).to.be.greaterThan(40);
  });
});
