import { z } from "zod";
import { HttpError } from "../errors.js";

/** Parses a request part with its zod schema; a failure is a 400 naming every offending field. */
export function parseInput<T>(
  schema: z.ZodType<T>,
  value: unknown,
  part: "body" | "params" | "query" | "headers",
): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const all = parsed.error.issues.map((issue) => {
    const keys = issue.code === "unrecognized_keys" ? ((issue as { keys?: string[] }).keys ?? []) : [];
    const field = [...issue.path.map(String), ...(keys.length === 1 ? keys : [])].join(".") || part;
    return { field, message: keys.length > 1 ? `${issue.message}: ${keys.join(", ")}` : issue.message };
  });
  // A rule checked twice (by a field's schema and again by its list's) is named once.
  const details = all.filter(
    (detail, index) =>
      all.findIndex((other) => other.field === detail.field && other.message === detail.message) === index,
  );
  throw new HttpError(
    400,
    "validation_failed",
    `invalid ${part}: ${details.map((d) => `${d.field}: ${d.message}`).join("; ")}`,
    details,
  );
}

/** Characters as JSON Schema counts them (code points): an emoji is one, not two UTF-16 units. */
const codePoints = (value: string) => [...value].length;

/**
 * A string of `min` to `max` characters, counted as the OpenAPI document's minLength/maxLength count
 * them, so that what the document allows the validator accepts (zod's min/max count UTF-16 units).
 */
export function chars(min: number, max: number) {
  return z
    .string()
    .refine((value) => codePoints(value) >= min, {
      message: min === 1 ? "must not be empty" : `must be at least ${min} characters`,
      abort: true,
    })
    .refine((value) => codePoints(value) <= max, {
      message: `must be at most ${max} characters`,
      abort: true,
    })
    .meta({ minLength: min, maxLength: max });
}

/**
 * A name people read (a project's, an API key's): 1 to `max` characters, not blank, no control characters
 * (which a terminal would act on, and which Postgres refuses in text: NUL), trimmed.
 */
export function displayName(max: number) {
  return (
    chars(1, max)
      // Not blank: a character that String.prototype.trim keeps, spelt out (`\S` differs between dialects).
      .regex(/[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]/, {
        message: "must not be blank",
      })
      // \p{Cc}, spelt out: a document's pattern has no flags.
      .regex(/^[^\u0000-\u001f\u007f-\u009f]*$/, { message: "must not contain control characters" })
      .transform((name) => name.trim())
  );
}
