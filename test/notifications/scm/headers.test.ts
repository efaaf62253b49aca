import { expect } from 'chai';
import { createHmac, randomUUID } from 'node:crypto';
import {
  detectScmRequest,
  normalizeScmEvent,
  signatureFormProblem,
  verifyScmSignature,
  type RequestHeaders,
  type ScmRequest,
} from '../../../src/notifications/scm/index.js';
import { fixture, githubExample, hmacHex } from './fixtures/load.js';

const SECRET = 'It5-a-s3cret-with-ünïcode';

/** Exactly what the route will do: headers -> provider, raw bytes -> verify, then parse, then normalise. */
function intake(headers: RequestHeaders, rawBody: Buffer, secret = SECRET) {
  const request = detectScmRequest(headers);
  if (!request) return { status: 'unrecognised' as const };
  if (!verifyScmSignature(request, headers, rawBody, secret)) return { status: 'unverified' as const, request };
  return { status: 'verified' as const, request, result: normalizeScmEvent(request.provider, request.event, JSON.parse(rawBody.toString('utf8'))) };
}

function githubHeaders(event: string, body: Buffer, secret = SECRET): RequestHeaders {
  return {
    'x-github-event': event,
    'x-github-delivery': randomUUID(),
    'x-hub-signature-256': `sha256=${hmacHex(body, secret)}`,
    'content-type': 'application/json',
  };
}

/** Calls verify and also proves it did not throw. */
function verifies(request: ScmRequest, headers: RequestHeaders, body: Buffer, secret = SECRET): boolean {
  let result: boolean | undefined;
  expect(() => {
    result = verifyScmSignature(request, headers, body, secret);
  }).not.to.throw();
  return result as boolean;
}

