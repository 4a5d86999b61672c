// A small, deterministic JSON Schema 2020-12 toolkit for the API conformance test: a validator for the
// keywords the OpenAPI document uses (any other keyword is an error, so a constraint is never skipped
// unseen), valid values generated from a schema, and mutations of them.

export type Schema = Record<string, unknown>;

/** Keywords that only annotate. */
const ANNOTATIONS = new Set(["description", "title", "default", "examples", "format", "$schema"]);
const ASSERTIONS = new Set([
  "$ref",
  "minProperties",
  "dependentRequired",
  "type",
  "enum",
  "const",
  "properties",
  "required",
  "additionalProperties",
  "propertyNames",
  "items",
  "minItems",
  "maxItems",
  "uniqueItems",
  "minLength",
  "maxLength",
  "pattern",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "allOf",
  "anyOf",
  "oneOf",
  "not",
]);

const typeOf = (value: unknown): string =>
  value === null
    ? "null"
    : Array.isArray(value)
      ? "array"
      : typeof value === "number" && Number.isInteger(value)
        ? "integer"
        : typeof value;

const isType = (value: unknown, type: string) =>
  type === "number" ? typeof value === "number" && Number.isFinite(value) : typeOf(value) === type;

/** Characters as JSON Schema counts them. */
const length = (value: string) => [...value].length;

/** `#/components/schemas/Error` in `root`. */
export function resolve(schema: Schema, root: Schema): Schema {
  const ref = schema.$ref;
  if (typeof ref !== "string") return schema;
  if (!ref.startsWith("#/")) throw new Error(`unsupported $ref ${ref}`);
  let target: unknown = root;
  for (const part of ref.slice(2).split("/")) target = (target as Record<string, unknown>)[part];
  if (!target) throw new Error(`unresolved $ref ${ref}`);
  return resolve(target as Schema, root);
}

/** Every way `value` breaks `schema`, each with its JSON path; empty when it is valid. */
export function schemaErrors(schema: Schema, value: unknown, root: Schema, at = "$"): string[] {
  for (const keyword of Object.keys(schema))
    if (!ANNOTATIONS.has(keyword) && !ASSERTIONS.has(keyword))
      throw new Error(`${at}: the validator does not know the keyword ${keyword}`);
  if (schema.$ref) return schemaErrors(resolve(schema, root), value, root, at);
  const errors: string[] = [];
  const fail = (message: string) => errors.push(`${at}: ${message}`);
  if (schema.type !== undefined) {
    const types = [schema.type].flat() as string[];
    if (!types.some((type) => isType(value, type) || (type === "number" && typeOf(value) === "integer")))
      return [`${at}: ${JSON.stringify(value)?.slice(0, 60)} is not ${types.join(" or ")}`];
  }
  if (schema.const !== undefined && JSON.stringify(schema.const) !== JSON.stringify(value))
    fail(`is not ${JSON.stringify(schema.const)}`);
  if (Array.isArray(schema.enum) && !schema.enum.some((v) => JSON.stringify(v) === JSON.stringify(value)))
    fail(`is not one of ${JSON.stringify(schema.enum)}`);
  if (typeof value === "string") {
    if (typeof schema.minLength === "number" && length(value) < schema.minLength)
      fail(`shorter than ${schema.minLength}`);
    if (typeof schema.maxLength === "number" && length(value) > schema.maxLength)
      fail(`longer than ${schema.maxLength}`);
    if (typeof schema.pattern === "string" && !new RegExp(schema.pattern).test(value))
      fail(`does not match ${schema.pattern}`);
  }
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) fail(`below ${schema.minimum}`);
    if (typeof schema.maximum === "number" && value > schema.maximum) fail(`above ${schema.maximum}`);
    if (typeof schema.exclusiveMinimum === "number" && value <= schema.exclusiveMinimum)
      fail(`not above ${schema.exclusiveMinimum}`);
    if (typeof schema.exclusiveMaximum === "number" && value >= schema.exclusiveMaximum)
      fail(`not below ${schema.exclusiveMaximum}`);
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems)
      fail(`fewer than ${schema.minItems} items`);
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems)
      fail(`more than ${schema.maxItems} items`);
    if (schema.uniqueItems === true && new Set(value.map((item) => JSON.stringify(item))).size < value.length)
      fail("items not unique");
    if (schema.items)
      value.forEach((item, i) =>
        errors.push(...schemaErrors(schema.items as Schema, item, root, `${at}[${i}]`)),
      );
  }
  if (typeOf(value) === "object") {
    const object = value as Record<string, unknown>;
    const properties = (schema.properties ?? {}) as Record<string, Schema>;
    for (const name of (schema.required ?? []) as string[]) if (!(name in object)) fail(`misses ${name}`);
    if (typeof schema.minProperties === "number" && Object.keys(object).length < schema.minProperties)
      fail(`has fewer than ${schema.minProperties} properties`);
    for (const [name, needs] of Object.entries((schema.dependentRequired ?? {}) as Record<string, string[]>))
      if (name in object)
        for (const other of needs) if (!(other in object)) fail(`has ${name} without ${other}`);
    for (const [name, item] of Object.entries(object)) {
      if (properties[name]) errors.push(...schemaErrors(properties[name], item, root, `${at}.${name}`));
      else if (schema.additionalProperties === false) fail(`has no property ${name}`);
      else if (typeof schema.additionalProperties === "object")
        errors.push(...schemaErrors(schema.additionalProperties as Schema, item, root, `${at}.${name}`));
      if (schema.propertyNames)
        errors.push(...schemaErrors(schema.propertyNames as Schema, name, root, `${at} (name ${name})`));
    }
  }
  if (schema.not && schemaErrors(schema.not as Schema, value, root, at).length === 0)
    fail(`matches ${JSON.stringify(schema.not)}, which it must not`);
  for (const sub of (schema.allOf ?? []) as Schema[]) errors.push(...schemaErrors(sub, value, root, at));
  if (schema.anyOf && !(schema.anyOf as Schema[]).some((s) => schemaErrors(s, value, root, at).length === 0))
    fail("matches none of anyOf");
  if (
    schema.oneOf &&
    (schema.oneOf as Schema[]).filter((s) => schemaErrors(s, value, root, at).length === 0).length !== 1
  )
    fail("does not match exactly one of oneOf");
  return errors;
}

