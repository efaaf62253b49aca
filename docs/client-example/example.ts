/**
 * A program that calls service-core through a client typed by the service's API document
 * (docs/client.md). `service-core.ts` holds the types openapi-typescript wrote from the
 * document:
 *
 *   npx openapi-typescript http://localhost:8080/openapi.json -o service-core.ts
 *
 * `npm run typecheck` in this repository writes it from the current route definitions and
 * type-checks this file against it; test/client/example.test.ts runs it against a service.
 */
import createClient, { type Client } from 'openapi-fetch';
import type { components, paths } from './service-core.js';

export type ServiceClient = Client<paths>;
export type User = components['schemas']['User'];
type ErrorBody = components['schemas']['Error'];

/** A client that authenticates every call with an API key. */
export function serviceClient(baseUrl: string, apiKey: string): ServiceClient {
  return createClient<paths>({ baseUrl, headers: { 'X-API-Key': apiKey } });
}

/** The service's error body as an exception: its code and message, and what it said of each field. */
export class ServiceError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(`${status} ${body.error.code}: ${body.error.message}`);
  }
}

function failed(response: Response, error: unknown): ServiceError {
  const body = error as Partial<ErrorBody> | undefined;
  // a proxy in front may answer without the service's error body (a 502 page, a 431 with none)
  if (!body?.error) return new ServiceError(response.status, { error: { code: 'internal', message: response.statusText || 'no error body' } });
  return new ServiceError(response.status, body as ErrorBody);
}

/** Who the key belongs to. */
export async function whoAmI(client: ServiceClient): Promise<{ username: string; permissions: string[] }> {
  const me = await client.GET('/api/me');
  if (!me.data) throw failed(me.response, me.error);
  const access = await client.GET('/api/me/access');
  if (!access.data) throw failed(access.response, access.error);
  return { username: me.data.username, permissions: access.data.permissions };
}

/** The users who are not disabled (needs feature:admin.users). */
export async function activeUsers(client: ServiceClient): Promise<User[]> {
  const { data, error, response } = await client.GET('/api/users');
  if (!data) throw failed(response, error);
  return data.users.filter((u) => !u.disabled);
}

/** Sends one user a notification (needs feature:notifications.send); answers its id and seq. */
export async function notify(client: ServiceClient, user: string, title: string, message: string): Promise<{ id: string; seq: number | null }> {
  const { data, error, response } = await client.POST('/api/notifications', { body: { user, title, message, level: 'info' } });
  if (!data) throw failed(response, error);
  return { id: data.id, seq: data.seq };
}
