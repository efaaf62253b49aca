import { createRequire } from 'node:module';
import type Joi from 'joi';
import type OpenApi31Parser from 'joi-to-json/lib/parsers/open-api-3.1.js';

/**
 * joi schema -> JSON Schema 2020-12 (the dialect of OpenAPI 3.1) through joi-to-json. The
 * subclass corrects where the library, on its own, documents something the validator does not
 * do (each correction has a case in test/web/openapi.test.ts, so an upgrade that changes the
 * library shows there): maps written as `object().pattern(...)`, a bare `object()`, object
 * sizes, `integer()` after other rules, `length()`, regex flags and inverted or repeated
 * patterns, `allow('')` beside `min()` or a pattern, `allow(null)` on alternatives, dates
 * without `iso()`, `single()`, and conditions on another field that only change
 * presence. Shapes named with `.id()` become components of the document. The validator stays the authority: where a rule cannot be said, the document is
 * looser, never stricter.
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

/**
 * A regex as describe() renders it ("/source/flags") as a JSON Schema pattern, which has no
 * flags: `s` is written into the source (a `.` outside a class becomes `[\s\S]`); with `i` or
 * `m` the pattern cannot be said, and undefined leaves it out (the document is then looser than
 * the validator, never stricter).
 */
function jsonPattern(literal: string): string | undefined {
  const m = /^\/(.*)\/([a-z]*)$/s.exec(literal);
  if (!m) return literal;
  const [, source, flags] = m as unknown as [string, string, string];
  if (/[im]/.test(flags)) return undefined;
  if (!flags.includes('s')) return source;
  let out = '';
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i]!;
    if (c === '\\') {
      out += c + (source[++i] ?? '');
      continue;
    }
    if (c === '[') inClass = true;
    else if (c === ']') inClass = false;
    out += c === '.' && !inClass ? '[\\s\\S]' : c;
  }
  return out;
}

/** `Joi.optional()` / `Joi.required()` as a `when` branch: presence only, no constraint on the value. */
const presenceOnly = (d: Described | undefined): boolean =>
  !d || (d.type === 'any' && !d.rules?.length && !d.allow?.length && Object.keys(d.flags ?? {}).every((k) => k === 'presence'));

/**
 * Two shapes picked by one field's value (`alternatives().conditional(object({k: valid(v)
 * .required()}).unknown(), {then, otherwise})`) come out as if/then/else, which client
 * generators type as `unknown`. Said as anyOf of the two shapes, the second one with `k` not `v`
 * (the same set of bodies), they become a union type.
 */
function discriminated(s: JsonSchema): JsonSchema {
  const cond = s.if as JsonSchema | undefined;
  const then = s.then as JsonSchema | undefined;
  const otherwise = s.else as JsonSchema | undefined;
  if (!cond || !then || !otherwise || Object.keys(s).some((k) => !['if', 'then', 'else', 'description'].includes(k))) return s;
  const required = cond.required as string[] | undefined;
  const props = cond.properties as Record<string, JsonSchema> | undefined;
  if (required?.length !== 1 || !props || Object.keys(props).length !== 1 || props[required[0]!]?.const === undefined) return s;
  const key = required[0]!;
  const value = props[key]!.const;
  // the first shape must hold the key at that value itself, or anyOf would take more than if/then/else
  const thenKey = (then.properties as Record<string, JsonSchema> | undefined)?.[key];
  if (thenKey?.const !== value || !(then.required as string[] | undefined)?.includes(key)) return s;
  const elseProps = otherwise.properties as Record<string, JsonSchema> | undefined;
  if (otherwise.type !== 'object' || !elseProps) return s;
  const other = elseProps[key] ? { ...otherwise, properties: { ...elseProps, [key]: { ...elseProps[key], not: { const: value } } } } : otherwise;
  return { anyOf: [then, other], ...(s.description === undefined ? {} : { description: s.description }) };
}

/**
 * The parser class, made at the first conversion: joi-to-json is loaded only when an API document
 * is built (/openapi.json), never by a start.
 */
