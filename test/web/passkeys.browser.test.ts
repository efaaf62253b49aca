import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import type { CDPSession, Page } from 'playwright-core';
import { ADMIN, adminAuth, basic, startService } from '../support/service.js';
import { createUser, previousStepCode, totpCode, unusedPort } from '../auth/helpers.js';
import { capturingLogger, eventually } from '../sockets/helpers.js';
import { ARTIFACTS, expectNoProblems, openBrowser, signIn, type TestBrowser, type WebService, forgetSession } from './helpers.js';
import { measureFit } from './support.js';

const SHOTS = path.join(ARTIFACTS, 'screenshots');
const WIDTHS = [1280, 390] as const;

/**
 * A service whose public URL is http://localhost:<port>: a passkey belongs to a host name, and
 * browsers refuse an IP address as one (the other browser tests use 127.0.0.1).
 */
async function startLocalhostService(logger: ReturnType<typeof capturingLogger>['logger']): Promise<WebService> {
  let lastError: unknown;
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await unusedPort();
    const origin = `http://localhost:${port}`;
    try {
      const svc = await startService({ logger, env: { SERVICE_PORT: String(port), SERVICE_PUBLIC_URL: origin } });
      return Object.assign(svc, { origin });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
      lastError = err;
    }
  }
  throw lastError;
}

/** A credential as the DevTools protocol's virtual authenticator holds it. */
interface VirtualCredential {
  credentialId: string;
  isResidentCredential: boolean;
  rpId: string;
  privateKey: string;
  userHandle?: string;
  signCount: number;
}

/**
 * In Chromium with a virtual authenticator (DevTools protocol WebAuthn domain: CTAP2, built in,
 * resident keys, user verification): passkeys from the Security panel, passwordless sign-in,
 * the second step, the step-up dialog, a cloned key, the authenticator app, the users page and
 * the enrolment wall. Screenshots of the enrolment panel, the second step and the dialog.
 */
