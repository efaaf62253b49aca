import { Model, snakeCaseMappers, Validator, type Pojo, type ValidatorArgs } from 'objection';

/**
 * The validator of every model of ours: input is checked with Joi where it enters (src/http), not
 * by a model's JSON schema. objection's default (AjvValidator) builds two Ajv instances at a
 * model's first use (a start's seed) to check a schema no model declares. A model that declares
 * one (`jsonSchema`, or a `$beforeValidate` that returns one) is refused at its first write
 * rather than silently left unchecked.
 */
class WithoutJsonSchema extends Validator {
  override beforeValidate({ model, json, options }: ValidatorArgs): void {
    const modelClass = model.constructor as typeof Model;
    if (model.$beforeValidate(modelClass.jsonSchema, json, options))
      throw new Error(`${modelClass.tableName} has a JSON schema: models are not validated by schema here (src/db/model.ts)`);
  }

  override validate({ json }: ValidatorArgs): Pojo {
    return json;
  }
}

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

  static override createValidator(): Validator {
    return new WithoutJsonSchema();
  }

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
