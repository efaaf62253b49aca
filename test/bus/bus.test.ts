import { expect } from 'chai';
import { EventBus } from '../../src/bus/bus.js';
import { createLogger } from '../../src/log.js';

describe('EventBus', () => {
  const bus = () => new EventBus(createLogger('silent'));

  it('delivers typed payloads to every handler', () => {
    const b = bus();
    const got: string[][] = [];
    b.on('iam:ready', (p) => void got.push(p.providers));
    b.on('iam:ready', (p) => void got.push(p.providers));
    b.emit('iam:ready', { providers: ['local'] });
    expect(got).to.deep.equal([['local'], ['local']]);
  });

  it('isolates a handler that throws or rejects', async () => {
    const b = bus();
    const seen: number[] = [];
    b.on('system:boot_complete', () => {
      throw new Error('boom');
    });
    b.on('system:boot_complete', async () => {
      throw new Error('async boom');
    });
    b.on('system:boot_complete', () => void seen.push(1));
    expect(() => b.emit('system:boot_complete', { plugins: [] })).not.to.throw();
    await new Promise((r) => setImmediate(r));
    expect(seen).to.deep.equal([1]);
  });

  it('waitFor resolves with the next (matching) payload and times out', async () => {
    const b = bus();
    const p = b.waitFor('plugin:state_changed', { match: (e) => e.plugin_id === 'b' });
    b.emit('plugin:state_changed', { plugin_id: 'a', state: 'loaded', enabled: true });
    b.emit('plugin:state_changed', { plugin_id: 'b', state: 'loaded', enabled: true });
    expect((await p).plugin_id).to.equal('b');
    let err: Error | null = null;
    await b.waitFor('iam:ready', { timeoutMs: 20 }).catch((e) => (err = e));
    expect(err).to.be.instanceOf(Error);
  });

  it('off removes a handler', () => {
    const b = bus();
    let n = 0;
    const h = () => void n++;
    b.on('iam:ready', h);
    b.off('iam:ready', h);
    b.emit('iam:ready', { providers: [] });
    expect(n).to.equal(0);
  });
});
