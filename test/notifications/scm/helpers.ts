import { expect } from 'chai';
import { normalizeScmEvent, ScmPayloadError, type NormalizedScmEvent, type ScmNotification, type ScmProvider } from '../../../src/notifications/scm/index.js';

export function notification(result: NormalizedScmEvent): ScmNotification {
  expect(result.kind, JSON.stringify(result)).to.equal('notify');
  return (result as Extract<NormalizedScmEvent, { kind: 'notify' }>).notification;
}

export function expectIgnored(result: NormalizedScmEvent): void {
  expect(result.kind, JSON.stringify(result)).to.equal('ignored');
  expect((result as { reason: string }).reason)
    .to.be.a('string')
    .and.not.equal('');
}

export function payloadError(provider: ScmProvider, event: string, payload: unknown): ScmPayloadError {
  try {
    normalizeScmEvent(provider, event, payload);
  } catch (error) {
    expect(error).to.be.instanceOf(ScmPayloadError);
    return error as ScmPayloadError;
  }
  throw new Error('expected a ScmPayloadError');
}
