import type { Knex } from 'knex';
import type { Logger } from '../log.js';

/** counters row holding the highest seq that retention ever deleted */
const PRUNED = 'notifications_pruned';

export interface RetentionOptions {
  /** notifications not updated for longer are deleted (SERVICE_NOTIFICATION_RETENTION) */
  retentionMs: number;
  /** notifications kept per user, and broadcasts kept, at most (SERVICE_NOTIFICATION_MAX_PER_USER) */
  maxPerUser: number;
  /** rows per delete statement: short statements never hold writers up for long */
  batchSize?: number;
}

/**
 * Keeps the history bounded: what is older than the retention, and what lies beyond the newest
 * `maxPerUser` of a user (or of the broadcasts), is deleted in small batches. The highest seq
 * ever deleted is kept, so a client resuming from before it is told its history was truncated.
 */
export class NotificationRetention {
  constructor(
    private readonly db: Knex,
    private readonly log: Logger,
    private readonly opts: RetentionOptions,
  ) {}

  /** One pass; returns how many notifications went. */
  async run(now = Date.now()): Promise<number> {
    let deleted = await this.deleteWhile((q) => q.where('updated_at', '<', now - this.opts.retentionMs));
    const crowded: Array<{ user_id: string | null }> = await this.db('notifications')
      .select('user_id')
      .groupBy('user_id')
      .havingRaw('count(*) > ?', [this.opts.maxPerUser]);
    for (const { user_id } of crowded) {
      const audience = (q: Knex.QueryBuilder) => (user_id === null ? q.whereNull('user_id') : q.where({ user_id }));
      const edge = await audience(this.db('notifications')).orderBy('seq', 'desc').offset(this.opts.maxPerUser).first('seq');
      if (edge) deleted += await this.deleteWhile((q) => audience(q).andWhere('seq', '<=', Number(edge.seq)));
    }
    if (deleted) this.log.info({ deleted }, 'notification retention: old notifications deleted');
    return deleted;
  }

  /** The highest seq retention deleted (0: nothing yet): a resume from before it misses something. */
  async watermark(): Promise<number> {
    const row = await this.db('counters').where({ name: PRUNED }).first('value');
    return row ? Number(row.value) : 0;
  }

  private async deleteWhile(where: (q: Knex.QueryBuilder) => Knex.QueryBuilder): Promise<number> {
    const size = this.opts.batchSize ?? 500;
    let total = 0;
    for (;;) {
      const rows: Array<{ id: string; seq: number }> = await where(this.db('notifications')).orderBy('seq', 'asc').limit(size).select('id', 'seq');
      if (rows.length === 0) return total;
      const top = Math.max(...rows.map((r) => Number(r.seq)));
      await this.db.transaction(async (trx) => {
        await trx('notification_states')
          .whereIn(
            'notification_id',
            rows.map((r) => r.id),
          )
          .delete();
        await trx('notifications')
          .whereIn(
            'id',
            rows.map((r) => r.id),
          )
          .delete();
        await trx('counters')
          .insert({ name: PRUNED, value: top })
          .onConflict('name')
          .merge({ value: trx.raw('CASE WHEN excluded.value > counters.value THEN excluded.value ELSE counters.value END') });
      });
      total += rows.length;
      if (rows.length < size) return total;
      // let writers in between batches
      await new Promise((r) => setImmediate(r));
    }
  }
}
