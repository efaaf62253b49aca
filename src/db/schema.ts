import type { Knex } from 'knex';

/**
 * Declarative, additive schema: a migration names tables and columns; ensureSchema creates a
 * missing table whole and adds any missing column to an existing one. Running it again changes
 * nothing, and a database made by an older schema gains the new columns without losing rows.
 * A column added to an existing table must therefore be nullable or have a default.
 */
export type ColumnDef = (t: Knex.CreateTableBuilder) => void;

export interface TableDef {
  name: string;
  columns: Record<string, ColumnDef>;
  /** extra statements run after create (indexes, composite keys) */
  indexes?: { name: string; columns: string[]; unique?: boolean }[];
}

export async function ensureSchema(knex: Knex, tables: TableDef[]): Promise<void> {
  for (const table of tables) {
    if (!(await knex.schema.hasTable(table.name))) {
      await knex.schema.createTable(table.name, (t) => {
        for (const add of Object.values(table.columns)) add(t);
      });
    } else {
      for (const [column, add] of Object.entries(table.columns)) {
        if (!(await knex.schema.hasColumn(table.name, column))) {
          await knex.schema.alterTable(table.name, (t) => add(t));
        }
      }
    }
    for (const idx of table.indexes ?? []) {
      // CREATE INDEX IF NOT EXISTS is understood by both SQLite and PostgreSQL
      const cols = idx.columns.map((c) => `"${c}"`).join(', ');
      await knex.raw(`CREATE ${idx.unique ? 'UNIQUE ' : ''}INDEX IF NOT EXISTS "${idx.name}" ON "${table.name}" (${cols})`);
    }
  }
}
