import { expect } from 'chai';
import { broadcastSchema, checkNotify, plainNotify, targetedSchema, type NotifyKind } from '../../src/notifications/schema.js';

const joi = (kind: NotifyKind, raw: unknown) =>
  (kind === 'broadcast' ? broadcastSchema : targetedSchema).validate(raw, { abortEarly: false, convert: true, stripUnknown: false });

/** Values each field takes in the payloads below: plain ones, and ones the schema converts or refuses. */
const FIELDS: Record<string, unknown[]> = {
  title: ['build', ' padded ', '', '   ', 'x'.repeat(200), 'x'.repeat(201), 7, null, true],
  message: ['done', '', ' spaced ', 'y'.repeat(4000), 'y'.repeat(4001), 3, null],
  level: ['info', 'success', 'warning', 'error', 'INFO', 'fatal', '', null, 1],
  user: ['gina', ' gina', '', 'u'.repeat(128), 'u'.repeat(129), 5, null],
  id: ['deploy-42', 'a.b:c@d/e_f-g', '-starts-with-dash', '', 'i'.repeat(128), 'i'.repeat(129), 'with space', 9, null],
  source: ['ci', ' ci ', '', 's'.repeat(128), 's'.repeat(129), null, 4],
  link: ['/jobs/1', 'https://ci.example/jobs/1', 'javascript:alert(1)', '//evil.example', '/\t/evil.example', 'ftp://x', '', null, 2, `/${'l'.repeat(2048)}`],
  persist: [true, false, 'true', 'false', 0, 1, null],
  toast: [true, false, 'yes', 'false', 1, null],
  action: ['clear', 'other', null],
  unknown: ['x'],
};

function* payloads(): Generator<Record<string, unknown>> {
  const base = { title: 'build', message: 'done' };
  yield base;
  yield { message: 'done' };
  yield { title: 'build' };
  yield {};
  for (const [field, values] of Object.entries(FIELDS)) {
    for (const v of values) {
      yield { ...base, [field]: v };
      yield { ...base, user: 'gina', [field]: v };
    }
  }
  yield { id: 'n-1', action: 'clear' };
  yield { ...base, level: 'warning', user: 'gina', id: 'n-2', source: 'ci', link: '/x', persist: false, toast: false };
  yield { ...base, source: null, link: null };
}

describe('notifications: the plain payload check agrees with the schema', () => {
  it('accepts only what the schema accepts, with the value the schema answers', () => {
    let plain = 0;
    for (const kind of ['broadcast', 'user'] as const) {
      for (const raw of payloads()) {
        const fast = plainNotify(kind, raw);
        const full = joi(kind, raw);
        if (fast === null) continue;
        plain += 1;
        expect(full.error, `${kind} ${JSON.stringify(raw)}: the schema refuses what the plain check took`).to.equal(undefined);
        expect(fast, `${kind} ${JSON.stringify(raw)}`).to.deep.equal(full.value);
      }
    }
    // the common payloads do take the plain path
    expect(plain).to.be.greaterThan(40);
  });

  it('leaves a payload of another shape to the schema: same verdict, same problems', () => {
    for (const kind of ['broadcast', 'user'] as const) {
      for (const raw of payloads()) {
        const checked = checkNotify(kind, raw);
        const full = joi(kind, raw);
        expect(checked.value === null, `${kind} ${JSON.stringify(raw)}`).to.equal(full.error !== undefined);
        if (checked.value) expect(checked.value, `${kind} ${JSON.stringify(raw)}`).to.deep.equal(full.value);
      }
    }
    expect(plainNotify('user', Object.assign(Object.create({ title: 'inherited' }), { title: 'build', message: 'done', user: 'gina' }))).to.equal(null);
  });
});
