import { expect } from 'chai';
import request from 'supertest';
import { activeUsers, notify, serviceClient, ServiceError, whoAmI } from '../../docs/client-example/example.js';
import { adminAuth, ADMIN, startService, type TestService } from '../support/service.js';

/**
 * The typed client of docs/client.md (openapi-typescript + openapi-fetch), run against a
 * service: what its types promise is what the service answers.
 */
describe('docs/client.md: a client typed by the API document', function () {
  let svc: TestService;
  let key: string;

  before(async function () {
    svc = await startService();
    key = (await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).send({ label: 'example program' }).expect(201)).body.token;
  });
  after(async function () {
    await svc?.destroy();
  });

  it('calls the API with an API key and reads typed answers', async function () {
    const client = serviceClient(svc.url, key);
    const me = await whoAmI(client);
    expect(me.username).to.equal(ADMIN.username);
    expect(me.permissions).to.include('feature:admin.users');
    const users = await activeUsers(client);
    expect(users.map((u) => u.username)).to.include(ADMIN.username);
    const sent = await notify(client, ADMIN.username, 'Deployed', 'release 1.2 is live');
    expect(sent.id).to.be.a('string');
    const history = await request(svc.url).get('/api/notifications').set('Authorization', adminAuth()).expect(200);
    expect(history.body.notifications.map((n: { id: string }) => n.id)).to.include(sent.id);
  });

  it('turns the error body into an exception naming the code and the field', async function () {
    const client = serviceClient(svc.url, key);
    const err = await notify(client, ADMIN.username, '', 'no title').then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(ServiceError);
    const e = err as ServiceError;
    expect(e.status).to.equal(400);
    expect(e.body.error.code).to.equal('validation_failed');
    expect((e.body.error.details as Array<{ field: string }>).map((d) => d.field)).to.include('title');
    const refused = await whoAmI(serviceClient(svc.url, 'not-a-key')).then(
      () => null,
      (x: unknown) => x as ServiceError,
    );
    expect(refused?.status).to.equal(401);
    expect(refused?.body.error.code).to.equal('unauthorized');
  });
});
