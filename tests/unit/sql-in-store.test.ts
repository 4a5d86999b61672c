// Every SQL statement of the runtime lives in runtime/store/, behind a named function: no file of runtime/
// outside it calls `.query(` or holds a string that reads as a statement. A statement elsewhere fails here,
// named by file and line.
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = path.resolve(import.meta.dirname, "../..");
const STORE = "runtime/store/";

/**
 * The starts of SQL statements (after whitespace, in any case), each shaped so that prose beginning with the
 * same word (a route's "Delete a file", "Update the spec") does not match.
 */
const STATEMENT_STARTS: readonly RegExp[] = [
  /^select\s+(\*|\d|[\w.]+\s*\(|[\s\S]*\b(from|as)\b)/i,
  /^insert\s+into\b/i,
  /^update\s+[\w.]+(\s+as\s+\w+|\s+\w+)?\s+set\b/i,
  /^delete\s+from\b/i,
  /^with\s+(recursive\s+)?\w+\s*(\([^)]*\)\s*)?as\s*(not\s+)?(materialized\s+)?\(/i,
  /^(create|alter|drop)\s+table\b/i,
];

/** The literal text of a string or template (a substitution stands as `${}`), or undefined for other nodes. */
function literalText(node: ts.Node): string | undefined {
  if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) return node.text;
  if (ts.isTemplateExpression(node))
    return node.head.text + node.templateSpans.map((span) => "${}" + span.literal.text).join("");
  return undefined;
}

const isStatement = (text: string) => STATEMENT_STARTS.some((start) => start.test(text.trimStart()));

/** `file:line: what` for each `.query(` call and each SQL statement string in `source`. */
export function sqlOutsideStore(file: string, source: string): string[] {
  const parsed = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: string[] = [];
  const at = (node: ts.Node) => `${file}:${parsed.getLineAndCharacterOfPosition(node.getStart()).line + 1}`;
  const visit = (node: ts.Node): void => {
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      node.expression.name.text === "query"
    )
      found.push(`${at(node)}: a .query( call`);
    const text = literalText(node);
    if (text !== undefined && isStatement(text))
      found.push(`${at(node)}: an SQL statement (${text.trim().split("\n")[0]!.slice(0, 60)})`);
    // A template's parts are not strings of their own: its whole text was judged above.
    if (!ts.isTemplateExpression(node)) node.forEachChild(visit);
    else node.templateSpans.forEach((span) => visit(span.expression));
  };
  visit(parsed);
  return found;
}

/** Every TypeScript file under runtime/ but the store's, relative to the root. */
function runtimeFilesOutsideStore(): string[] {
  return readdirSync(path.join(ROOT, "runtime"), { recursive: true, encoding: "utf8" })
    .map((file) => `runtime/${file.split(path.sep).join("/")}`)
    .filter((file) => /\.m?tsx?$/.test(file) && !file.endsWith(".d.ts") && !file.startsWith(STORE))
    .sort();
}

describe("SQL lives in runtime/store/", () => {
  it("no file of runtime/ outside the store calls .query( or holds an SQL statement", () => {
    const files = runtimeFilesOutsideStore();
    expect(files.length).toBeGreaterThan(50);
    const found = files.flatMap((file) => sqlOutsideStore(file, readFileSync(path.join(ROOT, file), "utf8")));
    expect(found).toEqual([]);
  });

  it("finds each kind of statement, and a .query( call, by line", () => {
    const source = [
      'await db.query("select 1");',
      "const a = `select id, name from projects where id = $1`;",
      "const b = `\n  SELECT ${columns} AS n FROM t`;",
      "const c = 'insert into users (id) values ($1)';",
      'const d = "update tenants set state = $2 where project_id = $1";',
      'const e = "delete from rate_limits where key = $1";',
      "const f = `with recent as (select 1) select * from recent`;",
      'const g = "create table t (id int)";',
      'const h = "alter table t add column x int";',
      'const i = "drop table t";',
      "await tx.query<{ id: string }>(sql, []);",
    ].join("\n");
    expect(sqlOutsideStore("probe.ts", source).map((problem) => problem.split(": ")[0])).toEqual([
      "probe.ts:1",
      "probe.ts:1",
      "probe.ts:2",
      "probe.ts:3",
      "probe.ts:5",
      "probe.ts:6",
      "probe.ts:7",
      "probe.ts:8",
      "probe.ts:9",
      "probe.ts:10",
      "probe.ts:11",
      "probe.ts:12",
    ]);
  });

  it("leaves prose that starts with the same words alone", () => {
    const source = [
      'const summary = "Delete a file, a symlink (not its target), or a directory";',
      'const other = "Update the project\'s settings";',
      'const third = "select a backend with --backend";',
      "const fourth = `with ${count} projects as of now`;",
      "request.query;",
    ].join("\n");
    expect(sqlOutsideStore("probe.ts", source)).toEqual([]);
  });
});
