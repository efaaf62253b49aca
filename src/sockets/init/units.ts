import Joi from 'joi';

/**
 * Unit names and the allow-list of the `init` provider: systemd's unit name grammar, the globs
 * of SERVICE_INIT_UNITS matched as systemd matches unit patterns (fnmatch without flags but
 * FNM_NOESCAPE), and the shapes of what the operations answer.
 */

/** the unit types a name may end in (systemd's unit_type_table) */
export const UNIT_SUFFIXES = ['service', 'socket', 'device', 'mount', 'automount', 'swap', 'target', 'path', 'timer', 'slice', 'scope'] as const;

/** systemd's longest unit name (UNIT_NAME_MAX less its NUL) */
export const UNIT_NAME_MAX = 255;

/**
 * A unit name: a prefix of letters, digits and `:_.\-`, an optional `@instance` (which may hold
 * `@` too) and a known type suffix. A template (`foo@.service`) names no unit one can act on, so
 * its empty instance is refused.
 */
export const UNIT_NAME = new RegExp(`^[A-Za-z0-9:_.\\\\-]+(@[A-Za-z0-9:_.\\\\@-]+)?\\.(${UNIT_SUFFIXES.join('|')})$`);

export function isUnitName(name: string): boolean {
  return name.length <= UNIT_NAME_MAX && UNIT_NAME.test(name);
}

/** a template unit file (`foo@.service`): listed by the unit files, never a unit */
export function isTemplate(name: string): boolean {
  return /@\.[a-z]+$/.test(name);
}

export const unitArg = Joi.string()
  .max(UNIT_NAME_MAX)
  .pattern(UNIT_NAME)
  .messages({
    'string.pattern.base': `{{#label}} must be a unit name: letters, digits and :_.\\- with an optional @instance, ending in .${UNIT_SUFFIXES.join(', .')}`,
  })
  .description('a unit name such as `nginx.service` or `getty@tty1.service`');

export const ACTIONS = ['start', 'stop', 'restart', 'reload'] as const;
export type UnitAction = (typeof ACTIONS)[number];

/** One unit as the operations answer it (the manager's words for its states). */
export interface UnitInfo {
  unit: string;
  description: string;
  load_state: string;
  active_state: string;
  sub_state: string;
  /** enabled, disabled, static, masked, ...; null for a unit without a unit file (or not known) */
  unit_file_state: string | null;
}

export const unitResult = Joi.object({
  unit: Joi.string().required(),
  description: Joi.string().allow('').required(),
  load_state: Joi.string().required().description('loaded, not-found, bad-setting, error, masked'),
  active_state: Joi.string().required().description('active, reloading, inactive, failed, activating, deactivating'),
  sub_state: Joi.string().required().description('the unit type\'s own state, e.g. "running" or "dead" for a service'),
  unit_file_state: Joi.string().allow(null).required().description('enabled, disabled, static, masked, ...; null for a unit without a unit file'),
})
  .description('a unit')
  .id('InitUnit');

export const RESULTS = {
  health: Joi.object({
    available: Joi.boolean().required(),
    version: Joi.string().allow(null).required().description("systemd's version (its manager's Version property); null when unavailable"),
    units_allowed: Joi.array().items(Joi.string()).required().description('the globs of SERVICE_INIT_UNITS'),
  }),
  units: Joi.object({ units: Joi.array().items(unitResult).required().description('the units the allow-list matches, loaded or not, by name') }),
  unit_status: Joi.object({ unit: unitResult.required() }),
  unit_action: Joi.object({
    unit: Joi.string().required(),
    action: Joi.string()
      .valid(...ACTIONS)
      .required(),
    job: Joi.string().required().description("the manager's job object path (e.g. /org/freedesktop/systemd1/job/42)"),
    active_state: Joi.string().required().description('the unit\'s ActiveState once the job finished (or when the wait ran out: then perhaps "activating")'),
  }),
};

type Token = { kind: 'char'; c: string } | { kind: 'any' } | { kind: 'star' } | { kind: 'set'; negate: boolean; has: (c: string) => boolean };

