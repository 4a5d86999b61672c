import { readFileSync } from "node:fs";
import * as path from "node:path";
import { REPO_ROOT } from "../toolchain.js";

/** Fills `{{name}}` placeholders in a file under host-config/; a missing or unused value is an error. */
export function renderHostConfig(relativePath: string, values: Record<string, string | number>): string {
  const template = readFileSync(path.join(REPO_ROOT, "host-config", relativePath), "utf8");
  const used = new Set<string>();
  const rendered = template.replace(/\{\{(\w+)\}\}/g, (_match, key: string) => {
    const value = values[key];
    if (value === undefined) throw new Error(`host-config/${relativePath}: no value for {{${key}}}`);
    used.add(key);
    return String(value);
  });
  const unused = Object.keys(values).filter((key) => !used.has(key));
  if (unused.length > 0) throw new Error(`host-config/${relativePath}: unused values ${unused.join(", ")}`);
  return rendered;
}
