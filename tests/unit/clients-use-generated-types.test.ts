// The CLI and the web console reach the API only through the SDK's `Client.call`, whose paths, bodies and
// answers are the types generated from /openapi.json (sdk/src/openapi.ts): a field the API renames is then a
// compile error in them, not "[object Object]" at run time. This reads their sources and fails, naming the
// file and line, on what would bypass that: a fetch of their own, an untyped request whose answer type the
// caller asserts (`request<T>`, `raw`, `json`), or a hand-written type that restates an API body.
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = path.resolve(import.meta.dirname, "../..");
const GENERATED = path.join(ROOT, "sdk/src/openapi.ts");

function sourceFiles(dir: string, extensions: readonly string[]): string[] {
  return readdirSync(path.join(ROOT, dir), { recursive: true, encoding: "utf8" })
    .filter((file) => extensions.some((extension) => file.endsWith(extension)) && !file.endsWith(".d.ts"))
    .map((file) => path.join(dir, file))
    .sort();
}

function parse(file: string): ts.SourceFile {
  const text = readFileSync(path.isAbsolute(file) ? file : path.join(ROOT, file), "utf8");
  const kind = file.endsWith(".tsx") ? ts.ScriptKind.TSX : ts.ScriptKind.TS;
  return ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
}

function walk(node: ts.Node, visit: (node: ts.Node) => void): void {
  visit(node);
  node.forEachChild((child) => walk(child, visit));
}

/** The property names of an object type written out (a type literal or an interface). */
function memberNames(node: ts.TypeLiteralNode | ts.InterfaceDeclaration): string[] {
  return node.members
    .filter((member) => ts.isPropertySignature(member) && member.name !== undefined)
    .map((member) => {
      const name = member.name!;
      return ts.isIdentifier(name) || ts.isStringLiteral(name) ? name.text : name.getText();
    });
}

/** Every object the document describes (request and answer bodies and their parts), as its field names. */
function generatedShapes(): Set<string>[] {
  const shapes: Set<string>[] = [];
  walk(parse(GENERATED), (node) => {
    if (!ts.isTypeLiteralNode(node)) return;
    const names = memberNames(node);
    // The operations' own scaffolding (parameters, requestBody, responses, content) is not a body.
    if (names.length >= 2 && !names.includes("responses") && !names.includes("headers"))
      shapes.push(new Set(names));
  });
  return shapes;
}

/** Callees whose answer type the caller asserts instead of the document giving it. */
const UNTYPED_CALLS = new Set(["raw", "json", "request"]);
/** The browser's Web Locks API has a `request` too; it is not the API's. */
const NOT_THE_API = new Set(["navigator.locks"]);

/** The places in `file` that bypass the generated types, as "file:line: why". */
export function bypasses(file: string, shapes: readonly Set<string>[]): string[] {
  const source = parse(file);
  const found: string[] = [];
  const at = (node: ts.Node, why: string) =>
    found.push(`${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${why}`);
  walk(source, (node) => {
    if (ts.isCallExpression(node)) {
      const callee = node.expression;
      if (ts.isIdentifier(callee) && callee.text === "fetch")
        at(node, "fetch of its own: call the API through the SDK's Client.call");
      if (ts.isPropertyAccessExpression(callee)) {
        const name = callee.name.text;
        if (name === "fetch") at(node, "fetch of its own: call the API through the SDK's Client.call");
        else if (UNTYPED_CALLS.has(name) && !NOT_THE_API.has(callee.expression.getText()))
          at(node, `untyped request .${name}(): use Client.call, whose answer type the document gives`);
      }
    }
    if (ts.isTypeLiteralNode(node) || ts.isInterfaceDeclaration(node)) {
      const names = memberNames(node);
      const restated = names.length >= 2 && shapes.find((shape) => names.every((name) => shape.has(name)));
      if (restated)
        at(
          node,
          `a hand-written type restates an API body ({${names.join(", ")}}): look it up in the generated types (Data<path, method>)`,
        );
    }
  });
  return found;
}

const CLIENT_SOURCES = [...sourceFiles("cli", [".ts"]), ...sourceFiles("web/src", [".ts", ".tsx"])];

describe("the CLI and the web console use the types generated from the API's document", () => {
  const shapes = generatedShapes();

  it("reads the document's bodies (the check has something to compare with)", () => {
    const projectView = ["project_id", "status", "terminal_url", "operation", "front_door"];
    expect(shapes.some((shape) => projectView.every((name) => shape.has(name)))).toBe(true);
    expect(CLIENT_SOURCES).toContain(path.join("cli", "main.ts"));
    expect(CLIENT_SOURCES).toContain(path.join("web/src", "api.ts"));
  });

  it("no fetch of their own, no untyped request, no hand-written API body", () => {
    expect(CLIENT_SOURCES.flatMap((file) => bypasses(file, shapes))).toEqual([]);
  });

  it("finds each of those in a client written the old way", () => {
    const old = path.join(ROOT, "tests/unit/fixtures/untyped-api-client.ts.txt");
    expect(bypasses(old, shapes).map((line) => line.replace(`${old}:`, ""))).toEqual([
      expect.stringMatching(/^8: a hand-written type restates an API body \(\{project_id, name, status/),
      expect.stringMatching(/^13: a hand-written type restates an API body \(\{kind, progress\}\)/),
      expect.stringMatching(/^16: a hand-written type restates an API body \(\{mode, interval_seconds\}\)/),
      expect.stringMatching(/^22: fetch of its own/),
      expect.stringMatching(/^28: untyped request \.request\(\)/),
      expect.stringMatching(/^29: untyped request \.json\(\)/),
    ]);
  });
});
