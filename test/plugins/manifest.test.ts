import { expect } from 'chai';
import { ManifestError, parseManifest, pluginCatalog } from '../../src/plugins/manifest.js';
import { settingEnvName } from '../../src/plugins/settings.js';

const valid = () => ({
  id: 'demo',
  name: 'Demo',
  version: '1.2.3',
  entry: 'index.mjs',
  permissions: { subscribe: ['notification:outbound'], emit: ['system:notify'] },
  roles: [{ id: 'operator', label: 'Operator', permissions: ['plugin:demo:run', 'plugin:demo:route:/ops'], auto_map_groups: ['INT_USER'] }],
  permissions_declared: [{ id: 'run', description: 'run things' }],
  routes: [{ path: '/ops', label: 'Ops' }],
  socket_providers: { provides: ['demosock'], uses: ['container'] },
  auth_providers: ['demo-sso'],
  settings: { url: { description: 'where' }, token: { secret: true } },
});

function fieldsOf(raw: unknown): string[] {
  try {
    parseManifest(raw);
  } catch (err) {
    expect(err).to.be.instanceOf(ManifestError);
    return (err as ManifestError).details.map((d) => d.field);
  }
  throw new Error('manifest was accepted');
}

describe('plugin manifest', () => {
  it('accepts a full manifest and fills the defaults', () => {
    const m = parseManifest(valid());
    expect(m.description).to.equal('');
    expect(m.settings.url).to.deep.equal({ description: 'where', default: null, secret: false, sent_to: [] });
    expect(m.settings.token.secret).to.equal(true);
    const min = parseManifest({ id: 'x', name: 'X', version: '0.1.0', entry: 'a.mjs' });
    expect(min.permissions).to.deep.equal({ subscribe: [], emit: [] });
    expect(min.socket_providers).to.deep.equal({ provides: [], uses: [] });
    expect(min.roles).to.deep.equal([]);
  });

  it('names every bad field', () => {
    const fields = fieldsOf({
      id: 'Bad Id',
      version: 'one',
      entry: '/etc/passwd',
      permissions: { subscribe: ['nocolon'], emit: 'system:notify' },
      roles: [{ id: 'r', permissions: [] }],
      routes: [{ path: 'no-slash' }],
      socket_providers: { provides: ['Bad Name'] },
      auth_providers: ['local'],
      surprise: true,
    });
    expect(fields).to.include.members([
      'id',
      'name',
      'version',
      'entry',
      'permissions.subscribe[0]',
      'permissions.emit',
      'roles[0].permissions',
      'routes[0].path',
      'socket_providers.provides[0]',
      'auth_providers[0]',
      'surprise',
    ]);
  });

  it("a role grants only the plugin's own permissions", () => {
    const raw = valid();
    raw.roles[0].permissions = ['plugin:demo:run', 'feature:admin.users', 'plugin:other:api:write', 'plugin:demo:undeclared'];
    expect(fieldsOf(raw)).to.deep.equal(['roles[0].permissions[1]', 'roles[0].permissions[2]', 'roles[0].permissions[3]']);
  });

  it('reserved topics cannot be claimed; custom permissions cannot shadow api / route', () => {
    const raw: any = valid();
    // the core's own events, and every event the bus carries between instances
    raw.permissions.emit = [
      'system:notify',
      'notification:outbound',
      'db:connected',
      'plugin:admin_changed',
      'notification:push',
      'auth:system_key_changed',
      'auth:credentials_revoked',
    ];
    raw.permissions.subscribe = ['socket:request'];
    raw.permissions_declared = [{ id: 'api:write' }];
    expect(fieldsOf(raw)).to.have.members([
      'permissions.emit[1]',
      'permissions.emit[2]',
      'permissions.emit[3]',
      'permissions.emit[4]',
      'permissions.emit[5]',
      'permissions.emit[6]',
      'permissions.subscribe[0]',
      'permissions_declared[0].id',
    ]);
    const both: any = valid();
    both.socket_providers.uses = ['demosock'];
    expect(fieldsOf(both)).to.deep.equal(['socket_providers.uses']);
  });

  it('the catalog holds the plugin, its API, route and declared permissions', () => {
    const ids = pluginCatalog(parseManifest(valid())).map((e) => e.id);
    expect(ids).to.deep.equal(['plugin:demo', 'plugin:demo:api:read', 'plugin:demo:api:write', 'plugin:demo:route:/ops', 'plugin:demo:run']);
  });

  it('settings come from SERVICE_PLUGIN_<ID>_<KEY>', () => {
    expect(settingEnvName('outbound-forwarder', 'max_attempts')).to.equal('SERVICE_PLUGIN_OUTBOUND_FORWARDER_MAX_ATTEMPTS');
    expect(settingEnvName('a.b', 'url')).to.equal('SERVICE_PLUGIN_A_B_URL');
  });
});