describe('scm webhook headers', () => {
  describe('detectScmRequest', () => {
    it('recognises GitHub with its delivery id', () => {
      expect(detectScmRequest({ 'x-github-event': 'push', 'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958' })).to.deep.equal({
        provider: 'github',
        event: 'push',
        deliveryId: '72d3162e-cc78-11e3-81ab-4c9367dc0958',
      });
    });

    it('prefers Gitea when Gitea also sends its GitHub and Gogs compatibility headers', () => {
      const headers = {
        'x-github-delivery': 'f6266f16-1bf3-46a5-9ea4-602e06ead473',
        'x-github-event': 'push',
        'x-gogs-delivery': 'f6266f16-1bf3-46a5-9ea4-602e06ead473',
        'x-gogs-event': 'push',
        'x-gitea-delivery': 'f6266f16-1bf3-46a5-9ea4-602e06ead473',
        'x-gitea-event': 'pull_request',
        'x-gitea-event-type': 'pull_request_sync',
      };
      expect(detectScmRequest(headers)).to.deep.equal({
        provider: 'gitea',
        event: 'pull_request',
        deliveryId: 'f6266f16-1bf3-46a5-9ea4-602e06ead473',
      });
    });

    it('takes the GitLab Idempotency-Key (stable across re-sends) before X-Gitlab-Event-UUID', () => {
      expect(detectScmRequest({ 'x-gitlab-event': 'Push Hook', 'x-gitlab-event-uuid': 'event-uuid', 'idempotency-key': 'idem-key' })).to.deep.equal({
        provider: 'gitlab',
        event: 'Push Hook',
        deliveryId: 'idem-key',
      });
      expect(detectScmRequest({ 'x-gitlab-event': 'Push Hook', 'x-gitlab-event-uuid': 'event-uuid' })).to.deep.equal({
        provider: 'gitlab',
        event: 'Push Hook',
        deliveryId: 'event-uuid',
      });
    });

    it('looks headers up case-insensitively and accepts single-element arrays', () => {
      expect(detectScmRequest({ 'X-GitHub-Event': ['issues'], 'X-GitHub-Delivery': 'abc' })).to.deep.equal({
        provider: 'github',
        event: 'issues',
        deliveryId: 'abc',
      });
    });

    it('reports a missing or malformed delivery id as null', () => {
      expect(detectScmRequest({ 'x-github-event': 'push' })?.deliveryId).to.equal(null);
      expect(detectScmRequest({ 'x-github-event': 'push', 'x-github-delivery': 'has spaces in it' })?.deliveryId).to.equal(null);
      expect(detectScmRequest({ 'x-github-event': 'push', 'x-github-delivery': 'x'.repeat(201) })?.deliveryId).to.equal(null);
    });

    it('is null without any provider event header, for conflicting claims and for junk event names', () => {
      expect(detectScmRequest({})).to.equal(null);
      expect(detectScmRequest({ 'content-type': 'application/json', 'x-hub-signature-256': 'sha256=00' })).to.equal(null);
      expect(detectScmRequest({ 'x-github-event': '' })).to.equal(null);
      expect(detectScmRequest({ 'x-github-event': 'push', 'x-gitlab-event': 'Push Hook' })).to.equal(null);
      expect(detectScmRequest({ 'x-github-event': '<script>' })).to.equal(null);
      expect(detectScmRequest({ 'x-github-event': ['push', 'ping'] })).to.equal(null);
    });
  });

  describe('verifyScmSignature', () => {
    const body = Buffer.from(JSON.stringify(githubExample('push')));
    const github: ScmRequest = { provider: 'github', event: 'push', deliveryId: null };
    const gitea: ScmRequest = { provider: 'gitea', event: 'push', deliveryId: null };
    const gitlab: ScmRequest = { provider: 'gitlab', event: 'Push Hook', deliveryId: null };
    const hex = hmacHex(body, SECRET);

    it('accepts a GitHub X-Hub-Signature-256 over the exact bytes (hex in either case)', () => {
      expect(verifies(github, { 'x-hub-signature-256': `sha256=${hex}` }, body)).to.equal(true);
      expect(verifies(github, { 'x-hub-signature-256': `sha256=${hex.toUpperCase()}` }, body)).to.equal(true);
    });

    it('rejects a GitHub signature made with another secret', () => {
      expect(verifies(github, { 'x-hub-signature-256': `sha256=${hmacHex(body, 'other-secret')}` }, body)).to.equal(false);
    });

    it('rejects truncated, over-long, non-hex, empty and prefix-less GitHub signatures', () => {
      for (const value of [
        `sha256=${hex.slice(0, 63)}`,
        `sha256=${hex.slice(0, 32)}`,
        `sha256=${hex}00`,
        `sha256=${'z'.repeat(64)}`,
        `sha256=${hex.slice(0, 62)}+/`,
        'sha256=',
        '',
        hex,
        ` sha256=${hex}`,
      ]) {
        expect(verifies(github, { 'x-hub-signature-256': value }, body), value).to.equal(false);
      }
    });

    it('rejects the legacy sha1= signature, even when it is correct', () => {
      const sha1 = createHmac('sha1', SECRET).update(body).digest('hex');
      expect(verifies(github, { 'x-hub-signature': `sha1=${sha1}` }, body)).to.equal(false);
      expect(verifies(github, { 'x-hub-signature-256': `sha1=${sha1}` }, body)).to.equal(false);
    });

    it('rejects a missing signature header and a header sent twice', () => {
      expect(verifies(github, {}, body)).to.equal(false);
      expect(verifies(github, { 'x-hub-signature-256': [`sha256=${hex}`, `sha256=${hex}`] }, body)).to.equal(false);
    });

    it('rejects a body altered by one byte', () => {
      for (const index of [0, Math.floor(body.length / 2), body.length - 1]) {
        const altered = Buffer.from(body);
        altered[index] = altered[index]! ^ 0x01;
        expect(verifies(github, { 'x-hub-signature-256': `sha256=${hex}` }, altered)).to.equal(false);
        expect(verifies(gitea, { 'x-gitea-signature': hex }, altered)).to.equal(false);
      }
      const longer = Buffer.concat([body, Buffer.from(' ')]);
      expect(verifies(github, { 'x-hub-signature-256': `sha256=${hex}` }, longer)).to.equal(false);
    });

    it('checks Gitea X-Gitea-Signature as bare hex HMAC-SHA256', () => {
      expect(verifies(gitea, { 'x-gitea-signature': hex }, body)).to.equal(true);
      expect(verifies(gitea, { 'x-gitea-signature': `sha256=${hex}` }, body)).to.equal(false);
      expect(verifies(gitea, { 'x-gitea-signature': hmacHex(body, 'wrong') }, body)).to.equal(false);
      expect(verifies(gitea, { 'x-gitea-signature': hex.slice(1) }, body)).to.equal(false);
      expect(verifies(gitea, { 'x-gitea-signature': 'not-hex-at-all' }, body)).to.equal(false);
      // A Gitea claim is checked on X-Gitea-Signature only, not on the GitHub-style header it also sends.
      expect(verifies(gitea, { 'x-hub-signature-256': `sha256=${hex}` }, body)).to.equal(false);
    });

    it('compares the GitLab X-Gitlab-Token with the secret', () => {
      expect(verifies(gitlab, { 'x-gitlab-token': SECRET }, body)).to.equal(true);
      expect(verifies(gitlab, { 'x-gitlab-token': `${SECRET}x` }, body)).to.equal(false);
      expect(verifies(gitlab, { 'x-gitlab-token': SECRET.slice(0, -1) }, body)).to.equal(false);
      expect(verifies(gitlab, { 'x-gitlab-token': '' }, body)).to.equal(false);
      expect(verifies(gitlab, {}, body)).to.equal(false);
      // A GitLab claim never passes on an HMAC header.
      expect(verifies(gitlab, { 'x-hub-signature-256': `sha256=${hex}` }, body)).to.equal(false);
    });

    it('is false, never a throw, for an empty secret or a body that is not a Buffer', () => {
      expect(verifies(github, { 'x-hub-signature-256': `sha256=${hmacHex(body, '')}` }, body, '')).to.equal(false);
      expect(verifies(gitlab, { 'x-gitlab-token': '' }, body, '')).to.equal(false);
      expect(verifies(github, { 'x-hub-signature-256': `sha256=${hex}` }, body.toString('utf8') as unknown as Buffer)).to.equal(false);
      expect(verifies({ provider: 'bitbucket' } as unknown as ScmRequest, {}, body)).to.equal(false);
    });

    it('says what is wrong with a signature header by its form alone, never by the secret', () => {
      expect(signatureFormProblem(github, {})).to.equal('no X-Hub-Signature-256 header: give the webhook a secret on the forge');
      expect(signatureFormProblem(github, { 'x-hub-signature-256': [`sha256=${hex}`, `sha256=${hex}`] })).to.equal(
        'X-Hub-Signature-256 was sent more than once',
      );
      expect(signatureFormProblem(github, { 'x-hub-signature-256': hex })).to.equal('X-Hub-Signature-256 must be sha256= and the hex HMAC-SHA256 of the body');
      expect(signatureFormProblem(gitea, { 'X-Gitea-Signature': `sha256=${hex}` })).to.match(/without the sha256= prefix\)$/);
      expect(signatureFormProblem(gitlab, { 'x-gitlab-token': '' })).to.equal('no X-Gitlab-Token header: give the webhook a secret on the forge');
      // the right form with the wrong value: nothing to say here (the caller says it does not verify)
      expect(signatureFormProblem(github, { 'x-hub-signature-256': `sha256=${hmacHex(body, 'other-secret')}` })).to.equal(null);
      expect(signatureFormProblem(gitlab, { 'x-gitlab-token': 'wrong-token' })).to.equal(null);
    });
  });

  describe('intake pipeline over raw bytes', () => {
    it('verifies and normalises a real GitHub pull_request delivery', () => {
      const raw = Buffer.from(
        JSON.stringify(
          githubExample('pull_request', (e) => e.action === 'opened'),
          null,
          2,
        ),
      );
      const outcome = intake(githubHeaders('pull_request', raw), raw);
      expect(outcome.status).to.equal('verified');
      expect(outcome.status === 'verified' && outcome.result.kind).to.equal('notify');
    });

    it('answers a signed GitHub ping as a ping', () => {
      const raw = Buffer.from(JSON.stringify(githubExample('ping')));
      const outcome = intake(githubHeaders('ping', raw), raw);
      expect(outcome.status === 'verified' && outcome.result).to.deep.equal({ kind: 'ping' });
    });

    it('stops an unsigned ping before parsing', () => {
      const raw = Buffer.from('not even json');
      expect(intake({ 'x-github-event': 'ping' }, raw).status).to.equal('unverified');
    });

    it('verifies a Gitea delivery that carries X-GitHub-Event too', () => {
      const raw = Buffer.from(JSON.stringify(fixture('gitea-push')));
      const headers = {
        'x-gitea-event': 'push',
        'x-github-event': 'push',
        'x-gitea-delivery': randomUUID(),
        'x-gitea-signature': hmacHex(raw, SECRET),
      };
      const outcome = intake(headers, raw);
      expect(outcome.status).to.equal('verified');
      expect(outcome.status === 'verified' && outcome.result.kind === 'notify' && outcome.result.notification.source).to.equal('scm:gitea');
    });

    it('verifies a GitLab delivery by its token', () => {
      const raw = Buffer.from(JSON.stringify(fixture('gitlab-pipeline')));
      const outcome = intake({ 'x-gitlab-event': 'Pipeline Hook', 'x-gitlab-token': SECRET, 'idempotency-key': randomUUID() }, raw);
      expect(outcome.status === 'verified' && outcome.result.kind === 'notify' && outcome.result.notification.level).to.equal('success');
    });
  });
});
