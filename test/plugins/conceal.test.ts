import { expect } from 'chai';
import Joi from 'joi';
import { concealSecrets, settingProblems } from '../../src/plugins/lifecycle.js';

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

  it("a setting's problem: a secret's value is never quoted, a missing secret is named as missing", () => {
    const forwarder = {
      settings: {
        url: { description: '', default: null, secret: false },
        secret: { description: '', default: null, secret: true },
      },
    } as never;
    const mod = {
      setup: () => undefined,
      settingsSchema: () =>
        Joi.object({
          url: Joi.string()
            .uri()
            .allow(null)
            .custom((v: string, h) => (v.includes('@') ? h.message({ custom: `no credentials in a url (${v})` }) : v)),
          secret: Joi.string()
            .min(16)
            .allow(null)
            .when('url', { is: Joi.string(), then: Joi.required().invalid(null) }),
        }),
    };
    // none given: the schema's words
    expect(settingProblems(mod, forwarder, { url: 'https://hooks.example/in' }).problems).to.deep.equal([{ field: 'secret', message: 'is required' }]);
    // one given, refused: nothing of it is said
    expect(settingProblems(mod, forwarder, { url: 'https://hooks.example/in', secret: 'hunter2' }).problems).to.deep.equal([
      { field: 'secret', message: 'is not a value the plugin accepts (not shown: the setting is secret)' },
    ]);
    // another setting's message quoting it shows its name
    expect(settingProblems(mod, forwarder, { url: 'https://u:longer-secret-value@hooks.example/in', secret: 'longer-secret-value' }).problems).to.deep.equal([
      { field: 'url', message: 'no credentials in a url (https://u:[secret secret]@hooks.example/in)' },
    ]);
  });
});
