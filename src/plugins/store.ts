import type { Knex } from 'knex';
import type { PluginState } from './types.js';

export interface PluginRow {
  id: string;
  enabled: boolean;
  version: string | null;
  state: PluginState;
  error: string | null;
  updated_at: number;
}

/** A row as the database gives it back: SQLite keeps the flag as 0 / 1. */
interface StoredRow extends Omit<PluginRow, 'enabled' | 'updated_at'> {
  enabled: boolean | number;
  updated_at: number | string;
}

/** The plugins table: the administrator's enabled flag and the last known state. */
export class PluginStore {
  constructor(private readonly db: Knex) {}

  async all(): Promise<Map<string, PluginRow>> {
    const rows: StoredRow[] = await this.db('plugins').select('*');
    return new Map(rows.map((r) => [r.id, { ...r, enabled: Boolean(r.enabled), updated_at: Number(r.updated_at) }]));
  }

  async save(row: PluginRow): Promise<void> {
    // the error text is for people: bounded, so a huge exception message cannot bloat the table
    const error = row.error === null ? null : row.error.slice(0, 2000);
    await this.db('plugins')
      .insert({ ...row, error })
      .onConflict('id')
      .merge(['enabled', 'version', 'state', 'error', 'updated_at']);
  }
}
