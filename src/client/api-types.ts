/**
 * The HTTP API's shapes under short names, for the browser pages, the client library and the
 * server code that builds those answers. Nothing here is written by hand: each is a component
 * or an operation of the API document, as openapi-typescript wrote them into ./openapi.ts
 * (`npm run api:types`, from the route definitions' joi schemas). A server change that changes
 * an answer changes these types, and the type check shows every reader it breaks.
 */
import type { components, paths } from './openapi.js';

export type Schemas = components['schemas'];

type Method = 'get' | 'put' | 'post' | 'patch' | 'delete';
type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
type JsonOf<R> = R extends { content: { 'application/json': infer B } } ? B : never;

/** The JSON answer of an operation's success (200, 201 or 202). */
export type Answer<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { responses: infer R } ? { [S in keyof R & (200 | 201 | 202)]: JsonOf<R[S]> }[keyof R & (200 | 201 | 202)] : never;

/** The JSON body an operation takes. */
export type RequestBody<P extends keyof paths, M extends Method> = Operation<P, M> extends { requestBody?: infer B } ? JsonOf<NonNullable<B>> : never;

/** GET /api/settings/auth: one field. */
export type AuthSettingView = Schemas['AuthSettingView'];
/** How a setting is written: see src/settings-table.ts. */
export type SettingKind = AuthSettingView['kind'];

/** GET /api/plugins: one plugin. */
export type PluginView = Schemas['PluginView'];
export type PluginState = PluginView['state'];
/** A role a plugin's manifest declares. */
export type PluginRole = Schemas['PluginRole'];

/** A passkey or security key as its owner sees it (GET /api/me/mfa). */
export type PasskeyView = Schemas['PasskeyView'];
/** GET /api/me/mfa: a user's second factors (never a secret). */
export type MfaStatus = Schemas['MfaStatus'];

/** The error body of every failed call. */
export type ErrorBody = Schemas['Error'];

/*
 * The socket providers' operations, typed from their HTTP routes: `dns:record_add` is
 * POST /api/socket/dns/record-add, so its args are that route's body (a read's: its query) and
 * its result that route's 200. Every built-in provider's operation is in the document, and
 * the providers of the plugins under plugins/ too (scripts/api-types.ts registers them all).
 */
type Dashed<S extends string> = S extends `${infer A}_${infer B}` ? `${A}-${Dashed<B>}` : S;
type Underscored<S extends string> = S extends `${infer A}-${infer B}` ? `${A}_${Underscored<B>}` : S;
type SocketPath = Extract<keyof paths, `/api/socket/${string}/${string}`>;
type PathOf<O extends string> = O extends `${infer P}:${infer N}` ? Extract<SocketPath, `/api/socket/${P}/${Dashed<N>}`> : never;
type QueryOf<P extends keyof paths> = Operation<P, 'get'> extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

/** Every provider operation the API document lists, as socket:request names it (`container:spawn`). */
export type SocketOperation = { [P in SocketPath]: P extends `/api/socket/${infer Prov}/${infer Op}` ? `${Prov}:${Underscored<Op>}` : never }[SocketPath];

/** an operation that takes no args takes `{}` (the document says `never`) */
type OrNoArgs<T> = [T] extends [never] ? Record<string, never> : T;

/** The args of an operation: its POST body, or its GET query. */
export type SocketArgs<O extends SocketOperation> = OrNoArgs<paths[PathOf<O>] extends { post: object } ? RequestBody<PathOf<O>, 'post'> : QueryOf<PathOf<O>>>;

/** What an operation's socket:response carries as `result` when `ok`. */
export type SocketResult<O extends SocketOperation> = paths[PathOf<O>] extends { post: object } ? Answer<PathOf<O>, 'post'> : Answer<PathOf<O>, 'get'>;
