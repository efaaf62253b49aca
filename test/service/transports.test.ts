import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { adminAuth, basic, startService, testEnv, type TestService } from '../support/service.js';
import { cli } from '../cli/helpers.js';
import { WsClient } from '../gateway/helpers.js';

/** What a transport answered, as the table compares it. */
type Answer = 'ok' | 'denied';
/** Who acts: a plain administrator (INT_ADMIN, not superadmin) or a trusted actor (a superadmin over HTTP and ws, the CLI). */
type Who = 'plain' | 'trusted';

interface Event {
  action: string;
  outcome: string;
  actor: string;
  /** the address the actor acted from: the client's over HTTP and ws, none from the CLI */
  ip: string | null;
  target: { type: string; id: string | null; name: string | null };
}

/** What a cell says of the target its event must name: by name (users, settings) or by id (keys, socket operations). */
type Target = { name: string } | { id: string };

const PASSWORD = 'transport-test-password-1';

/**
 * One path per rule, walked over every transport (docs/architecture.md): each privileged action
 * a transport offers gives the same answer and the same audit event whether it comes over HTTP,
 * ws or the CLI, for a plain administrator (refused, denied) and a trusted actor (done, success).
 */
describe('every transport, the same rule and the same event', function () {
  this.timeout(60_000);
  let svc: TestService;
  let botId: string;
  let n = 0;
  const api = () => request(svc.url);
  const as = (who: Who) => (who === 'plain' ? { Authorization: basic('plainer', PASSWORD) } : { Authorization: adminAuth() });
  const status = (res: { status: number; body: { error?: { message?: string } } }): Answer => {
    if (res.status >= 200 && res.status < 300) return 'ok';
    expect(res.status, JSON.stringify(res.body)).to.equal(403);
    return 'denied';
  };
  const exit = (run: { code: number; stderr: string }): Answer => {
    if (run.code === 0) return 'ok';
    expect(run.stderr).to.match(/only a superadmin|may not|missing permission/);
    return 'denied';
  };
  const cliEnv = () => testEnv(svc.dataDir, svc.databaseUrl);
  const fresh = () => `t${++n}-${Date.now().toString(36)}`;

  before(async () => {
    svc = await startService({ env: { SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    await api()
      .post('/api/users')
      .set(as('trusted'))
      .send({ username: 'plainer', password: PASSWORD, groups: ['INT_ADMIN'] })
      .expect(201);
    await api()
      .post('/api/groups')
      .set(as('trusted'))
      .send({ name: 'dockers', permissions: ['socket:container:*'] })
      .expect(201);
    botId = ((await api().get('/api/users').set(as('trusted')).expect(200)).body.users as Array<{ id: string; username: string }>).find(
      (u) => u.username === 'bot',
    )!.id;
    fs.mkdirSync(path.join(svc.dataDir, 'managed', 'work'), { recursive: true });
  });
  after(async () => svc?.destroy());

  /** The events `who` left after `seq`. */
  async function eventsAfter(seq: number, actor: string): Promise<Event[]> {
    await svc.service.iam.audit.flush();
    const rows = await svc.service.db('audit_events').where('seq', '>', seq).andWhere({ actor_username: actor }).orderBy('seq');
    return rows.map((r) => ({
      action: r.action,
      outcome: r.outcome,
      actor: r.actor_username,
      ip: r.actor_ip,
      target: { type: r.target_type, id: r.target_id, name: r.target_name },
    }));
  }
  async function head(): Promise<number> {
    await svc.service.iam.audit.flush();
    return Number((await svc.service.db('audit_events').max({ n: 'seq' }).first())?.n ?? 0);
  }

  /** A bot key to revoke (made by the CLI, outside the cell that revokes it). */
  async function botKey(): Promise<string> {
    const run = await cli(cliEnv(), ['--json', 'key', 'issue', '--user', 'bot', '--label', fresh()]);
    expect(run.code, run.stderr).to.equal(0);
    return run.json().id;
  }

  interface Row {
    action: string;
    /** the event's target: its type, and its name as the row made it */
    target: string;
    /** what a plain administrator is answered (every row here refuses one) */
    plain: Answer;
    http?: (who: Who) => Promise<{ answer: Answer; target: Target }>;
    ws?: (who: Who) => Promise<{ answer: Answer; target: Target }>;
    cli?: () => Promise<{ answer: Answer; target: Target }>;
  }

  const rows: Row[] = [
    {
      action: 'user.created',
      target: 'user',
      plain: 'denied',
      http: async (who) => {
        const name = fresh();
        return {
          answer: status(
            await api()
              .post('/api/users')
              .set(as(who))
              .send({ username: name, password: PASSWORD, groups: ['dockers'] }),
          ),
          target: { name },
        };
      },
      cli: async () => {
        const name = fresh();
        return { answer: exit(await cli(cliEnv(), ['user', 'create', name, '--group', 'dockers', '--password-stdin'], `${PASSWORD}\n`)), target: { name } };
      },
    },
    {
      action: 'user.updated',
      target: 'user',
      plain: 'denied',
      http: async (who) => {
        const name = fresh();
        const id = (
          await api()
            .post('/api/users')
            .set(as('trusted'))
            .send({ username: name, password: PASSWORD, groups: ['INT_USER'] })
            .expect(201)
        ).body.id;
        return {
          answer: status(
            await api()
              .patch(`/api/users/${id}`)
              .set(as(who))
              .send({ groups: ['INT_USER', 'dockers'] }),
          ),
          target: { name },
        };
      },
      cli: async () => {
        const name = fresh();
        await api()
          .post('/api/users')
          .set(as('trusted'))
          .send({ username: name, password: PASSWORD, groups: ['INT_USER'] })
          .expect(201);
        return { answer: exit(await cli(cliEnv(), ['user', 'add-group', name, 'dockers'])), target: { name } };
      },
    },
    {
      action: 'user.password_changed',
      target: 'user',
      plain: 'denied',
      http: async (who) => ({
        answer: status(
          await api()
            .post(`/api/users/${botId}/password`)
            .set(as(who))
            .send({ new_password: `${fresh()}-bot-password` }),
        ),
        target: { name: 'bot' },
      }),
      cli: async () => ({ answer: exit(await cli(cliEnv(), ['user', 'set-password', 'bot'], `${fresh()}-bot-password\n`)), target: { name: 'bot' } }),
    },
    {
      action: 'auth.mfa_reset',
      target: 'user',
      plain: 'denied',
      http: async (who) => ({ answer: status(await api().delete(`/api/users/${botId}/mfa`).set(as(who))), target: { name: 'bot' } }),
      cli: async () => ({ answer: exit(await cli(cliEnv(), ['user', 'mfa-reset', 'bot'])), target: { name: 'bot' } }),
    },
    {
      action: 'key.issued',
      target: 'key',
      plain: 'denied',
      http: async (who) => {
        const label = fresh();
        return { answer: status(await api().post(`/api/users/${botId}/api-keys`).set(as(who)).send({ label })), target: { name: label } };
      },
      cli: async () => {
        const label = fresh();
        return { answer: exit(await cli(cliEnv(), ['key', 'issue', '--user', 'bot', '--label', label])), target: { name: label } };
      },
    },
    {
      action: 'key.revoked',
      target: 'key',
      plain: 'denied',
      http: async (who) => {
        const id = await botKey();
        return { answer: status(await api().delete(`/api/users/${botId}/api-keys/${id}`).set(as(who))), target: { id } };
      },
      cli: async () => {
        const id = await botKey();
        return { answer: exit(await cli(cliEnv(), ['key', 'revoke', id])), target: { id } };
      },
    },
    {
      action: 'system_key.changed',
      target: 'settings',
      plain: 'denied',
      http: async (who) => ({
        answer: status(
          await api()
            .put('/api/settings/system-api-key')
            .set(as(who))
            .send({ key: `system-key-${fresh()}-0123456789abcdef` }),
        ),
        target: { name: 'system API key' },
      }),
      cli: async () => ({
        answer: exit(await cli(cliEnv(), ['settings', 'set', 'system_api_key'], `system-key-${fresh()}-0123456789abcdef\n`)),
        target: { name: 'system API key' },
      }),
    },
    {
      action: 'socket.operation',
      target: 'socket',
      plain: 'denied',
      http: async (who) => ({
        answer: status(
          await api()
            .post('/api/socket/repair')
            .set(as(who))
            .send({ target_dir: path.join(svc.dataDir, 'managed', 'work'), mode: '0750' }),
        ),
        target: { id: 'mounts:repair' },
      }),
      ws: async (who) => {
        const ws = await WsClient.connect(svc, { headers: as(who) });
        try {
          const id = fresh();
          ws.send({
            event: 'socket:request',
            payload: { request_id: id, operation: 'mounts:repair', args: { target_dir: path.join(svc.dataDir, 'managed', 'work'), mode: '0750' } },
          });
          const res = (await ws.next('socket:response', (f) => f.payload.request_id === id)).payload;
          if (!res.ok) expect(res.error.code).to.equal('forbidden');
          return { answer: res.ok ? 'ok' : 'denied', target: { id: 'mounts:repair' } };
        } finally {
          await ws.close();
        }
      },
    },
  ];

  for (const row of rows) {
    it(`${row.action}: ${[row.http && 'HTTP', row.ws && 'ws', row.cli && 'CLI'].filter(Boolean).join(', ')}`, async () => {
      const cells: Array<{ transport: string; who: Who; actor: string; run: () => Promise<{ answer: Answer; target: Target }> }> = [];
      for (const who of ['plain', 'trusted'] as const) {
        const actor = who === 'plain' ? 'plainer' : 'admin';
        if (row.http) cells.push({ transport: 'HTTP', who, actor, run: () => row.http!(who) });
        if (row.ws) cells.push({ transport: 'ws', who, actor, run: () => row.ws!(who) });
      }
      if (row.cli) cells.push({ transport: 'CLI', who: 'trusted', actor: 'cli', run: row.cli });
      expect(cells.length, 'a privileged action offered by two transports at least').to.be.greaterThan(1);
      for (const cell of cells) {
        const before = await head();
        const { answer, target } = await cell.run();
        const expected = cell.who === 'plain' ? row.plain : 'ok';
        expect(answer, `${cell.transport} as ${cell.who}`).to.equal(expected);
        const events = (await eventsAfter(before, cell.actor)).filter((e) => e.action === row.action);
        // one event, the same for every transport: the action, its outcome, its target
        expect(events, `${cell.transport} as ${cell.who}: ${JSON.stringify(events)}`).to.have.length(1);
        const { id, name, ...rest } = events[0]!.target;
        expect({ ...events[0], target: { ...rest, ...('id' in target ? { id } : { name }) } }).to.deep.equal({
          action: row.action,
          outcome: expected === 'ok' ? 'success' : 'denied',
          actor: cell.actor,
          ip: cell.transport === 'CLI' ? null : '127.0.0.1',
          target: { type: row.target, ...target },
        });
      }
    });
  }
});
