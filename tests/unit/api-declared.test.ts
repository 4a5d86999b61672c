// Each endpoint is declared once (runtime/api/route.ts): the declaration registers it, validates its input,
// types its handler and writes its OpenAPI entry, and the caller and the project's owner are checked before
// any handler runs. These checks keep it so: no route registered around the layer, no caller, operator or
// owner check and no input parsing inside a handler's file, and no file of the API, the CLI or the stacks
// grown past what one reader takes in.
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";

/** Every `.ts` file under `dir` (repository-relative). */
function sources(dir: string): string[] {
  return readdirSync(path.join(REPO_ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts"))
    .map((entry) => path.relative(REPO_ROOT, path.join(entry.parentPath, entry.name)));
}

const read = (file: string) => readFileSync(path.join(REPO_ROOT, file), "utf8");

/** `file:line: text` for each line of `files` that matches `pattern` (comments skipped). */
function findings(files: readonly string[], pattern: RegExp): string[] {
  return files.flatMap((file) =>
    read(file)
      .split("\n")
      .flatMap((line, index) =>
        pattern.test(line) && !/^\s*(\/\/|\*|\/\*)/.test(line)
          ? [`${file}:${index + 1}: ${line.trim()}`]
          : [],
      ),
  );
}

const API = [...sources("runtime/api"), "runtime/server.ts"];
/** Where the layer itself does what no handler may: registers, authenticates, checks the owner, parses. */
const LAYER = new Set(["runtime/api/route.ts", "runtime/api/validation.ts", "runtime/api/auth.ts"]);
/**
 * The web console's static files and its SPA fallback, and envd's HTTP endpoints (E2B's in-sandbox protocol
 * for its SDKs, with its own access token, beside its Connect procedures): served, not part of the API's
 * document.
 */
const NOT_THE_API = new Set([
  "runtime/api/web-console.ts",
  "runtime/api/e2b/envd/http.ts",
  "runtime/api/e2b/envd/index.ts",
]);
const HANDLER_FILES = API.filter((file) => /\broutes\.handle\(/.test(read(file)));
/**
 * /healthz and /metrics tell apart five kinds of caller (this host, an operator, the metrics token, another
 * user, anyone), which no access level is: their one caller check, before either handler's work.
 */
const OWN_CALLER_CHECK = new Set(["runtime/api/internals.ts"]);

describe("each endpoint declared once", () => {
  it("finds the route files (the checks below would pass vacuously otherwise)", () => {
    expect(HANDLER_FILES.length).toBeGreaterThanOrEqual(10);
    expect(HANDLER_FILES).toContain("runtime/api/projects/routes.ts");
  });

  it("registers no route around the route layer", () => {
    const direct = findings(
      API.filter((file) => !LAYER.has(file) && !NOT_THE_API.has(file)),
      /\b(?:app|scope|instance|server)\.(?:get|post|put|patch|delete|head|options|all|route)\(/,
    );
    expect(direct).toEqual([]);
  });

  it("authenticates, checks operators and owners, and parses input only in the layer, never in a handler", () => {
    const inHandlers = findings(
      HANDLER_FILES.filter((file) => !LAYER.has(file) && !OWN_CALLER_CHECK.has(file)),
      /\.authenticate\(|\bisOperator\(|\brequireOwnProject\(|\bparseInput\(/,
    );
    expect(inHandlers).toEqual([]);
  });

  it("keeps every file of the API, the CLI and the stacks under 420 lines", () => {
    // Generated code (protoc-gen-es's, from proto/) is read through its .proto, not line by line.
    const long = [...sources("runtime/api"), ...sources("cli"), ...sources("stacks")]
      .filter((file) => !file.endsWith("_pb.ts"))
      .map((file) => ({ file, lines: read(file).split("\n").length }))
      .filter(({ lines }) => lines > 420)
      .map(({ file, lines }) => `${file}: ${lines} lines`);
    expect(long).toEqual([]);
  });
});