const CLASSES: Record<string, (c: string) => boolean> = {
  alnum: (c) => /[A-Za-z0-9]/.test(c),
  alpha: (c) => /[A-Za-z]/.test(c),
  blank: (c) => c === ' ' || c === '\t',
  cntrl: (c) => c.charCodeAt(0) < 32 || c.charCodeAt(0) === 127,
  digit: (c) => /[0-9]/.test(c),
  graph: (c) => c.charCodeAt(0) > 32 && c.charCodeAt(0) < 127,
  lower: (c) => /[a-z]/.test(c),
  print: (c) => c.charCodeAt(0) >= 32 && c.charCodeAt(0) < 127,
  punct: (c) => /[!-/:-@[-`{-~]/.test(c),
  space: (c) => /[ \t\n\r\f\v]/.test(c),
  upper: (c) => /[A-Z]/.test(c),
  xdigit: (c) => /[0-9A-Fa-f]/.test(c),
};

/**
 * A bracket expression starting at pattern[i] (the `[`): its token and where the pattern goes
 * on, or null when it is not closed (then the `[` is a plain character, as fnmatch has it).
 */
function bracket(pattern: string, i: number): { token: Token; next: number } | null {
  let j = i + 1;
  let negate = false;
  if (pattern[j] === '!' || pattern[j] === '^') {
    negate = true;
    j++;
  }
  const tests: Array<(c: string) => boolean> = [];
  let first = true;
  while (j < pattern.length) {
    const c = pattern[j]!;
    if (c === ']' && !first) return { token: { kind: 'set', negate, has: (x) => tests.some((t) => t(x)) }, next: j + 1 };
    first = false;
    if (c === '[' && pattern[j + 1] === ':') {
      const end = pattern.indexOf(':]', j + 2);
      const test = end === -1 ? undefined : CLASSES[pattern.slice(j + 2, end)];
      if (end === -1 || !test) return null;
      tests.push(test);
      j = end + 2;
      continue;
    }
    if (pattern[j + 1] === '-' && pattern[j + 2] !== undefined && pattern[j + 2] !== ']') {
      const low = c.charCodeAt(0);
      const high = pattern.charCodeAt(j + 2);
      tests.push((x) => x.charCodeAt(0) >= low && x.charCodeAt(0) <= high);
      j += 3;
      continue;
    }
    tests.push((x) => x === c);
    j++;
  }
  return null;
}

function tokenize(pattern: string): Token[] {
  const tokens: Token[] = [];
  for (let i = 0; i < pattern.length;) {
    const c = pattern[i]!;
    if (c === '*') {
      // a run of stars is one star
      if (tokens[tokens.length - 1]?.kind !== 'star') tokens.push({ kind: 'star' });
      i++;
    } else if (c === '?') {
      tokens.push({ kind: 'any' });
      i++;
    } else if (c === '[') {
      const set = bracket(pattern, i);
      if (set) {
        tokens.push(set.token);
        i = set.next;
      } else {
        tokens.push({ kind: 'char', c });
        i++;
      }
    } else {
      // FNM_NOESCAPE: a backslash is a character like any other
      tokens.push({ kind: 'char', c });
      i++;
    }
  }
  return tokens;
}

function one(token: Token, c: string): boolean {
  if (token.kind === 'any') return true;
  if (token.kind === 'char') return token.c === c;
  if (token.kind === 'set') return token.has(c) !== token.negate;
  return false;
}

/** A compiled glob: does a whole name match it? (`*` any run, `?` one character, `[...]` one of a set) */
export function compileGlob(pattern: string): (name: string) => boolean {
  const tokens = tokenize(pattern);
  return (name) => {
    // the usual one-star backtracking: on a mismatch, let the last star take one more character
    let t = 0;
    let n = 0;
    let starT = -1;
    let starN = 0;
    while (n < name.length) {
      const token = tokens[t];
      if (token?.kind === 'star') {
        starT = t++;
        starN = n;
      } else if (token && one(token, name[n]!)) {
        t++;
        n++;
      } else if (starT >= 0) {
        t = starT + 1;
        n = ++starN;
      } else {
        return false;
      }
    }
    while (tokens[t]?.kind === 'star') t++;
    return t === tokens.length;
  };
}

/** The allow-list: a name is allowed when any glob matches all of it. */
export class UnitAllowList {
  private readonly matchers: Array<(name: string) => boolean>;

  constructor(readonly globs: readonly string[]) {
    this.matchers = globs.map(compileGlob);
  }

  allows(name: string): boolean {
    return this.matchers.some((m) => m(name));
  }
}
