import { Model, snakeCaseMappers, type Pojo } from 'objection';

/**
 * The base of the model layer (objection over the service's knex): camelCase properties in
 * TypeScript, snake_case columns in the database, list columns declared as `jsonAttributes`
 * (JSON text on both dialects, read back as lists of strings). No model is bound to a knex
 * instance: every query names the one it runs on (`Model.query(db)`), since a process may hold
 * several databases (tests, the CLI). Credential lookups on the request path stay hand-written
 * SQL (docs/architecture.md, "The model layer").
 */
export class BaseModel extends Model {
  static override useLimitInFirst = true;
  /** properties SQLite answers as 0/1 */
  static booleanAttributes: string[] = [];
  /** JSON attributes that may be null (no list at all); the others always read as a list */
  static nullableAttributes: string[] = [];

  static override get columnNameMappers() {
    return snakeCaseMappers();
  }

  override $parseDatabaseJson(json: Pojo): Pojo {
    const parsed = super.$parseDatabaseJson(json);
    const model = this.constructor as typeof BaseModel;
    for (const name of model.booleanAttributes) if (name in parsed) parsed[name] = Boolean(parsed[name]);
    // every JSON attribute here is a list of strings: text that is not one (written by hand,
    // or by another tool) reads as an empty list, never as a string a caller would iterate
    for (const name of model.jsonAttributes ?? []) {
      if (!(name in parsed) || (parsed[name] === null && model.nullableAttributes.includes(name))) continue;
      parsed[name] = Array.isArray(parsed[name]) ? parsed[name].map(String) : [];
    }
    return parsed;
  }
}
