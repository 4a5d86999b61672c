// The runtime release the GCP host runs (components/gcp/runtime-release.ts) holds every file the host's
// programs import: a directory left out is a host that cannot start (lib/ once was; tests/gcp-host found it).
import { existsSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { RELEASE_ENTRIES } from "../../components/gcp/runtime-release.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

/**
 * What the host runs: the runtime's unit and the provider plugins (the bundles `npm run setup` makes with
 * scripts/bundles.ts), the web console it builds.
 */
const ENTRY_POINTS = [
  "scripts/bundles.ts",
  "runtime/start.ts",
  "runtime/main.ts",
  "provider/main-sandbox.ts",
  "provider/main-command.ts",
  "web/src/main.ts",
];

/** Every file reachable from `entries` through relative imports (`.js` specifiers name `.ts` sources). */
function importClosure(entries: readonly string[]): Set<string> {
  const seen = new Set<string>();
  const pending = [...entries];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const text = readFileSync(path.join(REPO_ROOT, file), "utf8");
    for (const match of text.matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)) {
      const target = path.normalize(path.join(path.dirname(file), match[1]!));
      const source = [target.replace(/\.js$/, ".ts"), target.replace(/\.js$/, ".tsx"), target].find(
        (candidate) => existsSync(path.join(REPO_ROOT, candidate)),
      );
      if (source === undefined) throw new Error(`${file} imports ${match[1]}, which does not exist`);
      if (/\.(ts|tsx|js|mjs)$/.test(source)) pending.push(source);
    }
  }
  return seen;
}

describe("the runtime release", () => {
  it("holds every file the host's programs import", () => {
    for (const entry of ENTRY_POINTS) expect(existsSync(path.join(REPO_ROOT, entry)), entry).toBe(true);
    const closure = [...importClosure(ENTRY_POINTS)];
    expect(closure.length).toBeGreaterThan(100);
    const outside = closure.filter(
      (file) => !(RELEASE_ENTRIES as readonly string[]).includes(file.split(path.sep)[0]!),
    );
    expect(outside).toEqual([]);
  });
});