function apiSchemaParser() {
  const Base = createRequire(import.meta.url)('joi-to-json/lib/parsers/open-api-3.1.js') as typeof OpenApi31Parser;
  return class ApiSchemaParser extends Base {
    /** the library's stack of preferences inherited from parent schemas */
    declare inheritedPreferences: unknown[];

    override _getFieldType(d: Described): string {
      return d.type === 'number' && d.rules?.some((r) => r.name === 'integer') ? 'integer' : d.type;
    }

    override _setStringFieldProperties(s: JsonSchema, d: Described): void {
      super._setStringFieldProperties(s, d);
      if (s.type !== 'string') return;
      const length = limit(d, 'length');
      if (length !== undefined) s.minLength = s.maxLength = length;
      // every pattern, inverted ones as `not`, flags as jsonPattern can say them
      delete s.pattern;
      // an allowed '' passes every rule in joi: it passes length and patterns here too
      const emptyAllowed = d.allow?.includes('') && !d.flags?.only;
      if (emptyAllowed) delete s.minLength;
      const patterns = (d.rules ?? [])
        .filter((r) => r.name === 'pattern' && typeof r.args?.regex === 'string')
        .flatMap((r): JsonSchema[] => {
          const pattern = jsonPattern(r.args!.regex as string);
          if (pattern === undefined) return [];
          if ((r.args!.options as { invert?: boolean } | undefined)?.invert) return [{ not: { pattern: emptyAllowed ? `(?!^$)(?:${pattern})` : pattern } }];
          return [{ pattern: emptyAllowed ? `^$|(?:${pattern})` : pattern }];
        });
      if (patterns.length === 1 && typeof patterns[0]!.pattern === 'string') s.pattern = patterns[0]!.pattern;
      else if (patterns.length) s.allOf = patterns;
    }

    override _setDateFieldProperties(s: JsonSchema, d: Described): void {
      if (s.type !== 'date') return;
      const format = d.flags?.format;
      if (format === 'iso') Object.assign(s, { type: 'string', format: 'date-time' });
      else if (format === 'javascript' || format === 'unix') s.type = 'number';
      else {
        // without a format joi takes a date string or a number of milliseconds
        delete s.type;
        s.anyOf = [{ type: 'string', format: 'date-time' }, { type: 'number' }];
      }
    }

    override _setObjectProperties(s: JsonSchema, d: Described, definitions: Record<string, unknown>, level: number): void {
      // the library's own pattern handling adds the regex as a property name and skips schema keys
      super._setObjectProperties(s, { ...d, patterns: undefined }, definitions, level);
      if (s.type !== 'object') return;
      if (!d.keys && !d.patterns?.length) {
        // a bare object(): any keys (the library says none)
        delete s.properties;
        delete s.additionalProperties;
      }
      for (const p of d.patterns ?? []) {
        const rule = this.parse(p.rule, definitions, level + 1);
        const keyPattern = p.regex === undefined ? undefined : jsonPattern(p.regex);
        if (keyPattern !== undefined) s.patternProperties = { ...(s.patternProperties as object), [keyPattern]: rule };
        else if (p.regex) s.additionalProperties = rule;
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

    /** Shapes named with joi's `.id()`, collected for the document's components while parsing. */
    components: Record<string, JsonSchema> | null = null;

    override parse(d: Described, definitions: Record<string, unknown> = {}, level = 0): JsonSchema {
      const id = d?.flags?.id;
      if (typeof id === 'string') return this.named(id, d, definitions, level);
      const s = discriminated(super.parse(d, definitions, level));
      if (d?.type !== 'array' || !d.flags?.single || s.type !== 'array') return s;
      // single(): one item is taken for an array of it
      const { description, default: byDefault, ...array } = s;
      return { anyOf: [array, s.items], ...(description === undefined ? {} : { description }), ...(byDefault === undefined ? {} : { default: byDefault }) };
    }

    /**
     * A shape named with `.id('User')`: its schema goes to the components once, and each use is a
     * $ref (with the use's description, and null beside it when the use allows null). The same
     * name for two different shapes is a mistake in the route definitions: it throws.
     */
    private named(id: string, d: Described, definitions: Record<string, unknown>, level: number): JsonSchema {
      const description = (d as { flags?: { description?: string } }).flags?.description;
      const nullable = d.allow?.includes(null) ?? false;
      const shape: Described = { ...d, flags: { ...d.flags, id: undefined, description: undefined }, allow: d.allow?.filter((v) => v !== null) };
      const schema = this.parse(shape, definitions, level + 1);
      if (this.components) addComponent(this.components, id, schema);
      else {
        // no document to hold it (a schema converted on its own): inline
        return { ...schema, ...(description === undefined ? {} : { description }) };
      }
      const ref: JsonSchema = { $ref: `#/components/schemas/${id}`, ...(description === undefined ? {} : { description }) };
      return nullable ? { anyOf: [ref, { type: 'null' }] } : ref;
    }
  };
}

let madeParser: InstanceType<ReturnType<typeof apiSchemaParser>> | undefined;
const schemaParser = () => (madeParser ??= new (apiSchemaParser())());

export interface ConvertOptions {
  /**
   * Where shapes named with `.id()` go (the document's components.schemas); without it they
   * are written inline.
   */
  components?: Record<string, JsonSchema>;
  /**
   * `required`: every object key is required unless it says `.optional()` (what the server
   * answers: a field it always sends is required in the document, so generated clients type
   * it as present).
   */
  presence?: 'required';
}

/** Conversions made, by joi schema and options: the document is built again for every service and every plugin change. */
const converted = new WeakMap<Joi.Schema, Map<string, Converted>>();
const convertedText = new Map<string, Converted>();
interface Converted {
  schema: JsonSchema;
  named: Record<string, JsonSchema>;
}

/**
 * The JSON Schema of a joi schema. Made once per schema object and options, and shared: callers
 * must not change what they get.
 */
export function joiToJsonSchema(schema: Joi.Schema, opts: ConvertOptions = {}): JsonSchema {
  const key = `${opts.presence ?? ''}:${opts.components ? 'named' : 'inline'}`;
  let byOptions = converted.get(schema);
  let hit = byOptions?.get(key);
  if (!hit) {
    const d = schema.describe() as Described & { preferences?: Record<string, unknown> };
    // a schema made anew for each service (inside a route factory) describes itself the same way each time
    const text = `${key}|${JSON.stringify(d)}`;
    hit = convertedText.get(text);
    if (!hit) {
      const spec = opts.presence ? { ...d, preferences: { presence: opts.presence, ...d.preferences } } : d;
      const named: Record<string, JsonSchema> = {};
      const parser = schemaParser();
      parser.components = opts.components ? named : null;
      try {
        hit = { schema: forGenerators(parser.parse(spec)), named };
        for (const shape of Object.values(named)) forGenerators(shape);
      } finally {
        parser.components = null;
        // the library pushes inherited preferences without a finally: a throw must not leave them for the next schema
        parser.inheritedPreferences = [];
      }
      if (convertedText.size >= 5000) convertedText.clear();
      convertedText.set(text, hit);
    }
    if (!byOptions) converted.set(schema, (byOptions = new Map()));
    byOptions.set(key, hit);
  }
  for (const [id, shape] of Object.entries(hit.named)) addComponent(opts.components!, id, shape);
  return hit.schema;
}

/**
 * Shapes generators understand, each saying what the validator does (changes `s` in place):
 * an object schema that names no property (an assertion of the browser, a forge's payload, an
 * event's details) takes anything, and says so (`additionalProperties: true`; else generators
 * read `Record<string, never>`); `xor` is a plain `oneOf` of the two `required`; a key a branch
 * forbids is `not: {required: [key]}` rather than a contradiction generators read as allowed;
 * a default is said in the description (a request may leave the field out).
 */
function forGenerators(s: JsonSchema): JsonSchema {
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (!node || typeof node !== 'object') return;
    const o = node as Record<string, unknown>;
    const shapeless = ['properties', 'patternProperties', 'additionalProperties', 'oneOf', 'anyOf', 'allOf', '$ref'].every((k) => !(k in o));
    if (o.type === 'object' && shapeless) o.additionalProperties = true;
    // a default is what the server fills in when a request leaves the field out; generators
    // (openapi-typescript's default options) read `default` as "always there" and would make the
    // field required in requests: the description says it instead
    if ('default' in o && typeof o.default !== 'object') {
      const said = `default: ${JSON.stringify(o.default)}`;
      o.description = typeof o.description === 'string' ? `${o.description} (${said})` : said;
      delete o.default;
    }
    // xor(a, b) as joi-to-json writes it (if both: false, else one of them) is exactly one of them
    const otherwise = o.else as { oneOf?: unknown[] } | undefined;
    if (o.if && o.then === false && Array.isArray(otherwise?.oneOf) && Object.keys(otherwise).length === 1) {
      delete o.if;
      delete o.then;
      delete o.else;
      o.oneOf = otherwise.oneOf;
    }
    // a key this branch forbids comes out as `{const: x, not: {const: x}}`: say it is absent
    const props = o.properties as Record<string, Record<string, unknown>> | undefined;
    const absent = Object.entries(props ?? {}).filter(([, p]) => {
      const { not, ...rest } = p;
      return Object.keys(rest).length > 0 && JSON.stringify(not) === JSON.stringify(rest);
    });
    for (const [name] of absent) delete props![name];
    if (absent.length === 1) o.not = { required: [absent[0]![0]] };
    else if (absent.length > 1) o.allOf = absent.map(([name]) => ({ not: { required: [name] } }));
    Object.values(o).forEach(walk);
  };
  walk(s);
  return s;
}

/** One named shape into the document's components; the same name for another shape throws. */
function addComponent(components: Record<string, JsonSchema>, id: string, shape: JsonSchema): void {
  const known = components[id];
  if (known && known !== shape && JSON.stringify(known) !== JSON.stringify(shape)) throw new Error(`two different shapes are named ${id} in the API document`);
  components[id] = shape;
}

/** The top-level keys of an object schema with their JSON Schema and whether each is required. */
export function objectFields(schema: Joi.Schema): { name: string; schema: JsonSchema; required: boolean; description?: string }[] {
  const s = joiToJsonSchema(schema);
  const required = new Set((s.required as string[] | undefined) ?? []);
  return Object.entries((s.properties ?? {}) as Record<string, JsonSchema>)
    .filter(([, field]) => !('not' in field && Object.keys(field).length === 1)) // forbidden
    .map(([name, field]) => ({
      name,
      schema: field,
      required: required.has(name),
      ...(typeof field.description === 'string' ? { description: field.description } : {}),
    }));
}