export interface Generation {
  /** Fresh values for a format (`email`: a new address each call, so that registrations do not collide). */
  readonly formats?: Readonly<Record<string, () => string>>;
}

const UUIDS = ["6f1c2a9e-3b7d-4c1e-9a55-0d2f8b7e4c31", "00000000-0000-0000-0000-000000000000"];
/** Counted as one character by JSON Schema, as two UTF-16 units by JavaScript. */
const WIDE = "😀";

/**
 * Values valid by `schema`: the schema's own examples, boundaries (shortest and longest strings, the
 * longest made of characters outside the BMP; smallest and largest numbers; fewest and most items), an
 * object with only its required properties and one with all. Every candidate is checked against the
 * schema; a schema no candidate satisfies (a pattern without examples) is an error naming it.
 */
export function validValues(schema: Schema, root: Schema, options: Generation = {}, at = "$"): unknown[] {
  schema = resolve(schema, root);
  const keep = (candidates: unknown[]) => {
    const valid = candidates.filter((c) => schemaErrors(schema, c, root).length === 0);
    const unique = [...new Map(valid.map((v) => [JSON.stringify(v), v])).values()];
    if (unique.length === 0)
      throw new Error(`${at}: no valid value could be generated for ${JSON.stringify(schema).slice(0, 200)}`);
    return unique;
  };
  if (schema.const !== undefined) return [schema.const];
  if (Array.isArray(schema.enum)) return schema.enum;
  for (const union of ["anyOf", "oneOf"] as const)
    if (Array.isArray(schema[union]))
      return keep((schema[union] as Schema[]).flatMap((s) => validValues(s, root, options, at)));
  const types = schema.type === undefined ? ["object"] : ([schema.type].flat() as string[]);
  const candidates: unknown[] = [...((schema.examples as unknown[] | undefined) ?? [])];
  for (const type of types) {
    switch (type) {
      case "null":
        candidates.push(null);
        break;
      case "boolean":
        candidates.push(true, false);
        break;
      case "integer":
      case "number": {
        const min = typeof schema.minimum === "number" ? schema.minimum : 0;
        const max = typeof schema.maximum === "number" ? schema.maximum : min + 100;
        candidates.push(min, max, Math.min(max, min + 1));
        break;
      }
      case "string": {
        const format = typeof schema.format === "string" ? options.formats?.[schema.format] : undefined;
        if (format) candidates.push(format());
        if (schema.format === "uuid") candidates.push(...UUIDS);
        const min = typeof schema.minLength === "number" ? schema.minLength : 0;
        const max = typeof schema.maxLength === "number" ? schema.maxLength : Math.max(min, 16);
        candidates.push("x".repeat(Math.max(min, 1)), `  ${"y".repeat(Math.max(min, 1))}  `);
        candidates.push("x".repeat(min), WIDE.repeat(max), "z".repeat(max));
        break;
      }
      case "array": {
        const items = validValues((schema.items ?? {}) as Schema, root, options, `${at}[]`);
        const min = typeof schema.minItems === "number" ? schema.minItems : 0;
        const max = typeof schema.maxItems === "number" ? schema.maxItems : min + 3;
        const of = (n: number) => Array.from({ length: n }, (_, i) => items[i % items.length]);
        candidates.push(of(min), of(Math.min(max, Math.max(min, items.length))), of(max));
        break;
      }
      case "object": {
        const properties = (schema.properties ?? {}) as Record<string, Schema>;
        const required = new Set((schema.required ?? []) as string[]);
        const values = (name: string) => validValues(properties[name]!, root, options, `${at}.${name}`);
        const object = (names: string[], pick: (name: string) => unknown) =>
          Object.fromEntries(names.map((name) => [name, pick(name)]));
        const requiredNames = [...required];
        const allNames = Object.keys(properties);
        candidates.push(object(requiredNames, (n) => values(n)[0]));
        candidates.push(object(allNames, (n) => values(n)[0]));
        // Each property through each of its values, the others at their first.
        for (const name of allNames)
          for (const value of values(name).slice(1))
            candidates.push({ ...object(requiredNames, (n) => values(n)[0]), [name]: value });
        break;
      }
      default:
        throw new Error(`${at}: cannot generate type ${type}`);
    }
  }
  return keep(candidates);
}

