// The tenant program version (stacks/tenant/version.ts): a content hash over the files the program is
// made of. The list of sources is checked against what the compiler says the program imports, so a new
// import from a folder outside the list cannot slip by without changing the version.
import { cpSync, mkdtempSync, rmSync, symlinkSync, writeFileSync, readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import {
  TENANT_PROGRAM_SOURCES,
  tenantProgramCompileErrors,
  tenantProgramVersion,
} from "../../stacks/tenant/version.js";

const copies: string[] = [];
/** A copy of the program's sources (and the compiler) in a directory of its own. */
function checkoutCopy(): string {
  const root = mkdtempSync(path.join(os.tmpdir(), "program-version-"));
  copies.push(root);
  for (const source of [...TENANT_PROGRAM_SOURCES, "tsconfig.json", "package.json"])
    cpSync(path.join(REPO_ROOT, source), path.join(root, source), { recursive: true });
  symlinkSync(path.join(REPO_ROOT, "node_modules"), path.join(root, "node_modules"));
  return root;
}
afterAll(() => copies.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

describe("the tenant program version", () => {
  it("covers every file the program imports", () => {
    const files = execFileSync(
      path.join(REPO_ROOT, "node_modules/.bin/tsc"),
      ["-p", "stacks/tenant/tsconfig.json", "--listFilesOnly"],
      { cwd: REPO_ROOT, encoding: "utf8" },
    )
      .split("\n")
      .filter((file) => file && !file.includes("/node_modules/"))
      .map((file) => path.relative(REPO_ROOT, file));
    expect(files).toContain("components/tenant/tenant.ts");
    const uncovered = files.filter(
      (file) => !TENANT_PROGRAM_SOURCES.some((source) => file === source || file.startsWith(`${source}/`)),
    );
    expect(uncovered).toEqual([]);
  });

  it("is the same for the same content in another directory, and changes with one byte of the program", () => {
    const here = tenantProgramVersion();
    expect(here.version).toMatch(/^sha256:[0-9a-f]{16}$/);
    const copy = checkoutCopy();
    expect(tenantProgramVersion(copy)).toEqual({ version: here.version }); // no git there: no commit
    const file = path.join(copy, "components/tenant/tenant.ts");
    writeFileSync(file, `${readFileSync(file, "utf8")}\n// one more line\n`);
    expect(tenantProgramVersion(copy).version).not.toBe(here.version);
  });

  it("a program that does not compile is reported with the file and the error", async () => {
    const copy = checkoutCopy();
    expect(await tenantProgramCompileErrors(copy)).toBeUndefined();
    const file = path.join(copy, "components/tenant/tenant.ts");
    writeFileSync(file, `${readFileSync(file, "utf8")}\nexport const broken: number = "not a number";\n`);
    const report = await tenantProgramCompileErrors(copy);
    expect(report).toMatch(/components\/tenant\/tenant\.ts\(\d+,\d+\): error TS2322/);
    // The checks are incremental (the build information kept per checkout): an unchanged program that
    // does not compile says so again, and once mended it compiles.
    expect(await tenantProgramCompileErrors(copy)).toBe(report);
    writeFileSync(file, readFileSync(file, "utf8").replace('"not a number"', "42"));
    expect(await tenantProgramCompileErrors(copy)).toBeUndefined();
  });
});
