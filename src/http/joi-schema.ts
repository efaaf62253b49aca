import type Joi from 'joi';

/**
 * joi schema -> JSON Schema 2020-12 (the dialect of OpenAPI 3.1), read from `schema.describe()`.
 * It covers what our schemas use: objects (keys, patterns, unknown), strings (lengths,
 * patterns, email, uri, guid, isoDate), numbers (integer, bounds), booleans, dates, arrays,
 * alternatives, valid/allow lists, defaults and descriptions. Conditional presence (`when`) is
 * documented as optional; the validator stays the authority.
 */
export type JsonSchema = Record<string, unknown>;

interface Described {
  type: string;
  flags?: Record<string, unknown>;
  rules?: { name: string; args?: Record<string, unknown> }[];
  allow?: unknown[];
  keys?: Record<string, Described>;
  patterns?: { schema?: Described; regex?: string; rule: Described }[];
  items?: Described[];
  matches?: { schema?: Described; then?: Described; otherwise?: Described }[];
  whens?: unknown[];
  metas?: unknown[];
  examples?: unknown[];
}

function regexSource(literal: string): string {
  // describe() renders a RegExp as "/source/flags"
  const m = /^\/(.*)\/[a-z]*$/s.exec(literal);
  return m ? m[1]! : literal;
}

function rule(d: Described, name: string): Record<string, unknown> | undefined {
  const r = d.rules?.find((x) => x.name === name);
  return r ? (r.args ?? {}) : undefined;
}

function isRequired(d: Described): boolean {
  return d.flags?.presence === 'required';
}

function isForbidden(d: Described): boolean {
  return d.flags?.presence === 'forbidden';
}

function convert(d: Described): JsonSchema {
  const out: JsonSchema = {};
  const flags = d.flags ?? {};
  const allow = (d.allow ?? []).filter((v) => !(v && typeof v === 'object' && 'override' in (v as object)));
  const nullable = allow.includes(null);

  switch (d.type) {
    case 'object': {
      out.type = 'object';
      if (d.keys) {
        const properties: Record<string, JsonSchema> = {};
        const required: string[] = [];
        for (const [name, child] of Object.entries(d.keys)) {
          if (isForbidden(child)) continue;
          properties[name] = convert(child);
          if (isRequired(child)) required.push(name);
        }
        out.properties = properties;
        if (required.length) out.required = required;
      }
      if (d.patterns?.length) out.additionalProperties = convert(d.patterns[0]!.rule);
      else if (d.keys) out.additionalProperties = flags.unknown === true;
      const min = rule(d, 'min');
      if (min) out.minProperties = min.limit;
      const max = rule(d, 'max');
      if (max) out.maxProperties = max.limit;
      break;
    }
    case 'string': {
      out.type = 'string';
      const min = rule(d, 'min');
      if (min && typeof min.limit === 'number') out.minLength = min.limit;
      const max = rule(d, 'max');
      if (max && typeof max.limit === 'number') out.maxLength = max.limit;
      const length = rule(d, 'length');
      if (length && typeof length.limit === 'number') out.minLength = out.maxLength = length.limit;
      const pattern = rule(d, 'pattern');
      if (pattern && typeof pattern.regex === 'string') out.pattern = regexSource(pattern.regex);
      if (rule(d, 'email')) out.format = 'email';
      if (rule(d, 'uri')) out.format = 'uri';
      if (rule(d, 'guid')) out.format = 'uuid';
      if (rule(d, 'isoDate')) out.format = 'date-time';
      break;
    }
    case 'number': {
      out.type = rule(d, 'integer') ? 'integer' : 'number';
      const min = rule(d, 'min');
      if (min && typeof min.limit === 'number') out.minimum = min.limit;
      const max = rule(d, 'max');
      if (max && typeof max.limit === 'number') out.maximum = max.limit;
      const greater = rule(d, 'greater');
      if (greater && typeof greater.limit === 'number') out.exclusiveMinimum = greater.limit;
      const less = rule(d, 'less');
      if (less && typeof less.limit === 'number') out.exclusiveMaximum = less.limit;
      break;
    }
    case 'boolean':
      out.type = 'boolean';
      break;
    case 'date':
      out.type = 'string';
      out.format = 'date-time';
      if (rule(d, 'greater')?.date === 'now') out.description = 'a time in the future';
      break;
    case 'array': {
      out.type = 'array';
      const items = (d.items ?? []).filter((i) => !isForbidden(i)).map(convert);
      if (items.length === 1) out.items = items[0];
      else if (items.length > 1) out.items = { anyOf: items };
      const min = rule(d, 'min');
      if (min && typeof min.limit === 'number') out.minItems = min.limit;
      const max = rule(d, 'max');
      if (max && typeof max.limit === 'number') out.maxItems = max.limit;
      if (rule(d, 'unique')) out.uniqueItems = true;
      break;
    }
    case 'alternatives': {
      const options = (d.matches ?? []).flatMap((m) => [m.schema, m.then, m.otherwise]).filter((x): x is Described => Boolean(x));
      out.anyOf = options.map(convert);
      break;
    }
    default:
      // any, link, symbol...: no constraint we can state
      break;
  }

  if (flags.only === true) {
    // valid(...): an enumeration of exactly these values
    out.enum = allow;
    if (nullable && typeof out.type === 'string') out.type = [out.type, 'null'];
  } else if (nullable && typeof out.type === 'string') {
    out.type = [out.type, 'null'];
  }
  if (!flags.only && typeof out.minLength === 'number' && out.minLength > 0 && allow.includes('')) {
    // allow('') beside min(1): the empty string is accepted too
    delete out.minLength;
  }
  if ('default' in flags && typeof flags.default !== 'function' && !(flags.default && typeof flags.default === 'object' && 'special' in (flags.default as object))) {
    out.default = flags.default;
  }
  if (typeof flags.description === 'string') out.description = flags.description;
  if (d.examples?.length) out.examples = d.examples;
  return out;
}

/** The JSON Schema of a joi schema. */
export function joiToJsonSchema(schema: Joi.Schema): JsonSchema {
  return convert(schema.describe() as Described);
}

/** The top-level keys of an object schema with their JSON Schema and whether each is required. */
export function objectFields(schema: Joi.Schema): { name: string; schema: JsonSchema; required: boolean; description?: string }[] {
  const d = schema.describe() as Described;
  if (d.type !== 'object' || !d.keys) return [];
  return Object.entries(d.keys)
    .filter(([, child]) => !isForbidden(child))
    .map(([name, child]) => {
      const s = convert(child);
      const description = typeof s.description === 'string' ? s.description : undefined;
      return { name, schema: s, required: isRequired(child), description };
    });
}
