// The default allowlist has one source (DEFAULT_ALLOWLIST) and one description (docs/security.md): they
// must say the same, and the list must pass the API's own allowlist rules.
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULT_ALLOWLIST } from "../../components/tenant/spec.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { Allowlist } from "../../runtime/api/projects/settings.js";

describe("the default allowlist", () => {
  it("is the table in docs/security.md, host for host", () => {
    const doc = readFileSync(path.join(REPO_ROOT, "docs/security.md"), "utf8");
    const section = doc.slice(doc.indexOf("**The default allowlist**"));
    const lines = section.split("\n");
    const header = lines.findIndex((line) => /^\| for\s+\|/.test(line));
    const end = lines.findIndex((line, i) => i > header && !line.startsWith("|"));
    const table = lines.slice(header + 2, end).join("\n");
    expect(header).toBeGreaterThan(0);
    const documented = [...table.matchAll(/`([a-z0-9.-]+\.[a-z]+)`/g)].map((m) => m[1]);
    expect(documented.sort()).toEqual([...DEFAULT_ALLOWLIST].sort());
  });

  it("covers the three preinstalled agents' model APIs and passes the API's allowlist rules", () => {
    expect(DEFAULT_ALLOWLIST).toEqual(
      expect.arrayContaining(["api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"]),
    );
    expect(Allowlist.parse([...DEFAULT_ALLOWLIST])).toEqual([...DEFAULT_ALLOWLIST]);
    expect(new Set(DEFAULT_ALLOWLIST).size).toBe(DEFAULT_ALLOWLIST.length);
  });
});
