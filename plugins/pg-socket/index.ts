import { promises as fsp } from 'node:fs';
import path from 'node:path';
// type-only imports: erased at run time, so this folder works wherever SERVICE_PLUGINS_DIR points
import type { ProviderCapabilities, ProviderOperation } from '../../src/sockets/base-provider.js';
import type { PluginContext, PluginSdk } from '../../src/plugins/types.js';
import { sslProbe, startupProbe } from './pg-wire.js';

/**
 * Example plugin 2: a socket provider for the local PostgreSQL server's UNIX socket, declared
 * in plugin.json (socket_providers.provides: ["pgsql"]) and used through core only:
 *   socket:request {operation: "pgsql:health"}       -> is the server alive and speaking protocol 3?
 *   socket:request {operation: "pgsql:server_info"}  -> the authentication it wants, and its
 *                                                      startup parameters when it lets the role in
 * Both declare `http`, so core serves them at GET /api/socket/pgsql/health and /server-info too
 * (for signed-in callers; server_info with its permission) and lists them in /openapi.json
 * while the plugin runs.
 */

const IDENT = /^[A-Za-z_][A-Za-z0-9_$-]{0,62}$/;

/** The settings' rules: checked by the host before a change is stored; setup gets the values converted. */
export function settingsSchema({ Joi }: PluginSdk) {
  return Joi.object({
    socket_path: Joi.string().pattern(/^\//, 'absolute path').max(4096).required(),
    user: Joi.string().pattern(IDENT, 'role name').required(),
    database: Joi.string().pattern(IDENT, 'database name').required(),
    timeout_ms: Joi.number().integer().min(100).max(60_000).required(),
  });
}

export function setup(ctx: PluginContext): void {
  const { Joi, SocketError } = ctx.sdk;
  const settings = ctx.settings as unknown as { socket_path: string; user: string; database: string; timeout_ms: number };
  const socketPath = path.normalize(settings.socket_path);

  class PgSocketProvider extends ctx.sdk.SocketProvider {
    readonly name = 'pgsql';
    readonly socket_path = socketPath;
    // a database server: nothing of a container daemon's (spawn, cleanup, mounts)
    readonly capabilities: ProviderCapabilities = { can_verify_mounts: false, can_repair_permissions: false };

    async isAvailable(): Promise<boolean> {
      try {
        const st = await fsp.stat(this.socket_path);
        this.lastAvailable = st.isSocket() && (await sslProbe(this.socket_path, settings.timeout_ms)).reachable;
      } catch {
        this.lastAvailable = false;
      }
      return this.lastAvailable;
    }

    override async health_check(): Promise<Record<string, unknown>> {
      try {
        const probe = await sslProbe(this.socket_path, settings.timeout_ms);
        this.lastAvailable = true;
        return { healthy: true, socket_path: this.socket_path, ...probe, error: null };
      } catch (err) {
        this.lastAvailable = false;
        const e = err as NodeJS.ErrnoException;
        return { healthy: false, socket_path: this.socket_path, reachable: false, error: e.code ?? e.message };
      }
    }

    operations(): Record<string, ProviderOperation> {
      return {
        health: {
          schema: Joi.object({}),
          permission: null,
          // health reports an outage itself instead of answering `unavailable`
          requires_available: false,
          run: () => this.health_check(),
          // whether the server is alive is anyone's; where its socket lives is for holders of this plugin's read
          shownTo: (result, may) => (may(`plugin:${ctx.id}:api:read`) ? result : { ...(result as object), socket_path: '', host_paths_hidden: true }),
          result: Joi.object({
            healthy: Joi.boolean(),
            socket_path: Joi.string().allow('').description("empty for a caller without this plugin's read permission (host_paths_hidden)"),
            host_paths_hidden: Joi.boolean().optional().description('true when socket_path was left out for this caller'),
            reachable: Joi.boolean().description('the server answered the SSLRequest'),
            ssl_supported: Joi.boolean().optional().description('when reachable'),
            latency_ms: Joi.number().min(0).optional().description('when reachable'),
            error: Joi.string().allow(null).description('why it is not reachable (an errno code such as ENOENT, or a message)'),
          }),
          http: {
            method: 'GET',
            summary: 'PostgreSQL server health (protocol probe, no password sent)',
            response: 'the probe; a server that is not reachable is healthy: false, not an error',
          },
        },
        server_info: {
          schema: Joi.object({ database: Joi.string().pattern(IDENT, 'database name') }),
          // reveals the server version: a read of this plugin's API (api:read satisfies it)
          permission: `plugin:${ctx.id}:api:read`,
          run: async (args: { database?: string }) => {
            try {
              return {
                socket_path: this.socket_path,
                user: settings.user,
                database: args.database ?? settings.database,
                ...(await startupProbe(this.socket_path, {
                  user: settings.user,
                  database: args.database ?? settings.database,
                  timeoutMs: settings.timeout_ms,
                })),
              };
            } catch (err) {
              const e = err as NodeJS.ErrnoException;
              throw new SocketError('unavailable', `PostgreSQL socket ${this.socket_path}: ${e.code ?? e.message}`);
            }
          },
          result: Joi.object({
            socket_path: Joi.string(),
            user: Joi.string(),
            database: Joi.string(),
            accepted: Joi.boolean().description('the server let the role in without a password (trust / peer)'),
            auth: Joi.string()
              .allow(null)
              .description('the authentication the server asked for (ok = none; md5_password, sasl, ...); null when it answered with an error first'),
            sasl_mechanisms: Joi.array().items(Joi.string()).optional().description('for auth sasl: the mechanisms offered'),
            parameters: Joi.object()
              .pattern(Joi.string(), Joi.string())
              .description('the startup parameters (server_version, encodings, TimeZone) when accepted'),
            error: Joi.object({ code: Joi.string().allow(null), message: Joi.string() })
              .allow(null)
              .description('an error the server answered with (e.g. no such database)'),
            latency_ms: Joi.number().min(0),
          }),
          http: {
            method: 'GET',
            summary: 'The authentication PostgreSQL asks of the role, and its startup parameters when it lets the role in',
            response: 'what the server answered the startup message',
          },
        },
      };
    }
  }

  const provider = ctx.registerSocketProvider(PgSocketProvider);
  ctx.log.info({ socket_path: provider.socket_path }, 'pgsql socket provider registered');
}
