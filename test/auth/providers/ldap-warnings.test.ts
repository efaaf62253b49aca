import { expect } from 'chai';
import { LdapProvider } from '../../../src/auth/providers/ldap.js';
import { capturingLogger } from '../../sockets/helpers.js';

const insecure = { url: 'ldap://dc.example.org', baseDN: 'dc=example,dc=org', tlsVerify: false };
const said = (text: string) => text.split('\n').filter((l) => l.includes('ldap_insecure_setting')).length;

/** The settings' warnings (plain ldap://, certificate checks off) are said once per service's chain, not once per process. */
describe('LDAP settings warnings', () => {
  it("are logged once per chain: a rebuild says nothing again, another service's chain says them for itself, a check of unsaved settings says nothing", () => {
    const first = capturingLogger('info');
    new LdapProvider(insecure, first.logger);
    expect(said(first.text())).to.equal(2);
    new LdapProvider(insecure, first.logger);
    expect(said(first.text())).to.equal(2);

    // a second service in the same process (the suite runs many): its own chain, its own warnings
    const second = capturingLogger('info');
    new LdapProvider(insecure, second.logger);
    expect(said(second.text())).to.equal(2);

    const check = capturingLogger('info');
    new LdapProvider(insecure, check.logger, { diagnostic: true });
    expect(said(check.text())).to.equal(0);
  });
});
