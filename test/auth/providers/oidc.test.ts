import { expect } from 'chai';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { createLogger } from '../../../src/log.js';
import { OidcLoginError, OidcProvider, profileFromClaims, type OidcProviderOptions } from '../../../src/auth/providers/oidc.js';
import { followToCallback, startIdp, type RunningIdp } from '../../support/oidc-idp.js';

const CLIENT_ID = 'service-core';
const CLIENT_SECRET = 'test-client-secret-0123456789abcdef';
const REDIRECT_URI = 'http://127.0.0.1:8080/auth/callback/oidc';

const ACCOUNTS: Record<string, Record<string, unknown>> = {
  'alice-sub': {
    email: 'alice@example.test',
    email_verified: true,
    preferred_username: 'alice',
    name: 'Alice Example',
    groups: ['idp-admins', 'idp-devs', 'idp-unmapped'],
  },
  'bob-sub': {
    email: 'bob.smith@example.test',
    email_verified: 'true', // a string is not a vouch
    name: 'Bob Smith',
    groups: 'idp-devs',
  },
};
const GROUP_MAPPING = { 'idp-admins': ['INT_ADMIN'], 'idp-devs': ['INT_DEVELOPER', 'INT_VIEWER'] };

/** Collects log lines so tests can prove secrets never reach them. */
function captureLogger(): { logger: ReturnType<typeof createLogger>; text: () => string } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { logger: createLogger('debug', sink), text: () => lines.join('') };
}

async function expectLoginError(promise: Promise<unknown>, code: string): Promise<OidcLoginError> {
  let caught: unknown;
  try {
    await promise;
  } catch (err) {
    caught = err;
  }
  expect(caught, `expected OidcLoginError ${code}, got ${String(caught ?? 'success')}`).to.be.instanceOf(OidcLoginError);
  const failure = caught as OidcLoginError;
  expect(failure.code, failure.message).to.equal(code);
  return failure;
}

