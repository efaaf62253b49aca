import { expect } from 'chai';
import Joi from 'joi';
import { DomainError, fieldErrorsOf, fieldPath, fieldRoot, Refusal } from '../src/errors.js';
import { HttpError } from '../src/http/errors.js';
import { nulField } from '../src/http/validate.js';

describe('field errors: one way to name a field', () => {
  it('names an item of a list with brackets and a key with a dot, from joi or by hand alike', () => {
    const schema = Joi.object({
      groups: Joi.array().items(Joi.string()),
      notifications: Joi.array().items(Joi.object({ title: Joi.string().required() })),
      metadata: Joi.object({ tenant: Joi.number() }),
    });
    const { error } = schema.validate({ groups: ['a', 5], notifications: [{ title: 't' }, {}], metadata: { tenant: 'x' } }, { abortEarly: false });
    expect(fieldErrorsOf(error!).map((p) => p.field)).to.deep.equal(['groups[1]', 'notifications[1].title', 'metadata.tenant']);
    expect(fieldPath(['records', 0, 'name'])).to.equal('records[0].name');
    expect(fieldPath(['request', 'tree', 'children', 2])).to.equal('request.tree.children[2]');
  });

  it('names a NUL character where it sits, in the same form', () => {
    expect(nulField({ groups: ['a', 'b\u0000'] })).to.equal('groups[1]');
    expect(nulField({ notifications: [{ title: 't' }, { title: 'x\u0000' }] })).to.equal('notifications[1].title');
    expect(nulField({ metadata: { 'k\u0000': 'v' } })).to.equal('metadata.k\u0000');
    expect(nulField({ fine: ['a'] })).to.equal(null);
  });

  it('reads the top-level field of any path', () => {
    expect(['scopes', 'scopes[0]', 'metadata.tenant', 'notifications[3].title'].map(fieldRoot)).to.deep.equal([
      'scopes',
      'scopes',
      'metadata',
      'notifications',
    ]);
  });
});

describe('refusals: an answer, not a fault', () => {
  it('capture no stack trace (a flood of them costs no stack walks) and leave the limit as it was', () => {
    const limit = Error.stackTraceLimit;
    for (const err of [new DomainError('forbidden', 'missing permission x'), new HttpError(401, 'unauthorized', 'sign in')]) {
      expect(err).to.be.instanceOf(Refusal).and.instanceOf(Error);
      expect(err.stack!.split('\n')).to.have.length(1);
    }
    expect(Error.stackTraceLimit).to.equal(limit);
    // a fault of ours keeps its stack
    expect(new Error('bug').stack!.split('\n').length).to.be.greaterThan(1);
  });
});