/**
 * Mutations of a valid value that a validator following `schema` must refuse: wrong types, missing
 * required properties, unknown properties, strings too long or too short or off their pattern, numbers
 * out of range or fractional, too few or too many items. Not each is guaranteed invalid (a pattern may
 * accept a mutation): the caller classifies every request by the document.
 */
export function mutations(schema: Schema, valid: unknown, root: Schema): unknown[] {
  schema = resolve(schema, root);
  const out: unknown[] = [];
  const types = [schema.type].flat();
  out.push(typeof valid === "string" ? 12345 : "not the right type");
  if (!types.includes("null")) out.push(null);
  if (typeof valid === "string") {
    if (typeof schema.maxLength === "number") out.push("x".repeat(schema.maxLength + 1));
    if (typeof schema.minLength === "number" && schema.minLength > 0)
      out.push("x".repeat(schema.minLength - 1));
    out.push(`${valid}\u0000`, " ", "", "../../etc/passwd", "x".repeat(5000));
  }
  if (typeof valid === "number") {
    if (typeof schema.minimum === "number") out.push(schema.minimum - 1);
    if (typeof schema.maximum === "number") out.push(schema.maximum + 1);
    out.push(valid + 0.5, String(valid));
  }
  if (typeof valid === "boolean") out.push("yes", 1);
  if (Array.isArray(valid)) {
    out.push([], {});
    if (typeof schema.maxItems === "number")
      out.push(
        Array.from({ length: schema.maxItems + 1 }, (_, i) => valid[i % Math.max(valid.length, 1)] ?? "x"),
      );
    if (valid.length > 0 && schema.items)
      for (const item of mutations(schema.items as Schema, valid[0], root))
        out.push([item, ...valid.slice(1)]);
  }
  if (typeOf(valid) === "object") {
    const object = valid as Record<string, unknown>;
    const properties = (schema.properties ?? {}) as Record<string, Schema>;
    out.push([object], "text");
    for (const name of (schema.required ?? []) as string[])
      out.push(Object.fromEntries(Object.entries(object).filter(([key]) => key !== name)));
    out.push({ ...object, unexpected_field: true });
    for (const [name, property] of Object.entries(properties)) {
      const base = name in object ? object[name] : validValues(property, root)[0];
      for (const bad of mutations(property, base, root)) out.push({ ...object, [name]: bad });
    }
  }
  return out;
}