/** A port nobody listens on (bound then released). */
async function unusedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('OidcProvider against a real oidc-provider IdP', function () {
  let idp: RunningIdp;
  let userinfoIdp: RunningIdp;
  const cleanups: Array<() => Promise<void>> = [];
  const captured = captureLogger();

  function makeProvider(overrides: Partial<OidcProviderOptions> = {}, logger = captured.logger): OidcProvider {
    return new OidcProvider(
      {
        issuer: idp.issuer,
        clientId: CLIENT_ID,
        clientSecret: CLIENT_SECRET,
        groupMapping: GROUP_MAPPING,
        allowInsecureHttp: true,
        timeoutMs: 2000,
        ...overrides,
      },
      logger,
    );
  }

  before(async function () {
    const clients = [{ client_id: CLIENT_ID, client_secret: CLIENT_SECRET, redirect_uris: [REDIRECT_URI] }];
    idp = await startIdp({ clients, accounts: ACCOUNTS });
    userinfoIdp = await startIdp({ clients, accounts: ACCOUNTS, conformIdTokenClaims: true });
  });

  after(async function () {
    for (const cleanup of cleanups.reverse()) await cleanup();
    await idp?.stop();
    await userinfoIdp?.stop();
  });

  it('starts with PKCE S256, random state and nonce, and the configured scopes', async function () {
    const provider = makeProvider();
    expect(provider.id).to.equal('oidc');
    expect(provider.kind).to.equal('redirect');
    expect(provider.label).to.equal('SSO');
    const first = await provider.start(REDIRECT_URI);
    const second = await provider.start(REDIRECT_URI);
    const url = new URL(first.url);
    expect(url.origin).to.equal(idp.issuer);
    expect(url.searchParams.get('client_id')).to.equal(CLIENT_ID);
    expect(url.searchParams.get('redirect_uri')).to.equal(REDIRECT_URI);
    expect(url.searchParams.get('response_type')).to.equal('code');
    expect(url.searchParams.get('scope')).to.equal('openid profile email');
    expect(url.searchParams.get('code_challenge_method')).to.equal('S256');
    expect(url.searchParams.get('code_challenge')).to.be.a('string').and.not.equal(first.code_verifier);
    expect(url.searchParams.get('state')).to.equal(first.state);
    expect(url.searchParams.get('nonce')).to.equal(first.nonce);
    expect(first.code_verifier).to.have.length.of.at.least(43);
    expect(second.state).to.not.equal(first.state);
    expect(second.nonce).to.not.equal(first.nonce);
    expect(second.code_verifier).to.not.equal(first.code_verifier);
  });

  it('completes the full flow: verified email, username, display name, mapped groups', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub' });
    expect(callbackUrl.searchParams.get('code')).to.be.a('string');
    const profile = await provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI });
    expect(profile).to.deep.equal({
      provider: 'oidc',
      provider_user_id: 'alice-sub',
      username: 'alice',
      email: 'alice@example.test',
      email_verified: true,
      display_name: 'Alice Example',
      groups: ['INT_ADMIN', 'INT_DEVELOPER', 'INT_VIEWER'],
    });
  });

  it('treats a non-boolean email_verified as unverified, falls back to the email local part, maps a string groups claim', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await followToCallback(started.url, { login: 'bob-sub' });
    const profile = await provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI });
    expect(profile.provider_user_id).to.equal('bob-sub');
    expect(profile.username).to.equal('bob.smith');
    expect(profile.email_verified).to.equal(false);
    expect(profile.groups).to.deep.equal(['INT_DEVELOPER', 'INT_VIEWER']);
  });

  it('reads profile claims from userinfo when the ID token lacks them', async function () {
    const provider = makeProvider({ issuer: userinfoIdp.issuer });
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await userinfoIdp.followToCallback(started.url, { login: 'alice-sub' });
    const profile = await provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI });
    expect(profile.username).to.equal('alice');
    expect(profile.email).to.equal('alice@example.test');
    expect(profile.email_verified).to.equal(true);
    expect(profile.groups).to.deep.equal(['INT_ADMIN', 'INT_DEVELOPER', 'INT_VIEWER']);
  });

  it('exchanges with the redirect_uri sent in start(), whatever host the callback arrived on', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub' });
    const viaProxy = new URL(`http://localhost:9999/auth/callback/oidc${callbackUrl.search}`);
    const profile = await provider.callback(viaProxy, { ...started, redirect_uri: REDIRECT_URI });
    expect(profile.provider_user_id).to.equal('alice-sub');
  });

  it('leaves groups undefined when no group mapping is configured', async function () {
    const provider = makeProvider({ groupMapping: {} });
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub' });
    const profile = await provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI });
    expect(profile.groups).to.equal(undefined);
  });

  it('rejects a state that does not match with state_mismatch', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub' });
    const other = await provider.start(REDIRECT_URI);
    await expectLoginError(provider.callback(callbackUrl, { ...started, state: other.state, redirect_uri: REDIRECT_URI }), 'state_mismatch');
    const noState = new URL(callbackUrl);
    noState.searchParams.delete('state');
    await expectLoginError(provider.callback(noState, { ...started, redirect_uri: REDIRECT_URI }), 'state_mismatch');
  });

  it('uses an IdP that requires PKCE: an authorization request without a challenge is refused', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const withoutPkce = new URL(started.url);
    withoutPkce.searchParams.delete('code_challenge');
    withoutPkce.searchParams.delete('code_challenge_method');
    const callbackUrl = await idp.followToCallback(withoutPkce.href, { login: 'alice-sub' });
    expect(callbackUrl.searchParams.get('error')).to.equal('invalid_request');
    await expectLoginError(provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI }), 'idp_error');
  });

  it('refuses to replay a callback URL: the code is single-use at the IdP', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub' });
    const expected = { ...started, redirect_uri: REDIRECT_URI };
    await provider.callback(callbackUrl, expected);
    const err = await expectLoginError(provider.callback(callbackUrl, expected), 'exchange_failed');
    expect(err.message).to.include('invalid_grant');
  });

  it('rejects an ID token whose nonce is not the expected one with nonce_mismatch', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub' });
    const other = await provider.start(REDIRECT_URI);
    await expectLoginError(provider.callback(callbackUrl, { ...started, nonce: other.nonce, redirect_uri: REDIRECT_URI }), 'nonce_mismatch');
  });

  it('fails the exchange with a wrong PKCE verifier', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub' });
    const other = await provider.start(REDIRECT_URI);
    const err = await expectLoginError(
      provider.callback(callbackUrl, { ...started, code_verifier: other.code_verifier, redirect_uri: REDIRECT_URI }),
      'exchange_failed',
    );
    expect(err.message).to.include('invalid_grant');
  });

  it('fails the exchange with a wrong client secret, and never logs the secret, code or tokens', async function () {
    const { logger, text } = captureLogger();
    const wrongSecret = 'wrong-secret-that-must-not-be-logged';
    const provider = makeProvider({ clientSecret: wrongSecret }, logger);
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub' });
    await expectLoginError(provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI }), 'exchange_failed');
    const log = text();
    expect(log).to.include('exchange_failed');
    expect(log).to.not.include(wrongSecret);
    expect(log).to.not.include(callbackUrl.searchParams.get('code')!);
    expect(log).to.not.include(started.code_verifier);
  });

  it('reports the IdP answering ?error=access_denied as idp_error', async function () {
    const provider = makeProvider();
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await idp.followToCallback(started.url, { login: 'alice-sub', deny: true });
    expect(callbackUrl.searchParams.get('error')).to.equal('access_denied');
    const err = await expectLoginError(provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI }), 'idp_error');
    expect(err.message).to.include('access_denied');
  });

  it('reports idp_unreachable when nothing listens at the issuer, and retries discovery later', async function () {
    const port = await unusedPort();
    const provider = makeProvider({ issuer: `http://127.0.0.1:${port}` });
    const began = Date.now();
    await expectLoginError(provider.start(REDIRECT_URI), 'idp_unreachable');
    expect(Date.now() - began).to.be.below(3000);

    // The failure was not cached: once an IdP is up at that address, login proceeds.
    const late = await startIdp({
      clients: [{ client_id: CLIENT_ID, client_secret: CLIENT_SECRET, redirect_uris: [REDIRECT_URI] }],
      accounts: ACCOUNTS,
      port,
    });
    cleanups.push(() => late.stop());
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await late.followToCallback(started.url, { login: 'alice-sub' });
    const profile = await provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI });
    expect(profile.provider_user_id).to.equal('alice-sub');
  });

  it('reports idp_unreachable quickly when the IdP accepts connections but never answers', async function () {
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((socket) => {
      sockets.add(socket); // hold it open, say nothing
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    cleanups.push(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    });
    const provider = makeProvider({ issuer: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, timeoutMs: 300 });
    const began = Date.now();
    await expectLoginError(provider.start(REDIRECT_URI), 'idp_unreachable');
    expect(Date.now() - began).to.be.below(3000);
  });

  it('reports idp_unreachable when the IdP goes down between start and callback', async function () {
    const down = await startIdp({
      clients: [{ client_id: CLIENT_ID, client_secret: CLIENT_SECRET, redirect_uris: [REDIRECT_URI] }],
      accounts: ACCOUNTS,
    });
    cleanups.push(() => down.stop());
    const provider = makeProvider({ issuer: down.issuer });
    const started = await provider.start(REDIRECT_URI);
    const callbackUrl = await down.followToCallback(started.url, { login: 'alice-sub' });
    await down.stop();
    const began = Date.now();
    await expectLoginError(provider.callback(callbackUrl, { ...started, redirect_uri: REDIRECT_URI }), 'idp_unreachable');
    expect(Date.now() - began).to.be.below(3000);
  });

  it('refuses bad settings: http issuer without allowInsecureHttp, scopes without openid', function () {
    expect(() => makeProvider({ allowInsecureHttp: false })).to.throw(/allowInsecureHttp/);
    expect(() => makeProvider({ scopes: 'profile email' })).to.throw(/openid/);
    expect(() => makeProvider({ clientId: '' })).to.throw(/clientId/);
  });

  it('never logged a token, code or the client secret during the whole suite', function () {
    expect(captured.text()).to.not.include(CLIENT_SECRET);
    expect(captured.text()).to.not.match(/access_token|id_token|refresh_token|eyJ/);
  });
});

describe('profileFromClaims', function () {
  it('falls back to sub for the username and ignores non-string groups', function () {
    const profile = profileFromClaims({ sub: 'only-sub', groups: ['idp-admins', 42, null] }, 'groups', { 'idp-admins': ['INT_ADMIN'] });
    expect(profile).to.deep.equal({
      provider: 'oidc',
      provider_user_id: 'only-sub',
      username: 'only-sub',
      email: null,
      email_verified: false,
      display_name: null,
      groups: ['INT_ADMIN'],
    });
  });

  it('uses a custom groups claim and yields [] when mapped groups are absent', function () {
    expect(profileFromClaims({ sub: 's', roles: 'ops' }, 'roles', { ops: ['INT_OPS'] }).groups).to.deep.equal(['INT_OPS']);
    expect(profileFromClaims({ sub: 's' }, 'roles', { ops: ['INT_OPS'] }).groups).to.deep.equal([]);
  });

  it('rejects claims without sub', function () {
    expect(() => profileFromClaims({ email: 'x@y.z' }, 'groups', {})).to.throw(OidcLoginError);
  });
});
