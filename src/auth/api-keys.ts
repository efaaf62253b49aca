import Joi from 'joi';
import BetterSqlite3 from 'better-sqlite3';
import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { BaseModel } from '../db/model.js';
import { UserModel } from '../iam/store.js';
import { sha256 } from '../digest.js';
import { newToken, tokenPrefix } from './tokens.js';

export type CredentialKind = 'key' | 'session';

/** A per-user API key or web-session token (never its secret). */
export interface ApiKey {
  id: string;
  userId: string;
  kind: CredentialKind;
  label: string;
  prefix: string;
  scopes: string[] | null;
  createdAt: number;
  lastUsedAt: number | null;
  expiresAt: number | null;
  revokedAt: number | null;
  /** a web session: when its holder last proved a second factor (sign-in or step-up) */
  mfaAt: number | null;
  /** the key this one was minted with (it ends with it) */
  parentId?: string | null;
}

/** The objection model of `api_keys`; `owner` is the user the credential acts as. */
/* eslint-disable @typescript-eslint/no-unsafe-declaration-merging -- the model class takes its fields from the interface of its name (as src/iam/store.ts) */
interface ApiKeyModel extends ApiKey {
  tokenHash: string;
}
class ApiKeyModel extends BaseModel {
  static override tableName = 'api_keys';
  static override jsonAttributes = ['scopes'];
  /** null: the key is not narrowed to scopes */
  static override nullableAttributes = ['scopes'];
  static override get relationMappings() {
    return { owner: { relation: BaseModel.BelongsToOneRelation, modelClass: UserModel, join: { from: 'api_keys.user_id', to: 'users.id' } } };
  }
}
/* eslint-enable @typescript-eslint/no-unsafe-declaration-merging */

/** The shape of publicKey() for the API docs. */
export const publicKeySchema = {
  id: Joi.string(),
  kind: Joi.string().valid('key', 'session'),
  prefix: Joi.string(),
  label: Joi.string(),
  scopes: Joi.array().items(Joi.string()).allow(null),
  created_at: Joi.string().isoDate(),
  expires_at: Joi.string().isoDate().allow(null),
  last_used_at: Joi.string().isoDate().allow(null),
};

/** What the owner may see of a key after creation: never the token. */
export function publicKey(key: ApiKey) {
  const iso = (t: number | null) => (t ? new Date(t).toISOString() : null);
  return {
    id: key.id,
    kind: key.kind,
    label: key.label,
    prefix: key.prefix,
    scopes: key.scopes,
    created_at: iso(key.createdAt),
    last_used_at: iso(key.lastUsedAt),
    expires_at: iso(key.expiresAt),
  };
}

/** The public fields of a model instance (the token hash stays here). */
function apiKeyOf(m: ApiKeyModel): ApiKey {
  return {
    id: m.id,
    userId: m.userId,
    kind: m.kind,
    label: m.label,
    prefix: m.prefix,
    scopes: m.scopes ?? null,
    createdAt: m.createdAt,
    lastUsedAt: m.lastUsedAt ?? null,
    expiresAt: m.expiresAt ?? null,
    revokedAt: m.revokedAt ?? null,
    mfaAt: m.mfaAt ?? null,
    parentId: m.parentId ?? null,
  };
}

const TOUCH_INTERVAL_MS = 60_000;

/**
 * Per-user API keys and web-session tokens share one table: 256 random bits shown once, kept
 * as SHA-256 and found by that hash (one indexed lookup, no bcrypt on the request path).
 */
export class ApiKeyStore {
  private readonly touched = new Map<string, number>();

  /** SQLite only: a read-only connection of its own with prepared statements for the request path */
  private reader: { db: BetterSqlite3.Database; byHash: BetterSqlite3.Statement; byId: BetterSqlite3.Statement } | null = null;

  /**
   * `sqliteFile`: on SQLite, credential lookups use a separate read-only connection with
   * prepared statements (knex prepares every query anew, and its pool hop costs more than the
   * query). A separate connection sees committed rows only, never another request's open
   * transaction. On PostgreSQL lookups go through knex.
   */
  constructor(
    private readonly db: Knex,
    private readonly sqliteFile: string | null = null,
    /** called with the owner after any of their keys or sessions was revoked (live connections end) */
    private readonly onRevoked: (userId: string) => void = () => undefined,
  ) {}

