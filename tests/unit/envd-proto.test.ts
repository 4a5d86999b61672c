// The committed TypeScript of envd's protocol (runtime/api/e2b/envd/gen/) is what `npm run envd:proto` makes
// from proto/envd/ now: buf and protoc-gen-es, both from node_modules, run offline into a temporary directory.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";

const GENERATED = "runtime/api/e2b/envd/gen";
const out = mkdtempSync(path.join(tmpdir(), "envd-proto-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const files = (dir: string) =>
  readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.relative(dir, path.join(entry.parentPath, entry.name)))
    .sort();

describe("envd's generated protocol", () => {
  it("is what the generator makes from proto/envd", () => {
    execFileSync(
      path.join(REPO_ROOT, "node_modules/.bin/buf"),
      ["generate", "proto/envd", "--template", "proto/envd/buf.gen.yaml", "--output", out],
      { cwd: REPO_ROOT, stdio: "pipe" },
    );
    const made = path.join(out, GENERATED);
    const committed = path.join(REPO_ROOT, GENERATED);
    expect(files(made)).toEqual(["filesystem/filesystem_pb.ts", "process/process_pb.ts"]);
    expect(files(committed)).toEqual(files(made));
    for (const file of files(made))
      expect(readFileSync(path.join(committed, file), "utf8"), file).toBe(
        readFileSync(path.join(made, file), "utf8"),
      );
  });
});
