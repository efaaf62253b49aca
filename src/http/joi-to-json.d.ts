// joi-to-json ships types for its `parse` only; its parser classes are meant to be extended.
// These are the methods src/http/joi-schema.ts overrides (joi-to-json 5.0.5).
declare module 'joi-to-json/lib/parsers/open-api-3.1.js' {
  type Schema = Record<string, unknown>;
  type Definitions = Record<string, unknown>;
  /** joi's describe() output, a part of it; the subclass narrows it to the shape it reads */
  type Description = unknown;
  export default class OpenApi31Parser {
    constructor(options?: Record<string, unknown>);
    parse(description: Description, definitions?: Definitions, level?: number): Schema;
    protected _getFieldType(description: Description): string;
    protected _setStringFieldProperties(schema: Schema, description: Description): void;
    protected _setDateFieldProperties(schema: Schema, description: Description): void;
    protected _setObjectProperties(schema: Schema, description: Description, definitions: Definitions, level: number): void;
    protected _setConditionCompositionStyle(schema: Schema, condition: Description, definitions: Definitions, level: number): Schema;
    protected _addNullTypeIfNullable(schema: Schema, description: Description): void;
  }
}
