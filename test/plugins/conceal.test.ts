import { expect } from 'chai';
import { concealSecrets } from '../../src/plugins/lifecycle.js';

/** What a plugin's failure may quote of its secret settings, and what the service shows of it. */
describe('plugins: secret settings concealed in a failure', () => {
  const manifest = {
    settings: {
      region: { description: '', default: null, secret: false },
      user: { description: '', default: null, secret: true },
      token: { description: '', default: null, secret: true },
      pin: { description: '', default: null, secret: true },
    },
  } as never;

  it('replaces each secret by its name, the longest first, in the forms a message quotes it', () => {
    const config = { region: 'eu', user: 'svc-ops', token: 'svc-ops-9f8e7d6c5b4a', pin: '5' };
    expect(concealSecrets('login svc-ops with svc-ops-9f8e7d6c5b4a in eu', manifest, config)).to.equal('login [secret user] with [secret token] in eu');
    // a JSON-escaped or URL-encoded copy, and the value as the plugin's schema made it
    const quoted = { ...config, token: 'p"q@ss word' };
    expect(concealSecrets(`{"token":"p\\"q@ss word"} or ?t=p%22q%40ss%20word`, manifest, quoted)).to.equal('{"token":"[secret token]"} or ?t=[secret token]');
    expect(concealSecrets('bad key TRIMMED-KEY-1', manifest, { token: '  TRIMMED-KEY-1  ' }, { token: 'TRIMMED-KEY-1' })).to.equal('bad key [secret token]');
  });

  it('leaves a value under 4 characters alone (replacing it would mark ordinary text), and an empty or unset one', () => {
    expect(concealSecrets('10.0.0.5:5432', manifest, { pin: '5', token: '', user: null })).to.equal('10.0.0.5:5432');
  });
});