  private sqliteReader() {
    if (!this.sqliteFile) return null;
    if (!this.reader) {
      const db = new BetterSqlite3(this.sqliteFile, { readonly: true, fileMustExist: true });
      db.pragma('busy_timeout = 5000');
      this.reader = { db, byHash: db.prepare(ApiKeyStore.LIVE_SQL.token_hash), byId: db.prepare(ApiKeyStore.LIVE_SQL.id) };
    }
    return this.reader;
  }

  close(): void {
    this.reader?.db.close();
    this.reader = null;
  }

  async create(
    userId: string,
    kind: CredentialKind,
    opts: { label?: string; scopes?: string[] | null; expiresAt?: number | null; mfaAt?: number | null; parentId?: string | null },
    trx: Knex = this.db,
  ) {
    const token = newToken(kind);
    const key = await ApiKeyModel.query(trx).insert({
      id: crypto.randomUUID(),
      userId,
      kind,
      label: opts.label ?? '',
      prefix: tokenPrefix(token),
      tokenHash: sha256(token),
      scopes: opts.scopes?.length ? opts.scopes : null,
      createdAt: Date.now(),
      lastUsedAt: null,
      expiresAt: opts.expiresAt ?? null,
      revokedAt: null,
      mfaAt: opts.mfaAt ?? null,
      parentId: opts.parentId ?? null,
    });
    return { token, key: apiKeyOf(key) };
  }

  /** A live credential by its token's SHA-256: not revoked, not expired, owner not disabled. */
  async lookupHash(hash: string): Promise<ApiKey | null> {
    return this.live('token_hash', hash);
  }

  /** A live credential by id (the cookie session points at its web-session token this way). */
  async lookupById(id: string): Promise<ApiKey | null> {
    return this.live('id', id);
  }

  // hand-written SQL on the request path: building this join with the query builder costs
  // several times the query itself
  private static readonly LIVE_SQL = {
    token_hash: 'select k.*, u.disabled as owner_disabled from api_keys k join users u on u.id = k.user_id where k.token_hash = ?',
    id: 'select k.*, u.disabled as owner_disabled from api_keys k join users u on u.id = k.user_id where k.id = ?',
  };

  private async live(by: 'token_hash' | 'id', value: string): Promise<ApiKey | null> {
    const reader = this.sqliteReader();
    // a row of LIVE_SQL: the key's columns and its owner's disabled flag
    let r: Record<string, unknown> | undefined;
    if (reader) {
      r = (by === 'id' ? reader.byId : reader.byHash).get(value) as Record<string, unknown> | undefined;
    } else {
      const res = await this.db.raw(ApiKeyStore.LIVE_SQL[by], [value]);
      r = (Array.isArray(res) ? res[0] : (res as { rows?: Record<string, unknown>[] } | undefined)?.rows?.[0]) as Record<string, unknown> | undefined;
    }
    if (!r) return null;
    const key = apiKeyOf(ApiKeyModel.fromDatabaseJson(r));
    const now = Date.now();
    if (key.revokedAt || (key.expiresAt && key.expiresAt <= now) || r.owner_disabled) return null;
    if (!key.lastUsedAt || now - key.lastUsedAt > TOUCH_INTERVAL_MS) this.touch(key.id, now);
    return key;
  }

  /** Notes a use of a credential: last_used_at is written at most once a minute per key, not on every request. */
  touch(id: string, now = Date.now()): void {
    const touched = this.touched.get(id) ?? 0;
    if (now - touched <= TOUCH_INTERVAL_MS) return;
    // remembered here, so concurrent requests of one key do not all write
    this.touched.set(id, now);
    if (this.touched.size > 10_000) this.touched.clear();
    ApiKeyModel.query(this.db)
      .findById(id)
      .patch({ lastUsedAt: now })
      .catch(() => undefined);
  }

