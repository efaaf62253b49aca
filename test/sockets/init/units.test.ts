import { expect } from 'chai';
import { compileGlob, isTemplate, isUnitName, UnitAllowList } from '../../../src/sockets/init/units.js';

/** The allow-list's globs (fnmatch as systemd calls it for unit patterns) and the unit name grammar. */
describe('init: unit globs and names', () => {
  const cases: Array<[pattern: string, name: string, matches: boolean]> = [
    ['nginx.service', 'nginx.service', true],
    ['nginx.service', 'nginx.service2', false],
    ['nginx.service', 'xnginx.service', false],
    ['app-*.service', 'app-.service', true],
    ['app-*.service', 'app-web.service', true],
    ['app-*.service', 'app-web.socket', false],
    ['app-*.service', 'xapp-web.service', false],
    ['*', 'anything.target', true],
    ['*.service', '.service', true],
    ['a*b*c.service', 'aXXbYYbZc.service', true],
    ['a*b*c.service', 'aXXcYYb.service', false],
    ['a**.service', 'abc.service', true],
    ['svc-?.service', 'svc-1.service', true],
    ['svc-?.service', 'svc-12.service', false],
    ['svc-?.service', 'svc-.service', false],
    ['svc-[ab].service', 'svc-a.service', true],
    ['svc-[ab].service', 'svc-c.service', false],
    ['svc-[a-c].service', 'svc-b.service', true],
    ['svc-[a-c].service', 'svc-d.service', false],
    ['svc-[!a-c].service', 'svc-d.service', true],
    ['svc-[!a-c].service', 'svc-a.service', false],
    ['svc-[^a-c].service', 'svc-a.service', false],
    ['svc-[]x].service', 'svc-].service', true],
    ['svc-[-x].service', 'svc--.service', true],
    ['svc-[x-].service', 'svc--.service', true],
    ['svc-[[:digit:]].service', 'svc-7.service', true],
    ['svc-[[:digit:]].service', 'svc-x.service', false],
    ['svc-[[:alpha:]_].service', 'svc-_.service', true],
    // an unclosed bracket is a plain character
    ['svc-[ab.service', 'svc-[ab.service', true],
    ['svc-[ab.service', 'svc-a.service', false],
    // FNM_NOESCAPE: a backslash is itself
    ['svc\\x2d*.service', 'svc\\x2done.service', true],
    ['svc\\*.service', 'svc\\abc.service', true],
    ['svc\\*.service', 'svc*.service', false],
    // the dot and the slash have no special meaning (no FNM_PERIOD, no FNM_PATHNAME)
    ['*a.service', '.a.service', true],
    ['a?b.service', 'a/b.service', true],
    // a whole-name match: a glob is not searched for inside a name
    ['web', 'web.service', false],
    ['getty@*.service', 'getty@tty1.service', true],
  ];
  for (const [pattern, name, matches] of cases) {
    it(`${pattern} ${matches ? 'matches' : 'does not match'} ${name}`, () => {
      expect(compileGlob(pattern)(name)).to.equal(matches);
    });
  }

  it('an allow-list allows a name any of its globs matches', () => {
    const list = new UnitAllowList(['nginx.service', 'app-*.service']);
    expect(list.allows('nginx.service')).to.equal(true);
    expect(list.allows('app-x.service')).to.equal(true);
    expect(list.allows('sshd.service')).to.equal(false);
    expect(new UnitAllowList([]).allows('nginx.service')).to.equal(false);
  });

  it("unit names: systemd's grammar, a known type, at most 255 characters, no template", () => {
    for (const good of [
      'nginx.service',
      'getty@tty1.service',
      'a.b-c_d:e.timer',
      'dev-sda1.device',
      'home.mount',
      'x\\x2dy.service',
      '-.mount',
      'a@b@c.service',
    ])
      expect(isUnitName(good), good).to.equal(true);
    for (const bad of [
      'nginx',
      'nginx.exe',
      '.service',
      '@x.service',
      'getty@.service',
      'a b.service',
      'a/b.service',
      '../a.service',
      'ä.service',
      `${'a'.repeat(248)}.service`,
    ])
      expect(isUnitName(bad), bad).to.equal(false);
    expect(isUnitName(`${'a'.repeat(247)}.service`)).to.equal(true);
    expect(isTemplate('getty@.service')).to.equal(true);
    expect(isTemplate('getty@tty1.service')).to.equal(false);
  });
});
