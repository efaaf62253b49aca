// joi-to-json ships types for its `parse` only; its parser classes are meant to be extended.
// These are the methods src/http/joi-schema.ts overrides (joi-to-json 5.0.5).
declare module 'joi-to-json/lib/parsers/open-api-3.1.js' {
  type Schema = Record<string, unknown>;
  type Definitions = Record<string, unknown>;
  export default class OpenApi31Parser {
    constructor(options?: Record<string, unknown>);
    parse(description: any, definitions?: Definitions, level?: number): Schema;
    protected _getFieldType(description: any): string;
    protected _setStringFieldProperties(schema: Schema, description: any): void;
    protected _setDateFieldProperties(schema: Schema, description: any): void;
    protected _setObjectProperties(schema: Schema, description: any, definitions: Definitions, level: number): void;
    protected _setConditionCompositionStyle(schema: Schema, condition: any, definitions: Definitions, level: number): Schema;
    protected _addNullTypeIfNullable(schema: Schema, description: any): void;
  }
}
