import type { Command } from 'commander';
import { DomainError } from '../errors.js';
import { auditActionFilter, auditSince } from '../iam/schemas.js';
import { check } from './iam-commands.js';
import { table, UsageError, type CommandEnv } from './output.js';
import { auditSummary } from '../client/audit-summary.js';

/** `--since`: as the API's `since` (a duration back from now, or an ISO date); epoch ms. */
function since(value: string | undefined): number | undefined {
  return value === undefined ? undefined : check<Date>('--since', auditSince, value).getTime();
}

/** `--action`: an action the trail records, or a prefix ending in a dot that some action starts with (a usage error names them). */
function knownAction(value: string | undefined): string | undefined {
  return value === undefined ? undefined : check<string>('--action', auditActionFilter, value);
}

/**
 * The audit trail on the console: `audit list` (newest first), `audit export` (JSON lines,
 * oldest first, for log shippers) and `audit verify` (exit 0 when the chain is intact and starts
 * where its latest pruning left it, 1 naming the first event that does not match).
 */
export function auditCommands(program: Command, { ctx, out }: CommandEnv): void {
  const audit = program.command('audit').description('read, export and verify the audit trail');

  audit
    .command('list')
    .description('the latest events, newest first')
    .option('--action <action>', 'only this action (or a prefix ending in a dot: user.)')
    .option('--actor <who>', 'only this actor (username or user id)')
    .option('--since <when>', 'a duration back from now (7d) or an ISO date')
    .option('--limit <n>', 'at most this many (1-500)', '50')
    .action(async (opts, cmd: Command) => {
      const limit = Number(opts.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 500) throw new UsageError('--limit: must be a whole number from 1 to 500');
      const action = knownAction(opts.action);
      const trail = (await ctx.core('read')).iam.audit;
      const page = await trail.list({ action, actor: opts.actor, since: since(opts.since), limit });
      out(cmd).result(
        page,
        table(
          ['SEQ', 'AT', 'ACTOR', 'ACTION', 'TARGET', 'OUTCOME', 'SUMMARY'],
          page.events.map((e) => [
            String(e.seq),
            e.at,
            `${e.actor.username}${e.actor.ip ? `@${e.actor.ip}` : ''}`,
            e.action,
            [e.target.type, e.target.name ?? e.target.id].filter(Boolean).join(':'),
            e.outcome,
            auditSummary(e),
          ]),
        ),
      );
    });

  audit
    .command('export')
    .description('every event, oldest first, one JSON object a line (for log shippers)')
    .option('--since <when>', 'a duration back from now (7d) or an ISO date')
    .action(async (opts) => {
      const trail = (await ctx.core('read')).iam.audit;
      for await (const e of trail.export(since(opts.since) ?? 0)) ctx.io.stdout(JSON.stringify(e) + '\n');
    });

  audit
    .command('verify')
    .description('check the hash chain: exit 0 when intact, 1 naming the first event that does not match')
    .action(async (_opts, cmd: Command) => {
      const trail = (await ctx.core('read')).iam.audit;
      const result = await trail.verify();
      if (!result.ok) throw new DomainError('conflict', `the audit trail does not verify at event ${result.seq}: ${result.reason}`);
      const pruned = result.pruned
        ? `; it starts where the pruning of event ${result.pruned.seq} (${result.pruned.at}) left it, after removing ${result.pruned.removed} events through ${result.pruned.through_seq}`
        : '; it starts at its first event (never pruned)';
      out(cmd).result(
        result,
        (result.events ? `the audit trail verifies: ${result.events} events, ${result.first_seq}..${result.last_seq}` : 'the audit trail verifies: no events') +
          pruned,
      );
    });
}
