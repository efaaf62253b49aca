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
