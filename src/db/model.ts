import { Model, snakeCaseMappers, type Pojo } from 'objection';

/**
 * The base of the model layer (objection over the service's knex): camelCase properties in
 * TypeScript, snake_case columns in the database, list columns declared as `jsonAttributes`
 * (JSON text on both dialects). No model is bound to a knex instance: every query names the
 * one it runs on (`Model.query(db)`), since a process may hold several databases (tests, the
 * CLI). Credential lookups on the request path stay hand-written SQL (docs/architecture.md).
 */
export class BaseModel extends Model {
  static override useLimitInFirst = true;
  /** properties SQLite answers as 0/1 */
  static booleanAttributes: string[] = [];

  static override get columnNameMappers() {
    return snakeCaseMappers();
  }

  override $parseDatabaseJson(json: Pojo): Pojo {
    const parsed = super.$parseDatabaseJson(json);
    for (const name of (this.constructor as typeof BaseModel).booleanAttributes) if (name in parsed) parsed[name] = Boolean(parsed[name]);
    return parsed;
  }
}
