import { expect } from 'chai';
import net from 'node:net';
import request from 'supertest';
import { startService, adminAuth, basic, ADMIN, type TestService } from '../support/service.js';
import { createUser } from '../auth/helpers.js';
import { WsClient } from '../gateway/helpers.js';

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

/**
 * A browser gets pages, the API gets its JSON error body; and the service opened at the address
 * it listens on (127.0.0.1) while its public URL names another (localhost) still signs in.
 */
describe('web: error pages and other addresses', function () {
  let svc: TestService;
  let here: string;

  before(async () => {
    svc = await startService();
    here = svc.url; // http://127.0.0.1:<port>; the public URL is http://localhost:8080
  });
  after(() => svc.destroy());

  it('an unknown page is a 404 page in the site layout; the API keeps JSON', async () => {
    const page = await request(here).get('/nope').set('Accept', BROWSER).expect(404);
    expect(page.headers['content-type']).to.match(/^text\/html/);
    expect(page.text).to.include('<link rel="stylesheet" href="/static/app.css">').and.include('Page not found').and.include('<code>/nope</code>');
    expect(page.text).to.match(/request id <code>[0-9a-f-]{36}<\/code>/);
    expect(page.headers['content-security-policy']).to.include("script-src 'self'");
    const api = await request(here).get('/api/nope').set('Accept', BROWSER).expect(404);
    expect(api.body.error.code).to.equal('not_found');
    // a client that asks for JSON (or anything) outside /api still gets the error body
    expect((await request(here).get('/nope').expect(404)).body.error.code).to.equal('not_found');
  });

  it('someone signed in keeps the top bar on an error page; a card for anyone else', async () => {
    const agent = request.agent(here);
    await agent.post('/login').type('form').set('Origin', here).send({ username: ADMIN.username, password: ADMIN.password }).expect(303);
    const page = await agent.get('/no/such/page').set('Accept', BROWSER).expect(404);
    expect(page.text).to.include('<header class="topbar">').and.include('href="/admin"').and.include('data-logout').and.include('data-bell');
    expect(page.text)
      .to.include('<h1>Page not found</h1>')
      .and.include('<code>/no/such/page</code>')
      .and.match(/request id <code>[0-9a-f-]{36}<\/code>/);
    // no page of the navigation is the current one; the shared page code runs the bar
    expect(page.text).not.to.include('aria-current');
    expect(page.text).to.include('<script type="module" src="/static/error.js"></script>');
    expect(page.headers['content-security-policy']).to.include("script-src 'self'");
    // the navigation is the identity's own: a viewer sees no administration
    await createUser(here, { username: 'vic', password: 'vic-password-1', groups: ['INT_VIEWER'] });
    const viewer = await request(here).get('/nope').set('Authorization', basic('vic', 'vic-password-1')).set('Accept', BROWSER).expect(404);
    expect(viewer.text).to.include('<header class="topbar">').and.not.include('href="/admin/users"');
    const anonymous = await request(here).get('/no/such/page').set('Accept', BROWSER).expect(404);
    expect(anonymous.text).to.include('<main class="card">').and.not.include('class="topbar"');
  });

  it('a failure is a 500 page that tells nothing of the cause', async () => {
    // the settings page reads the user: make that read fail as a bug would
    const resolver = svc.service.iam.resolver;
    const original = resolver.resolve;
    resolver.resolve = async () => {
      throw new Error('secret internals');
    };
    try {
      const page = await request(here).get('/settings').set('Authorization', adminAuth()).set('Accept', BROWSER).expect(500);
      expect(page.text).to.include('Something went wrong').and.include('request id');
      expect(page.text).not.to.include('secret internals');
      expect((await request(here).get('/settings').set('Authorization', adminAuth()).expect(500)).body).to.deep.equal({
        error: { code: 'internal', message: 'internal error' },
      });
    } finally {
      resolver.resolve = original;
    }
  });

  it('escapes what the address carries', async () => {
    // sent byte for byte (an HTTP client library would percent-encode it)
    const port = new URL(here).port;
    const text = await new Promise<string>((resolve, reject) => {
      const sock = net.connect(Number(port), '127.0.0.1', () =>
        sock.end(`GET /x"><b>bold</b> HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/html\r\nConnection: close\r\n\r\n`),
      );
      let out = '';
      sock.on('data', (d) => (out += d));
      sock.on('end', () => resolve(out));
      sock.on('error', reject);
    });
    expect(text).to.match(/^HTTP\/1\.1 404/);
    expect(text).not.to.include('<b>bold');
    expect(text).to.include('&lt;b&gt;bold');
  });

  it('a cross-site form post is a 403 page that names the address to use', async () => {
    const agent = request.agent(here);
    await agent.post('/login').type('form').set('Origin', here).send({ username: ADMIN.username, password: ADMIN.password }).expect(303);
    const refused = await agent.post('/logout').set('Origin', 'https://evil.example').set('Accept', BROWSER).expect(403);
    expect(refused.headers['content-type']).to.match(/^text\/html/);
    expect(refused.text).to.include('Request refused').and.include('http://localhost:8080');
    const api = await agent.post('/api/auth/logout').set('Origin', 'https://evil.example').set('Accept', BROWSER).expect(403);
    expect(api.body.error.message).to.match(/cross-origin/);
  });

  it('signs in at the address the service listens on, and says which address single sign-on uses', async () => {
    const login = await request(here).get('/login').expect(200);
    expect(login.text)
      .to.include('You opened this page at <code>' + here + '</code>')
      .and.include('href="http://localhost:8080/login"');
    const atPublic = await request(here).get('/login').set('Host', 'localhost:8080').expect(200);
    expect(atPublic.text).not.to.include('data-address-note');

    const agent = request.agent(here);
    const signedIn = await agent.post('/login').type('form').set('Origin', here).send({ username: ADMIN.username, password: ADMIN.password }).expect(303);
    expect(signedIn.headers.location).to.equal('/');
    await agent.get('/').set('Accept', BROWSER).expect(200);
    // the page's own calls and its live connection come from this address too
    await agent.post('/api/me/api-keys').set('Origin', here).send({ label: 'from 127.0.0.1' }).expect(201);
    const cookie = (signedIn.headers['set-cookie'] as unknown as string[]).map((c) => c.split(';')[0]).join('; ');
    const ws = await WsClient.connect(svc, { headers: { Cookie: cookie }, origin: here });
    await ws.close();
    // another site is still refused, on every path
    await agent.post('/api/me/api-keys').set('Origin', 'http://127.0.0.1:1').send({ label: 'x' }).expect(403);
    // a page on a name that resolves here (DNS rebinding) sends a matching Origin and Host: refused
    const port = new URL(here).port;
    const rebound = `http://rebind.example:${port}`;
    await request(here)
      .post('/api/auth/login')
      .set('Host', `rebind.example:${port}`)
      .set('Origin', rebound)
      .send({ username: ADMIN.username, password: ADMIN.password })
      .expect(403);
    await request(here)
      .post('/login')
      .type('form')
      .set('Host', `rebind.example:${port}`)
      .set('Origin', rebound)
      .send({ username: ADMIN.username, password: ADMIN.password })
      .expect(403);
    await agent.post('/api/me/api-keys').set('Host', `rebind.example:${port}`).set('Origin', rebound).send({ label: 'x' }).expect(403);
    await request(here)
      .post('/login')
      .type('form')
      .set('Origin', 'https://evil.example')
      .send({ username: ADMIN.username, password: ADMIN.password })
      .expect(403);
  });
});