  /** The subset of `ids` that are live credentials (chunked: one query per 500 ids). */
  async liveIds(ids: string[]): Promise<Set<string>> {
    const live = new Set<string>();
    const now = Date.now();
    for (let i = 0; i < ids.length; i += 500) {
      const rows = await ApiKeyModel.query(this.db)
        .joinRelated('owner')
        .whereIn('api_keys.id', ids.slice(i, i + 500))
        .whereNull('api_keys.revoked_at')
        .where((q) => q.whereNull('api_keys.expires_at').orWhere('api_keys.expires_at', '>', now))
        .where('owner.disabled', false)
        .select('api_keys.id');
      for (const r of rows) live.add(r.id);
    }
    return live;
  }

  async listFor(userId: string): Promise<ApiKey[]> {
    const now = Date.now();
    const keys = await ApiKeyModel.query(this.db)
      .where({ user_id: userId })
      .whereNull('revoked_at')
      .where((q) => q.whereNull('expires_at').orWhere('expires_at', '>', now))
      .orderBy('created_at', 'desc');
    return keys.map(apiKeyOf);
  }

  async get(id: string): Promise<ApiKey | null> {
    const key = await ApiKeyModel.query(this.db).findById(id);
    return key ? apiKeyOf(key) : null;
  }

  /** Notes that the holder of a web session has just proved a second factor (step-up). */
  async markVerified(id: string, at = Date.now()): Promise<void> {
    await ApiKeyModel.query(this.db).findById(id).patch({ mfaAt: at });
  }

  /** When the holder of a web session last proved a second factor (null: never, or no such session). */
  async verifiedAt(id: string): Promise<number | null> {
    const row = await ApiKeyModel.query(this.db).findById(id).select('mfa_at');
    return row?.mfaAt ?? null;
  }

  /**
   * Revokes one live credential of `userId` and the keys minted with it (and theirs): what ended,
   * that one first, each with its label (each is a revocation the trail records). Empty: no such
   * live credential.
   */
  async revoke(userId: string, id: string, trx: Knex = this.db): Promise<Array<{ id: string; label: string }>> {
    const now = Date.now();
    const own = await ApiKeyModel.query(trx).where({ id, user_id: userId }).whereNull('revoked_at').select('id', 'label').first();
    const ended: Array<{ id: string; label: string }> = [];
    if (own && (await ApiKeyModel.query(trx).where({ id }).whereNull('revoked_at').patch({ revokedAt: now })) > 0) {
      ended.push({ id: own.id, label: own.label });
      // the keys minted with it, and theirs, end with it
      let parents = [id];
      for (let depth = 0; parents.length && depth < 32; depth++) {
        const children = (await ApiKeyModel.query(trx).whereIn('parent_id', parents).whereNull('revoked_at').select('id', 'label')).map((k) => ({
          id: k.id,
          label: k.label,
        }));
        if (children.length)
          await ApiKeyModel.query(trx)
            .whereIn(
              'id',
              children.map((c) => c.id),
            )
            .patch({ revokedAt: now });
        ended.push(...children);
        parents = children.map((c) => c.id);
      }
      // live connections are checked again once the revocation is visible: after the caller's
      // transaction commits, when it gave one
      const committed = (trx as unknown as Partial<Knex.Transaction>).executionPromise;
      if (committed)
        committed.then(
          () => this.onRevoked(userId),
          () => undefined,
        );
      else this.onRevoked(userId);
    }
    return ended;
  }

  /**
   * Revokes every credential of a user (of one kind), but `except`; the number revoked. With
   * `trx`, within the caller's transaction: live connections are checked again once it commits.
   */
  async revokeAllOf(userId: string, opts: { kind?: CredentialKind; except?: string | null; trx?: Knex } = {}): Promise<number> {
    const q = ApiKeyModel.query(opts.trx ?? this.db)
      .where({ user_id: userId })
      .whereNull('revoked_at');
    if (opts.kind) q.andWhere({ kind: opts.kind });
    if (opts.except) q.andWhereNot({ id: opts.except });
    const n = await q.patch({ revokedAt: Date.now() });
    const committed = (opts.trx as unknown as Partial<Knex.Transaction> | undefined)?.executionPromise;
    if (n > 0 && committed)
      committed.then(
        () => this.onRevoked(userId),
        () => undefined,
      );
    else if (n > 0) this.onRevoked(userId);
    return n;
  }
}
