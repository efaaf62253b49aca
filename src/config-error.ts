/** The error of a configuration that cannot be used (src/config.ts), and its problems. */

export interface ConfigProblem {
  variable: string;
  reason: string;
}

/**
 * The configuration cannot be used: every problem found, each naming its variable. `variable`
 * and `reason` are the first one's; `lines()` says them all, one line for the variables that
 * share a reason.
 */
export class ConfigError extends Error {
  readonly problems: readonly ConfigProblem[];

  constructor(variable: string, reason: string);
  constructor(problems: readonly ConfigProblem[]);
  constructor(first: string | readonly ConfigProblem[], reason?: string) {
    const problems = typeof first === 'string' ? [{ variable: first, reason: reason! }] : first;
    super(ConfigError.linesOf(problems).join('; '));
    this.name = 'ConfigError';
    this.problems = problems;
  }

  get variable(): string {
    return this.problems[0]!.variable;
  }

  get reason(): string {
    return this.problems[0]!.reason;
  }

  /** `VAR: reason`, or `VAR_A, VAR_B: reason` for variables that share it, in the order found. */
  lines(): string[] {
    return ConfigError.linesOf(this.problems);
  }

  private static linesOf(problems: readonly ConfigProblem[]): string[] {
    const byReason = new Map<string, string[]>();
    for (const p of problems) byReason.set(p.reason, [...(byReason.get(p.reason) ?? []), p.variable]);
    return [...byReason].map(([reason, variables]) => `${variables.join(', ')}: ${reason}`);
  }
}
