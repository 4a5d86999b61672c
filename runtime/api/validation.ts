import type { z } from "zod";
import { HttpError } from "../errors.js";

/** Parses a request part with its zod schema; a failure is a 400 naming every offending field. */
export function parseInput<T>(
  schema: z.ZodType<T>,
  value: unknown,
  part: "body" | "params" | "query" | "headers",
): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const details = parsed.error.issues.map((issue) => {
    const keys = issue.code === "unrecognized_keys" ? ((issue as { keys?: string[] }).keys ?? []) : [];
    const field = [...issue.path.map(String), ...(keys.length === 1 ? keys : [])].join(".") || part;
    return { field, message: keys.length > 1 ? `${issue.message}: ${keys.join(", ")}` : issue.message };
  });
  throw new HttpError(
    400,
    "validation_failed",
    `invalid ${part}: ${details.map((d) => `${d.field}: ${d.message}`).join("; ")}`,
    details,
  );
}
