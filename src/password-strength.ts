import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { fieldError } from './errors.js';

/** The zxcvbn score (0 to 4) a password must reach: 3, "safely unguessable" (moderate protection against an offline attack on a slow hash). */
export const MIN_PASSWORD_SCORE = 3;

interface Match {
  pattern: string;
  dictionaryName?: string;
  token: string;
}
interface Checker {
  check(password: string, userInputs?: string[]): { score: number; sequence: Match[] };
}

let checker: Checker | null = null;

/** zxcvbn-ts with its common dictionary (about 2 MB): loaded at the first password it judges, never by a start that sets none. */
function zxcvbn(): Checker {
  if (!checker) {
    const core = createRequire(import.meta.url)('@zxcvbn-ts/core') as { ZxcvbnFactory: new (options: object) => Checker };
    const common = createRequire(import.meta.url)('@zxcvbn-ts/language-common') as { dictionary: object; adjacencyGraphs: object };
    checker = new core.ZxcvbnFactory({ dictionary: { ...common.dictionary }, graphs: common.adjacencyGraphs });
  }
  return checker;
}

/**
 * Why `password` may not be set, or null. NIST SP 800-63B (5.1.1.2): a new password is compared
 * with values known to be commonly used, expected or compromised. Refused: a password of the
 * common list of zxcvbn-ts (compiled from the passwords breaches made public), and any whose
 * zxcvbn score is below MIN_PASSWORD_SCORE, judged with the account's own name and address as
 * words an attacker would try first (`Summer2024!` scores 2).
 */
export function passwordWeakness(password: string, userInputs: ReadonlyArray<string | null | undefined> = []): string | null {
  const result = zxcvbn().check(
    password,
    userInputs.filter((s): s is string => Boolean(s)),
  );
  const [only] = result.sequence;
  if (result.sequence.length === 1 && only?.pattern === 'dictionary' && only.dictionaryName === 'passwords-common' && only.token.length === password.length)
    return 'is a common password (it is on a list of passwords made public by breaches): choose another';
  if (result.score < MIN_PASSWORD_SCORE)
    return `is too easy to guess (strength ${result.score} of 4, ${MIN_PASSWORD_SCORE} needed): a longer passphrase of unrelated words works well`;
  return null;
}

/** A bootstrap password of the environment to judge: its variable, and the account's name as a word an attacker tries first. */
export interface PasswordCheck {
  variable: string;
  password: string;
  userInputs: string[];
}

/** What is wrong with each password of `checks`, as configuration problems (none: []). */
export function passwordProblems(checks: readonly PasswordCheck[]): Array<{ variable: string; reason: string }> {
  return checks.flatMap(({ variable, password, userInputs }) => {
    const weak = passwordWeakness(password, userInputs);
    return weak ? [{ variable, reason: weak }] : [];
  });
}

/**
 * passwordProblems on a thread of its own (src/password-strength-worker.ts): loading the
 * dictionary and judging takes a few hundred milliseconds of CPU, which the service's start
 * spends loading its modules meanwhile. Judged here if the thread cannot be started.
 */
export async function passwordProblemsElsewhere(checks: readonly PasswordCheck[]): Promise<Array<{ variable: string; reason: string }>> {
  if (!checks.length) return [];
  const here = fileURLToPath(import.meta.url);
  const file = path.join(path.dirname(here), `password-strength-worker${path.extname(here)}`);
  try {
    const worker = new Worker(file, { workerData: checks });
    return await new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`the password strength thread exited (${code})`)));
    });
  } catch {
    return passwordProblems(checks);
  }
}

/** Throws validation_failed naming `field` when `password` may not be set (passwordWeakness). */
export function requireStrongPassword(password: string, field: string, userInputs: ReadonlyArray<string | null | undefined>): void {
  const weak = passwordWeakness(password, userInputs);
  if (weak) throw fieldError(field, weak);
}
