import { expect } from 'chai';
import type { Knex } from 'knex';
import { BaseModel } from '../../src/db/model.js';
import { migratedSqlite } from '../support/service.js';

/** The model layer's base (src/db/model.ts): what it checks itself, on an embedded database. */
describe('the model layer', () => {
  let db: Knex;
  let drop: () => Promise<void>;

  before(async () => {
    ({ db, drop } = await migratedSqlite());
  });

  after(async () => {
    await drop?.();
  });

  class Group extends BaseModel {
    static override tableName = 'groups';
    static override idColumn = 'name';
    static override jsonAttributes = ['permissions'];
    declare name: string;
    declare permissions: string[];
  }

  it('writes a model through its own validator, without a JSON schema', async () => {
    const name = `model-test-${Date.now()}`;
    await Group.query(db).insert({ name, permissions: [] });
    expect((await Group.query(db).findOne({ name }))?.name).to.equal(name);
  });

  it('refuses a model that declares a JSON schema, rather than leaving it unchecked', async () => {
    class Checked extends Group {
      static override jsonSchema = { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 100 } } };
    }
    const failed = await Checked.query(db)
      .insert({ name: 'short', permissions: [] })
      .then(
        () => null,
        (err: Error) => err,
      );
    expect(failed?.message).to.match(/Checked declares a jsonSchema/);
    expect(await Group.query(db).findOne({ name: 'short' })).to.equal(undefined);
  });
});
