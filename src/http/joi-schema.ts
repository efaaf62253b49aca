import type Joi from 'joi';
import OpenApi31Parser from 'joi-to-json/lib/parsers/open-api-3.1.js';

/**
 * joi schema -> JSON Schema 2020-12 (the dialect of OpenAPI 3.1) through joi-to-json. The
 * subclass corrects what the library gets wrong on the schemas this API uses (each correction
 * is tested in test/web/openapi.test.ts, so an upgrade that changes the library shows there):
 * maps written as `object().pattern(schema, rule)`, object sizes, `integer()` after other
 * rules, `length()`, regex flags, `allow('')` beside `min()`, `allow(null)` on alternatives,
 * and conditions on another field that only change presence. The validator stays the
 * authority; the document describes it.
 */
export type JsonSchema = Record<string, unknown>;

interface Described {
  type: string;
  flags?: Record<string, unknown>;
  rules?: { name: string; args?: Record<string, unknown> }[];
  allow?: unknown[];
  keys?: Record<string, Described>;
  patterns?: { schema?: Described; regex?: string; rule: Described }[];
  ref?: unknown;
  then?: Described;
  otherwise?: Described;
}

const limit = (d: Described, name: string): number | undefined => {
  const value = d.rules?.find((r) => r.name === name)?.args?.limit;
  return typeof value === 'number' ? value : undefined;
};

/** describe() renders a RegExp as "/source/flags"; JSON Schema wants the source. */
const regexSource = (literal: string): string => /^\/(.*)\/[a-z]*$/s.exec(literal)?.[1] ?? literal;

/** `Joi.optional()` / `Joi.required()` as a `when` branch: presence only, no constraint on the value. */
const presenceOnly = (d: Described | undefined): boolean =>
  !d || (d.type === 'any' && !d.rules?.length && !d.allow?.length && Object.keys(d.flags ?? {}).every((k) => k === 'presence'));

class ApiSchemaParser extends OpenApi31Parser {
  override _getFieldType(d: Described): string {
    return d.type === 'number' && d.rules?.some((r) => r.name === 'integer') ? 'integer' : d.type;
  }

  override _setStringFieldProperties(s: JsonSchema, d: Described): void {
    super._setStringFieldProperties(s, d);
    if (s.type !== 'string') return;
    const length = limit(d, 'length');
    if (length !== undefined) s.minLength = s.maxLength = length;
    const pattern = d.rules?.find((r) => r.name === 'pattern')?.args?.regex;
    if (typeof pattern === 'string') s.pattern = regexSource(pattern);
    if (d.allow?.includes('') && !d.flags?.only) delete s.minLength;
  }

  override _setObjectProperties(s: JsonSchema, d: Described, definitions: Record<string, unknown>, level: number): void {
    // the library's own pattern handling adds the regex as a property name and skips schema keys
    super._setObjectProperties(s, { ...d, patterns: undefined }, definitions, level);
    if (s.type !== 'object') return;
    for (const p of d.patterns ?? []) {
      const rule = this.parse(p.rule, definitions, level + 1);
      if (p.regex) s.patternProperties = { ...(s.patternProperties as object), [regexSource(p.regex)]: rule };
      else {
        s.additionalProperties = rule;
        const names = p.schema && this.parse(p.schema, definitions, level + 1);
        if (names && Object.keys(names).some((k) => k !== 'type')) s.propertyNames = names;
      }
    }
    const min = limit(d, 'min') ?? limit(d, 'length');
    const max = limit(d, 'max') ?? limit(d, 'length');
    if (min !== undefined) s.minProperties = min;
    if (max !== undefined) s.maxProperties = max;
  }

  override _setConditionCompositionStyle(s: JsonSchema, condition: Described, definitions: Record<string, unknown>, level: number): JsonSchema {
    // a condition on another field that only makes this one required or optional leaves its
    // value as it is (the library would add "any type" alternatives, or replace the type)
    if (condition.ref && presenceOnly(condition.then) && presenceOnly(condition.otherwise)) return s;
    return super._setConditionCompositionStyle(s, condition, definitions, level);
  }

  override _addNullTypeIfNullable(s: JsonSchema, d: Described): void {
    // alternatives have no type to widen: null becomes one more alternative
    if (!s.type && Array.isArray(s.anyOf) && d.allow?.includes(null)) s.anyOf.push({ type: 'null' });
    else super._addNullTypeIfNullable(s, d);
  }
}

const parser = new ApiSchemaParser();

/** The JSON Schema of a joi schema. */
export function joiToJsonSchema(schema: Joi.Schema): JsonSchema {
  return parser.parse(schema.describe());
}

/** The top-level keys of an object schema with their JSON Schema and whether each is required. */
export function objectFields(schema: Joi.Schema): { name: string; schema: JsonSchema; required: boolean; description?: string }[] {
  const s = joiToJsonSchema(schema);
  const required = new Set((s.required as string[] | undefined) ?? []);
  return Object.entries((s.properties ?? {}) as Record<string, JsonSchema>)
    .filter(([, field]) => !('not' in field && Object.keys(field).length === 1)) // forbidden
    .map(([name, field]) => ({ name, schema: field, required: required.has(name), ...(typeof field.description === 'string' ? { description: field.description } : {}) }));
}