describe('browser: passkeys and the second factor', function () {
  this.timeout(120_000);
  let svc: WebService;
  let browser: TestBrowser;
  let page: Page;
  let cdp: CDPSession;
  let authenticatorId: string;
  const logs = capturingLogger('info');
  const paula = { username: 'paula', password: 'paula-password-1' };
  const tom = { username: 'tom', password: 'tom-password-1' };
  let paulaId: string;
  let tomId: string;

  const addAuthenticator = async (): Promise<string> =>
    (
      await cdp.send('WebAuthn.addVirtualAuthenticator', {
        options: {
          protocol: 'ctap2',
          transport: 'internal',
          hasResidentKey: true,
          hasUserVerification: true,
          isUserVerified: true,
          automaticPresenceSimulation: true,
        },
      })
    ).authenticatorId;

  /** The browser's own view of a call (with this page's cookie session). */
  const call = (method: string, url: string, body?: unknown) =>
    page.evaluate(
      async ([m, u, b]) => {
        const res = await fetch(u as string, {
          method: m as string,
          headers: b === undefined ? {} : { 'content-type': 'application/json' },
          body: b === undefined ? undefined : JSON.stringify(b),
        });
        return { status: res.status, body: res.status === 204 ? null : await res.json().catch(() => null) };
      },
      [method, url, body] as const,
    );

  /** Ages a user's web sessions past the step-up window (as 16 minutes passing would). */
  /**
   * The sessions' last verification moved out of the window, as 16 minutes passing would (the
   * identities resolved before, which carry when it was, are forgotten as time would expire them).
   */
  const ageSessions = async (userId: string) => {
    await svc.service
      .db('api_keys')
      .where({ user_id: userId, kind: 'session' })
      .update({ mfa_at: Date.now() - 16 * 60_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'user', user_id: userId });
  };

  /** Checks the page fits its width, then saves the viewport (or just `element`) as <name>-<width>.png. */
  const shoot = async (name: string, width: number, element?: string) => {
    const fit = await measureFit(page);
    expect(fit.scrollWidth, `${name} at ${width}: page ${fit.scrollWidth} px wide`).to.be.at.most(fit.innerWidth);
    expect(fit.wrappedBadges, `${name} at ${width}: badges broken over lines`).to.deep.equal([]);
    const file = path.join(SHOTS, `${name}-${width}.png`);
    // an element from the whole page, where the sticky top bar stays at the top instead of over it
    const clip = element
      ? await page.locator(element).evaluate((e) => ({
          x: e.getBoundingClientRect().x + scrollX,
          y: e.getBoundingClientRect().y + scrollY,
          width: e.getBoundingClientRect().width,
          height: e.getBoundingClientRect().height,
        }))
      : undefined;
    await page.screenshot(clip ? { path: file, fullPage: true, clip } : { path: file });
    expect(fs.statSync(file).size, file).to.be.greaterThan(5_000);
  };
  const atWidth = (width: number) => page.setViewportSize({ width, height: width < 600 ? 844 : 900 });

  before(async function () {
    [svc, browser] = await Promise.all([startLocalhostService(logs.logger), openBrowser()]);
    paulaId = await createUser(svc.url, { ...paula, display_name: 'Paula Passkey', groups: ['INT_USER'] });
    tomId = await createUser(svc.url, { ...tom, groups: ['INT_USER'] });
    page = await browser.newPage();
    cdp = await browser.context.newCDPSession(page);
    await cdp.send('WebAuthn.enable', { enableUI: false });
    authenticatorId = await addAuthenticator();
    fs.mkdirSync(SHOTS, { recursive: true });
  });
  after(async function () {
    await browser?.close();
    await svc?.destroy();
  });
  afterEach(async function () {
    await atWidth(1280);
  });

  it('registers a passkey from the Security panel; the first factor comes with ten recovery codes to download', async function () {
    await signIn(page, svc.origin, paula.username, paula.password, '/settings');
    await page.locator('[data-factors] td.empty').waitFor();
    expect(await page.textContent('[data-factors]')).to.include('No second factor yet');
    await page.fill('[data-passkey-add] input[name=label]', 'Laptop');
    const [registered] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === '/api/me/mfa/webauthn' && r.request().method() === 'POST'),
      page.click('[data-passkey-add] button[type=submit]'),
    ]);
    expect(registered.status()).to.equal(201);
    const body = await registered.json();
    expect(body).to.include({ label: 'Laptop', last_used_at: null });
    expect(body.recovery_codes).to.have.length(10);
    expect(body.keys_before_factor).to.deep.equal([]);
    expect(await page.isVisible('[data-keys-before-factor]')).to.equal(false);
    await page.locator('[data-recovery-codes] [data-codes] li').nth(9).waitFor();
    const shown = await page.$$eval('[data-codes] li', (lis) => lis.map((li) => li.textContent?.trim()));
    expect(shown).to.deep.equal(body.recovery_codes);
    await page.locator('[data-factors] tr[data-factor=webauthn]', { hasText: 'Laptop' }).waitFor();
    expect(await page.textContent('[data-factors] tr[data-factor=recovery]')).to.include('10 left');

    // the codes download as a text file (a Blob URL: nothing is sent anywhere)
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('[data-download]')]);
    const file = fs.readFileSync((await download.path())!, 'utf8');
    for (const c of body.recovery_codes) expect(file).to.include(c);

    for (const width of WIDTHS) {
      await atWidth(width);
      await shoot('security-passkey', width, '[data-security]');
    }
    const status = await call('GET', '/api/me/mfa');
    expect(status.body.webauthn.map((k: { label: string }) => k.label)).to.deep.equal(['Laptop']);
    const listed = (await request(svc.url).get('/api/users').set('Authorization', adminAuth()).expect(200)).body.users.find(
      (u: { username: string }) => u.username === 'paula',
    );
    expect(listed.mfa).to.equal(true);
    expectNoProblems(browser);
  });

  it('signs in with the passkey alone (passwordless); its answer cannot be used twice', async function () {
    await forgetSession(browser);
    let posted: string | null = null;
    const watch = (r: { url(): string; method(): string; postData(): string | null }) => {
      if (new URL(r.url()).pathname === '/api/auth/webauthn' && r.method() === 'POST') posted = r.postData();
    };
    page.on('request', watch);
    await page.goto(`${svc.origin}/login?next=%2Fsettings`);
    await page.locator('[data-passkey-signin]').waitFor();
    for (const width of WIDTHS) {
      await atWidth(width);
      await shoot('login-passkey', width);
    }
    await atWidth(1280);
    await Promise.all([page.waitForURL(`${svc.origin}/settings`), page.click('[data-passkey-signin]')]);
    page.off('request', watch);
    expect((await call('GET', '/api/me')).body.username).to.equal('paula');
    const sessions = (await call('GET', '/api/me/api-keys')).body.keys.filter((k: { kind: string }) => k.kind === 'session');
    expect(sessions.find((s: { current: boolean }) => s.current).label).to.equal('web session (webauthn)');
    // the passkey's last use shows in the panel
    await page.locator('[data-factors] tr[data-factor=webauthn] time').nth(1).waitFor();

    // the same answer again (its challenge was taken): refused, and logged as a failed login
    expect(posted).to.be.a('string');
    const replay = await page.evaluate(async (b) => {
      const res = await fetch('/api/auth/webauthn', { method: 'POST', headers: { 'content-type': 'application/json' }, body: b });
      return { status: res.status, body: await res.json() };
    }, posted!);
    expect(replay.status).to.equal(401);
    expect(replay.body.error.details.reason).to.equal('expired');
    expect(logs.text()).to.match(/"event":"login_failed"[^\n]*"provider":"webauthn"[^\n]*"via":"passkey"/);
    expectNoProblems(browser);
  });

  it('takes the passkey as the second step after the password', async function () {
    await forgetSession(browser);
    await page.goto(`${svc.origin}/login?next=%2Fsettings`);
    await page.fill('#username', paula.username);
    await page.fill('#password', paula.password);
    await Promise.all([page.waitForURL((u) => u.pathname === '/login/mfa'), page.click('form[action="/login"] button[type=submit]')]);
    await page.locator('[data-passkey-verify]').waitFor();
    // without an authenticator app, the field takes recovery codes and says so
    expect(await page.textContent('[data-code-label]')).to.equal('Recovery code');
    for (const width of WIDTHS) {
      await atWidth(width);
      await shoot('login-second-step', width);
    }
    await atWidth(1280);
    await Promise.all([page.waitForURL(`${svc.origin}/settings`), page.click('[data-passkey-verify]')]);
    expect((await call('GET', '/api/me')).body.username).to.equal('paula');
    expectNoProblems(browser);
  });

  it('step-up: an action answered 403 step_up_required opens the dialog; the passkey verifies and the call goes through', async function () {
    await page.goto(`${svc.origin}/settings`);
    await page.locator('[data-factors] [data-new-codes]').waitFor();
    await ageSessions(paulaId);
    // "New codes" asks before acting: the second click sends the call, which needs step-up
    await page.click('[data-new-codes]');
    await page.click('[data-new-codes]');
    const dialog = page.locator('dialog[data-step-up]');
    await dialog.waitFor();
    expect(await dialog.evaluate((d) => (d as HTMLDialogElement).open)).to.equal(true);
    expect(await dialog.textContent())
      .to.include('Confirm it is you')
      .and.include('15 minutes');
    for (const width of WIDTHS) {
      await atWidth(width);
      await shoot('step-up-dialog', width);
    }
    await atWidth(1280);
    const [verified] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === '/api/auth/step-up'),
      page.click('[data-step-up-passkey]'),
    ]);
    expect(verified.status()).to.equal(204);
    await dialog.waitFor({ state: 'detached' });
    // the call was sent again and answered: new codes, shown once
    await page.locator('[data-recovery-codes] [data-codes] li').nth(9).waitFor();
    expect(await page.textContent('[data-security-msg]')).to.include('New recovery codes');
    expectNoProblems(browser);
  });

  it('the step-up dialog can be cancelled: the action is not done and says why', async function () {
    await page.goto(`${svc.origin}/settings`);
    await page.locator('[data-factors] [data-new-codes]').waitFor();
    await ageSessions(paulaId);
    await page.click('[data-new-codes]');
    await page.click('[data-new-codes]');
    await page.locator('dialog[data-step-up]').waitFor();
    await page.click('[data-step-up-cancel]');
    await page.locator('dialog[data-step-up]').waitFor({ state: 'detached' });
    await eventually(async () => ((await page.textContent('[data-security-msg]')) ?? '').includes('second factor again'));
    expect(await page.isVisible('[data-recovery-codes]')).to.equal(false);
  });

  it('refuses a cloned passkey whose sign counter does not grow', async function () {
    // the credential as it is now, with its counter
    const { credentials } = (await cdp.send('WebAuthn.getCredentials', { authenticatorId })) as { credentials: VirtualCredential[] };
    expect(credentials).to.have.length(1);
    const stale = credentials[0]!;
    // used once more: the service records the higher counter
    await forgetSession(browser);
    await page.goto(`${svc.origin}/login`);
    await Promise.all([page.waitForURL(`${svc.origin}/`), page.click('[data-passkey-signin]')]);
    // the copy, on another authenticator, still at the old counter
    await cdp.send('WebAuthn.removeVirtualAuthenticator', { authenticatorId });
    authenticatorId = await addAuthenticator();
    await cdp.send('WebAuthn.addCredential', {
      authenticatorId,
      credential: {
        credentialId: stale.credentialId,
        isResidentCredential: stale.isResidentCredential,
        rpId: stale.rpId,
        privateKey: stale.privateKey,
        userHandle: stale.userHandle,
        signCount: stale.signCount,
      },
    });
    await forgetSession(browser);
    await page.goto(`${svc.origin}/login`);
    const [answer] = await Promise.all([page.waitForResponse((r) => new URL(r.url()).pathname === '/api/auth/webauthn'), page.click('[data-passkey-signin]')]);
    expect(answer.status()).to.equal(401);
    expect((await answer.json()).error.details.reason).to.equal('invalid_passkey');
    await eventually(async () => ((await page.textContent('[data-passkey-msg]')) ?? '').includes('not accepted'));
    expect(new URL(page.url()).pathname).to.equal('/login');
    expect((await call('GET', '/api/me')).status).to.equal(401);
    expect(logs.text()).to.include('passkey signature counter did not grow');
    expect(logs.text()).to.match(/"event":"login_failed"[^\n]*"username":"paula"[^\n]*"reason":"invalid_credentials"[^\n]*"via":"passkey"/);
  });

  it('over the API: a second step and step-up take a passkey, the options leave the token unspent, a challenge answers only its own flow', async function () {
    await forgetSession(browser);
    await page.goto(`${svc.origin}/login`);
    // WebAuthn by hand, as an API client in the browser would (a string: evaluated as written)
    await page.evaluate(String.raw`(() => {
      const enc = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
      const dec = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((s.length + 3) % 4)), (c) => c.charCodeAt(0));
      const post = async (url, body) => {
        const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        return { status: r.status, body: r.status === 204 ? null : await r.json().catch(() => null) };
      };
      const assert = async (o) => {
        const c = await navigator.credentials.get({ publicKey: { ...o, challenge: dec(o.challenge), allowCredentials: (o.allowCredentials || []).map((a) => ({ ...a, id: dec(a.id) })) } });
        return { id: c.id, rawId: enc(c.rawId), type: c.type, clientExtensionResults: {}, response: { clientDataJSON: enc(c.response.clientDataJSON), authenticatorData: enc(c.response.authenticatorData), signature: enc(c.response.signature), userHandle: c.response.userHandle ? enc(c.response.userHandle) : undefined } };
      };
      window.webauthnTest = { post, assert };
    })()`);
    type Answer = { status: number; body: any };
    const post = (url: string, body: unknown): Promise<Answer> => page.evaluate(([u, b]) => (window as any).webauthnTest.post(u, b), [url, body] as const);
    const assertWith = (options: unknown): Promise<unknown> => page.evaluate((o) => (window as any).webauthnTest.assert(o), options);

    const first = await post('/api/auth/login', { username: paula.username, password: paula.password });
    expect(first.body).to.include({ mfa_required: true });
    expect(first.body.methods).to.include('webauthn');
    const token = first.body.mfa_token;
    const opts = await post('/api/auth/webauthn/options', { mfa_token: token });
    expect(opts.status).to.equal(200);
    expect(opts.body.flow).to.equal('second_step');
    expect(opts.body.options.allowCredentials).to.have.length(1);
    expect(opts.body.options.rpId).to.equal('localhost');
    // asking again is fine: the token was not spent
    const again = await post('/api/auth/webauthn/options', { mfa_token: token });
    expect(again.status).to.equal(200);
    const answer = await assertWith(again.body.options);
    const done = await post('/api/auth/login/mfa', { mfa_token: token, webauthn: answer });
    expect(done.status, JSON.stringify(done.body)).to.equal(200);
    expect(done.body.user.username).to.equal('paula');
    // the same answer once more (its challenge was taken), now for step-up: refused
    expect((await post('/api/auth/step-up', { webauthn: answer })).status).to.equal(401);

    // a passwordless challenge does not pass step-up, a step-up challenge signs no one in
    const loose = await post('/api/auth/webauthn/options', {});
    expect(loose.body.flow).to.equal('passwordless');
    expect(loose.body.options.userVerification).to.equal('required');
    expect((await post('/api/auth/step-up', { webauthn: await assertWith(loose.body.options) })).status).to.equal(401);
    const up = await post('/api/auth/webauthn/options', { purpose: 'step_up' });
    expect(up.body.flow).to.equal('step_up');
    const wrongDoor = await post('/api/auth/webauthn', { response: await assertWith(up.body.options) });
    expect(wrongDoor.status).to.equal(401);
    expect(wrongDoor.body.error.details.reason).to.equal('expired');
    const upAgain = await post('/api/auth/webauthn/options', { purpose: 'step_up' });
    expect((await post('/api/auth/step-up', { webauthn: await assertWith(upAgain.body.options) })).status).to.equal(204);

    // enrolling and step-up are for web sessions; step-up options need a sign-in
    await request(svc.url).post('/api/me/mfa/webauthn/options').set('Authorization', adminAuth()).expect(403);
    await request(svc.url).post('/api/auth/webauthn/options').set('Authorization', adminAuth()).send({ purpose: 'step_up' }).expect(403);
    await request(svc.url).post('/api/auth/webauthn/options').send({ purpose: 'step_up' }).expect(401);
    await request(svc.url).post('/api/auth/webauthn/options').send({ mfa_token: 'svm_not-a-token-at-all-0123456789' }).expect(401);
    // a foreign page may not start one
    await request(svc.url).post('/api/auth/webauthn/options').set('Origin', 'https://evil.example').send({}).expect(403);
  });

  it('enrols an authenticator app through the Security panel: QR code, key as text, a code; then signs in with it and with a recovery code', async function () {
    // a key issued before the factor: the enrolment lists it, and one button revokes it
    const early = (
      await request(svc.url).post('/api/me/api-keys').set('Authorization', basic(tom.username, tom.password)).send({ label: 'cron job' }).expect(201)
    ).body;
    await forgetSession(browser);
    await signIn(page, svc.origin, tom.username, tom.password, '/settings');
    await page.locator(`[data-keys] tr[data-key-id="${early.id}"]`).waitFor();
    await page.locator('[data-factors] td.empty').waitFor();
    // the sign-in is older than five minutes (as a stolen session's would be): a first factor asks for the password
    await svc.service
      .db('api_keys')
      .where({ user_id: tomId, kind: 'session' })
      .update({ created_at: Date.now() - 6 * 60_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' });
    await page.click('[data-totp-start]');
    await page.locator('[data-reauth] input[name=current_password]').waitFor();
    expect(await page.textContent('[data-security-msg]')).to.include('current_password');
    await page.fill('[data-reauth] input[name=current_password]', tom.password);
    await page.click('[data-totp-start]');
    const qr = page.locator('[data-totp-qr]');
    await qr.waitFor();
    // the QR code is an image the page's policy lets load (img-src data:)
    await eventually(() => qr.evaluate((img) => (img as HTMLImageElement).complete && (img as HTMLImageElement).naturalWidth > 0));
    const secret = ((await page.textContent('[data-totp-secret]')) ?? '').replace(/\s/g, '');
    expect(secret).to.match(/^[A-Z2-7]{16,}$/);
    for (const width of WIDTHS) {
      await atWidth(width);
      await shoot('security-totp', width, '[data-security]');
    }
    await atWidth(1280);
    // a wrong code first: refused, named
    await page.fill('[data-totp-confirm] input[name=code]', '000000');
    await page.click('[data-totp-confirm] button[type=submit]');
    await eventually(async () => ((await page.textContent('[data-security-msg]')) ?? '').includes('code'));
    // the previous step's code (one step of drift), so the sign-in below can use the current one
    // (a page under load may take seconds to send it)
    await page.fill('[data-totp-confirm] input[name=code]', await previousStepCode(secret, 10_000));
    await page.click('[data-totp-confirm] button[type=submit]');
    await page.locator('[data-recovery-codes] [data-codes] li').nth(9).waitFor();
    const recovery = await page.$$eval('[data-codes] li', (lis) => lis.map((li) => li.textContent?.trim() ?? ''));
    await page.locator('[data-factors] tr[data-factor=totp]').waitFor();
    expect(await page.isVisible('[data-totp-start]')).to.equal(false);
    const earlyRow = page.locator(`[data-keys-before-factor] tr[data-key-id="${early.id}"]`);
    await earlyRow.waitFor();
    expect(await earlyRow.textContent())
      .to.include('cron job')
      .and.include(early.prefix);
    for (const width of WIDTHS) {
      await atWidth(width);
      await shoot('security-recovery-codes', width, '[data-security]');
    }
    await atWidth(1280);
    await page.click('[data-revoke-before-factor]');
    await eventually(async () => ((await page.textContent('[data-security-msg]')) ?? '').includes('Revoked 1 API key'));
    expect(await page.isVisible('[data-keys-before-factor]')).to.equal(false);
    // the list of keys below follows
    await page.locator(`[data-keys] tr[data-key-id="${early.id}"]`).waitFor({ state: 'detached' });
    await request(svc.url).get('/api/me').set('X-API-Key', early.token).expect(401);

    // signing in now asks for the app's code (no passkey offered: tom has none)
    await forgetSession(browser);
    await page.goto(`${svc.origin}/login?next=%2Fsettings`);
    await page.fill('#username', tom.username);
    await page.fill('#password', tom.password);
    await Promise.all([page.waitForURL((u) => u.pathname === '/login/mfa'), page.click('form[action="/login"] button[type=submit]')]);
    expect(await page.isVisible('[data-passkey-verify]')).to.equal(false);
    expect(await page.textContent('[data-code-label]')).to.equal('Code from your authenticator app');
    for (const width of WIDTHS) {
      await atWidth(width);
      await shoot('login-second-step-app', width);
    }
    await atWidth(1280);
    await page.fill('#code', totpCode(secret));
    await Promise.all([page.waitForURL(`${svc.origin}/settings`), page.click('[data-second-step] button[type=submit]')]);

    // and with a recovery code, through "Use a recovery code"
    await forgetSession(browser);
    await page.goto(`${svc.origin}/login?next=%2Fsettings`);
    await page.fill('#username', tom.username);
    await page.fill('#password', tom.password);
    await Promise.all([page.waitForURL((u) => u.pathname === '/login/mfa'), page.click('form[action="/login"] button[type=submit]')]);
    await page.click('[data-use-recovery]');
    expect(await page.textContent('[data-code-label]')).to.equal('Recovery code');
    await page.fill('#code', recovery[0]!);
    await Promise.all([page.waitForURL(`${svc.origin}/settings`), page.click('[data-second-step] button[type=submit]')]);
    await page.locator('[data-factors] tr[data-factor=recovery]', { hasText: '9 left' }).waitFor();

    // step-up with a code: the dialog has no passkey button for tom
    await ageSessions(tomId);
    await page.click('[data-new-codes]');
    await page.click('[data-new-codes]');
    await page.locator('dialog[data-step-up]').waitFor();
    expect(await page.isVisible('[data-step-up-passkey]')).to.equal(false);
    await page.fill('dialog[data-step-up] input[name=code]', '999999');
    await page.click('dialog[data-step-up] button[type=submit]');
    await eventually(async () => ((await page.textContent('[data-step-up-msg]')) ?? '').includes('not right'));
    await page.fill('dialog[data-step-up] input[name=code]', recovery[1]!);
    await page.click('dialog[data-step-up] button[type=submit]');
    await page.locator('dialog[data-step-up]').waitFor({ state: 'detached' });
    await page.locator('[data-recovery-codes] [data-codes] li').nth(9).waitFor();
    expectNoProblems(browser);
  });

  it('the users page shows who has a second factor, and an administrator resets it', async function () {
    await forgetSession(browser);
    await signIn(page, svc.origin, ADMIN.username, ADMIN.password, '/admin/users');
    const row = page.locator('[data-users] tr[data-username=paula]');
    await row.waitFor();
    expect(await row.locator('td[data-mfa]').getAttribute('data-mfa')).to.equal('on');
    expect(await page.locator('[data-users] tr[data-username=admin] td[data-mfa]').getAttribute('data-mfa')).to.equal('off');
    expect(await page.locator('[data-users] tr[data-username=admin] [data-reset-mfa]').count()).to.equal(0);
    await row.locator('[data-reset-mfa]').click();
    await row.locator('[data-reset-mfa]').click();
    await page.locator('[data-users] tr[data-username=paula] td[data-mfa=off]').waitFor();
    expect(await page.textContent('[data-list-msg]')).to.include('Reset the second factor of paula');
    const status = await request(svc.url).get('/api/users').set('Authorization', adminAuth()).expect(200);
    expect(status.body.users.find((u: { username: string }) => u.username === 'paula').mfa).to.equal(false);
    expectNoProblems(browser);
  });

  it('a member of a group that requires a second factor is sent to the Security panel, and enrols a passkey there', async function () {
    await request(svc.url)
      .patch('/api/settings/auth')
      .set('Authorization', adminAuth())
      .send({ mfa_required_groups: ['INT_VIEWER'] })
      .expect(200);
    try {
      await createUser(svc.url, { username: 'rita', password: 'rita-password-1', groups: ['INT_VIEWER'] });
      await forgetSession(browser);
      await page.goto(`${svc.origin}/login`);
      await page.fill('#username', 'rita');
      await page.fill('#password', 'rita-password-1');
      // the dashboard's first call is refused (mfa_enrollment_required): on to the Security panel
      await Promise.all([
        page.waitForURL((u) => u.pathname === '/settings' && u.searchParams.get('mfa') === 'required'),
        page.click('form[action="/login"] button[type=submit]'),
      ]);
      const notice = page.locator('[data-mfa-required]');
      await notice.waitFor();
      expect(await notice.textContent()).to.include('Your groups require a second factor');
      await page.fill('[data-passkey-add] input[name=label]', 'Phone');
      await page.click('[data-passkey-add] button[type=submit]');
      await page.locator('[data-recovery-codes] [data-codes] li').nth(9).waitFor();
      await notice.waitFor({ state: 'hidden' });
      expect((await call('GET', '/api/notifications?limit=1')).status).to.equal(200);
    } finally {
      await request(svc.url).patch('/api/settings/auth').set('Authorization', adminAuth()).send({ mfa_required_groups: null }).expect(200);
    }
    expectNoProblems(browser);
  });
});
