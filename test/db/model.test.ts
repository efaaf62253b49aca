import { expect } from 'chai';
import type { Knex } from 'knex';
import { AjvValidator, Model, type JSONSchema } from 'objection';
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

  const failureOf = (write: PromiseLike<unknown>) =>
    Promise.resolve(write).then(
      () => null,
      (err: Error) => err,
    );

  it('writes a model through its own validator, without a JSON schema', async () => {
    const name = `model-test-${Date.now()}`;
    await Group.query(db).insert({ name, permissions: [] });
    expect((await Group.query(db).findOne({ name }))?.name).to.equal(name);
  });

  it('refuses a model that declares a JSON schema, rather than leaving it unchecked', async () => {
    class Checked extends Group {
      static override jsonSchema: JSONSchema = { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 100 } } };
    }
    const failed = await failureOf(Checked.query(db).insert({ name: 'short', permissions: [] }));
    expect(failed?.message).to.match(/^groups has a JSON schema/);
    expect(await Group.query(db).findOne({ name: 'short' })).to.equal(undefined);
  });

  it('refuses a schema a model hands over in $beforeValidate', async () => {
    class Hooked extends Group {
      override $beforeValidate(): JSONSchema {
        return { type: 'object', properties: { name: { type: 'string', maxLength: 1 } } };
      }
    }
    const failed = await failureOf(Hooked.query(db).insert({ name: 'hooked', permissions: [] }));
    expect(failed?.message).to.match(/^groups has a JSON schema/);
    expect(await Group.query(db).findOne({ name: 'hooked' })).to.equal(undefined);
  });

  it('makes no Ajv for a model of ours; a many-to-many relation writes its join table (a model objection makes itself)', async () => {
    expect(BaseModel.createValidator()).not.to.be.instanceOf(AjvValidator);
    await db.schema.createTable('model_test_tags', (t) => t.string('name').primary());
    await db.schema.createTable('model_test_group_tags', (t) => {
      t.string('group_name').notNullable();
      t.string('tag_name').notNullable();
    });
    class Tag extends BaseModel {
      static override tableName = 'model_test_tags';
      static override idColumn = 'name';
      declare name: string;
    }
    class Tagged extends Group {
      static override relationMappings = () => ({
        tags: {
          relation: Model.ManyToManyRelation,
          modelClass: Tag,
          join: {
            from: 'groups.name',
            through: { from: 'model_test_group_tags.group_name', to: 'model_test_group_tags.tag_name' },
            to: 'model_test_tags.name',
          },
        },
      });
    }
    await Group.query(db).insert({ name: 'tagged', permissions: [] });
    await Tag.query(db).insert({ name: 'blue' });
    const group = await Tagged.query(db).findById('tagged');
    await group!.$relatedQuery('tags', db).relate('blue');
    expect(await db('model_test_group_tags').select('group_name', 'tag_name')).to.deep.equal([{ group_name: 'tagged', tag_name: 'blue' }]);
  });
});
