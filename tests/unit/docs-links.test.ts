// The project's Markdown keeps its links true. For every Markdown file of the repository (README.md,
// docs/, each folder's README.md):
//   - a relative link names a file or folder that exists;
//   - a heading anchor (`#some-heading`, in the same doc or another one) names a heading of that doc;
//   - a line anchor (`#L<n>`, or `#L<n>-L<m>`) is the line where the symbol named by the link's text is
//     declared, so a link into the code fails here when the code moves under it, and the message says
//     where the symbol is now;
//   - a code span that is a path in one of the repository's folders (`runtime/main.ts`) names a file or
//     folder that exists, linked or not;
//   - no line number stands in prose ("line 203"), where nothing could check it.
//
// A line link names its symbol in its text, as exactly one code span:
//   [`Reconciler.poll`](../runtime/reconciler/reconciler.ts#L203)
// In a TypeScript or JavaScript file the symbol is
//   - the name of a declaration: a function, class, interface, type, enum, namespace or variable;
//   - a dotted path to a member or to a nested declaration: a class's method, property, accessor or
//     `constructor`, an interface's member, a property of an object literal, a function or variable
//     declared inside a function (`Reconciler.poll`, `main.shutdown`);
//   - a route, `METHOD /path`: a call `<x>.<method>("/path", …)`, Fastify's `app.post("/projects", …)`,
//     optionally after the path of the declaration it is made in (`registerProjectRoutes.POST /projects`).
// A symbol may leave out containers (`TenantEgress.firewall` for a variable of TenantEgress's constructor)
// when what is left is declared once in the file. The line is that of the declaration's name (of the call,
// for a route); an overloaded name may point at any of its declarations. In a Python file the symbol is the
// name of a `def` or `class`, in a shell script the name of a function.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import * as path from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

/** Folders that hold no docs of the project: dependencies, build output, local data. */
const NOT_DOCS = new Set(["node_modules", ".git", "dist", ".data", "coverage", "test-artifacts"]);

/** Every Markdown file of the repository, relative to its root. */
function markdownFiles(dir = ""): string[] {
  return readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = dir ? `${dir}/${entry.name}` : entry.name;
    if (entry.isDirectory()) return NOT_DOCS.has(entry.name) ? [] : markdownFiles(relative);
    return entry.isFile() && entry.name.endsWith(".md") ? [relative] : [];
  });
}

interface Link {
  /** The link's text as written, code spans included. */
  text: string;
  /** What is between the parentheses (or after a reference definition's colon). */
  target: string;
  /** 1-based line of the doc the link starts on. */
  line: number;
}

/** The doc with its fenced code blocks blanked (line numbers kept): nothing in them is a link or heading. */
function withoutFences(markdown: string): string {
  let fence: string | undefined;
  return markdown
    .split("\n")
    .map((line) => {
      const marker = /^\s{0,3}(`{3,}|~{3,})/.exec(line)?.[1];
      if (fence === undefined) {
        if (marker) fence = marker;
        return marker ? "" : line;
      }
      if (marker && marker[0] === fence[0] && marker.length >= fence.length) fence = undefined;
      return "";
    })
    .join("\n");
}

/** Length of the run of `char` starting at `at`. */
function runLength(text: string, at: number, char: string): number {
  let end = at;
  while (text[end] === char) end++;
  return end - at;
}

/** Where the code span opened by the backtick run at `at` ends (just past its closing run), or undefined. */
function codeSpanEnd(text: string, at: number): number | undefined {
  const ticks = runLength(text, at, "`");
  for (let i = at + ticks; i < text.length;) {
    if (text[i] !== "`") {
      i++;
      continue;
    }
    const run = runLength(text, i, "`");
    if (run === ticks) return i + run;
    i += run;
  }
  return undefined;
}

/** Inline links and images (`[text](target)`) and reference definitions (`[label]: target`) of a doc. */
function linksOf(markdown: string): Link[] {
  const text = withoutFences(markdown);
  const lineAt = (offset: number) => text.slice(0, offset).split("\n").length;
  const links: Link[] = [];
  for (let i = 0; i < text.length;) {
    const char = text[i];
    if (char === "\\") {
      i += 2;
      continue;
    }
    if (char === "`") {
      i = codeSpanEnd(text, i) ?? i + runLength(text, i, "`");
      continue;
    }
    if (char !== "[") {
      i++;
      continue;
    }
    // The link text: balanced brackets, code spans taken whole (a `]` inside one closes nothing).
    let depth = 1;
    let j = i + 1;
    while (j < text.length && depth > 0) {
      if (text[j] === "\\") j += 2;
      else if (text[j] === "`") j = codeSpanEnd(text, j) ?? j + 1;
      else {
        if (text[j] === "[") depth++;
        else if (text[j] === "]") depth--;
        j++;
      }
    }
    const linkText = text.slice(i + 1, j - 1);
    const destination = /^\(\s*<?([^\s)>]+)>?(?:\s+"[^"]*")?\s*\)/.exec(text.slice(j));
    const definition = /^:[ \t]+<?([^\s>]+)>?/.exec(text.slice(j));
    const startsLine = i === 0 || /\n[ \t]{0,3}$/.test(text.slice(Math.max(0, i - 4), i));
    if (depth === 0 && destination) {
      links.push({ text: linkText, target: destination[1]!, line: lineAt(i) });
      j += destination[0].length;
    } else if (depth === 0 && definition && startsLine) {
      links.push({ text: linkText, target: definition[1]!, line: lineAt(i) });
      j += definition[0].length;
    } else {
      // Not a link: look inside the brackets again, which may hold one ("[see [x](y)]").
      j = i + 1;
    }
    i = j;
  }
  return links;
}

/** GitHub's anchor for a heading's text (github-slugger): lower case, punctuation gone, spaces to hyphens. */
function headingSlug(heading: string): string {
  const rendered = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1") // a link or image shows its text
    .replace(/<[^>]+>/g, "") // HTML tags show nothing
    .replace(/`/g, "");
  return rendered
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** The anchors a doc defines: one per ATX heading (a repeated one gets -1, -2, …), HTML ids and names. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const text = withoutFences(markdown);
  for (const line of text.split("\n")) {
    const heading = /^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const slug = headingSlug(heading);
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  for (const match of text.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(match[1]!);
  return anchors;
}

interface Declaration {
  /** The names of its containers and its own, outermost first (`["Reconciler", "poll"]`). */
  path: string[];
  /** 1-based line of its name. */
  line: number;
}

const HTTP_METHODS = new Set(["get", "post", "put", "patch", "delete", "head", "options"]);

/** The name a node declares, and the node to take its line from; undefined for a node that declares none. */
function declaredName(node: ts.Node, source: ts.SourceFile): { name: string; at: ts.Node } | undefined {
  if (ts.isConstructorDeclaration(node)) {
    const keyword = node.getChildren(source).find((c) => c.kind === ts.SyntaxKind.ConstructorKeyword);
    return { name: "constructor", at: keyword ?? node };
  }
  if (
    ts.isCallExpression(node) &&
    ts.isPropertyAccessExpression(node.expression) &&
    HTTP_METHODS.has(node.expression.name.text) &&
    node.arguments[0] !== undefined &&
    ts.isStringLiteralLike(node.arguments[0]) &&
    node.arguments[0].text.startsWith("/")
  ) {
    return { name: `${node.expression.name.text.toUpperCase()} ${node.arguments[0].text}`, at: node };
  }
  if (
    ts.isFunctionDeclaration(node) ||
    ts.isClassDeclaration(node) ||
    ts.isClassExpression(node) ||
    ts.isInterfaceDeclaration(node) ||
    ts.isTypeAliasDeclaration(node) ||
    ts.isEnumDeclaration(node) ||
    ts.isEnumMember(node) ||
    ts.isModuleDeclaration(node) ||
    ts.isVariableDeclaration(node) ||
    ts.isMethodDeclaration(node) ||
    ts.isPropertyDeclaration(node) ||
    ts.isGetAccessorDeclaration(node) ||
    ts.isSetAccessorDeclaration(node) ||
    ts.isMethodSignature(node) ||
    ts.isPropertySignature(node) ||
    ts.isPropertyAssignment(node) ||
    ts.isShorthandPropertyAssignment(node)
  ) {
    const name = node.name;
    if (name && (ts.isIdentifier(name) || ts.isPrivateIdentifier(name) || ts.isStringLiteral(name)))
      return { name: name.text, at: name };
  }
  return undefined;
}

/** Every named declaration of a TypeScript or JavaScript file, with its containers' names. */
function declarationsOf(fileName: string, sourceText: string): Declaration[] {
  const source = ts.createSourceFile(fileName, sourceText, ts.ScriptTarget.Latest, true);
  const declarations: Declaration[] = [];
  const visit = (node: ts.Node, containers: string[]): void => {
    const declared = declaredName(node, source);
    const inner = declared ? [...containers, declared.name] : containers;
    if (declared) {
      const line = source.getLineAndCharacterOfPosition(declared.at.getStart(source)).line + 1;
      declarations.push({ path: inner, line });
    }
    ts.forEachChild(node, (child) => visit(child, inner));
  };
  visit(source, []);
  return declarations;
}

/** The functions of a shell script and the `def`s and `class`es of a Python file (names only). */
function scriptDeclarationsOf(fileName: string, sourceText: string): Declaration[] {
  const pattern = fileName.endsWith(".py")
    ? /^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)/
    : /^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{?/;
  return sourceText.split("\n").flatMap((text, index) => {
    const name = pattern.exec(text)?.[1];
    return name ? [{ path: [name], line: index + 1 }] : [];
  });
}

/** The declarations of a repository file a line anchor may point into, or undefined if its kind has none. */
function declarationsIn(file: string, sourceText: string): Declaration[] | undefined {
  if (/\.(?:[cm]?[jt]sx?)$/.test(file)) return declarationsOf(file, sourceText);
  const firstLine = sourceText.split("\n", 1)[0] ?? "";
  if (file.endsWith(".py") || /^#!.*python/.test(firstLine)) return scriptDeclarationsOf(".py", sourceText);
  if (file.endsWith(".sh") || /^#!.*\b(?:ba|da)?sh\b/.test(firstLine))
    return scriptDeclarationsOf(".sh", sourceText);
  return undefined;
}

const ROUTE = /^(?:(.+)\.)?((?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) \/\S*)$/;
const DOTTED = /^[A-Za-z_$#][\w$-]*(?:\.[A-Za-z_$#][\w$-]*)*$/;

/** A symbol's parts (`["Reconciler", "poll"]`), or undefined when the text is not a symbol. */
function symbolParts(symbol: string): string[] | undefined {
  const route = ROUTE.exec(symbol);
  if (route) {
    const containers = route[1];
    if (containers !== undefined && !DOTTED.test(containers)) return undefined;
    return [...(containers?.split(".") ?? []), route[2]!];
  }
  return DOTTED.test(symbol) ? symbol.split(".") : undefined;
}

/**
 * Where `symbol` is declared among `declarations`: the lines of the one declaration whose path is the
 * symbol's, or else the one whose name is the symbol's last part and whose containers include the
 * symbol's others in order; an error saying why when there is none or more than one.
 */
function findSymbol(symbol: string, declarations: Declaration[]): { lines: number[] } | { error: string } {
  const parts = symbolParts(symbol);
  if (!parts) return { error: `\`${symbol}\` is not a symbol (a dotted name, or METHOD /path for a route)` };
  const byPath = new Map<string, number[]>();
  for (const { path: declared, line } of declarations) {
    if (declared.at(-1) !== parts.at(-1)) continue;
    // The symbol's containers in order among the declaration's (`TenantEgress.firewall` for a variable
    // declared in TenantEgress's constructor).
    let at = 0;
    for (const container of declared.slice(0, -1)) if (container === parts[at]) at++;
    if (at < parts.length - 1) continue;
    const key = declared.join(".");
    byPath.set(key, [...(byPath.get(key) ?? []), line]);
  }
  const exact = byPath.get(parts.join("."));
  if (exact) return { lines: exact };
  const found = [...byPath];
  if (found.length === 1) return { lines: found[0]![1] };
  if (found.length === 0) return { error: `\`${symbol}\` is declared nowhere in it` };
  const where = found.map(([name, lines]) => `${name} (line ${lines.join(", ")})`).join(", ");
  return { error: `\`${symbol}\` is ambiguous there: ${where}; name one of those` };
}

/** The symbol a line link names: the content of its text when that is exactly one code span. */
function linkedSymbol(text: string): string | undefined {
  const span = /^(`+)\s*([^`]+?)\s*\1$/.exec(text.trim());
  return span?.[2];
}

/** The problems of one link of `doc` (both relative to the root), each a sentence naming doc and link. */
function linkProblems(doc: string, link: Link, readRepoFile: (file: string) => string): string[] {
  const written = `${doc}:${link.line}: [${link.text.replace(/\s+/g, " ")}](${link.target})`;
  // https:, mailto:, …: not a file of the repository.
  if (/^[a-z][a-z0-9+.-]*:/i.test(link.target)) return [];
  const [rawPath = "", anchor] = link.target.split("#", 2) as [string, string | undefined];
  if (rawPath.startsWith("/"))
    return [`${written}: a path from "/" leaves the repository on GitHub; make it relative to the doc`];
  const file =
    rawPath === "" ? doc : path.posix.normalize(path.posix.join(path.posix.dirname(doc), decodeURI(rawPath)));
  if (file.startsWith("../")) return [`${written}: ${file} is outside the repository`];
  const absolute = path.join(root, file);
  if (!existsSync(absolute)) return [`${written}: ${file} does not exist`];
  if (anchor === undefined || anchor === "") return [];
  if (statSync(absolute).isDirectory()) return [`${written}: ${file} is a folder, which has no anchors`];

  if (file.endsWith(".md")) {
    if (anchorsOf(readRepoFile(file)).has(anchor)) return [];
    return [`${written}: ${file} has no heading whose anchor is #${anchor}`];
  }
  const lineAnchor = /^L(\d+)(?:-L(\d+))?$/.exec(anchor);
  if (!lineAnchor) return [`${written}: #${anchor} is no line anchor (#L<n>) of ${file}`];
  const line = Number(lineAnchor[1]);
  const symbol = linkedSymbol(link.text);
  if (symbol === undefined)
    return [
      `${written}: a line link's text must name the symbol declared on that line as one code span, e.g. [\`createTenant\`](${rawPath}#L${line})`,
    ];
  const declarations = declarationsIn(file, readRepoFile(file));
  if (!declarations)
    return [`${written}: line anchors are checked in TypeScript, JavaScript, Python and shell files only`];
  const found = findSymbol(symbol, declarations);
  if ("error" in found) return [`${written}: in ${file}, ${found.error}`];
  if (found.lines.includes(line)) return [];
  const now = found.lines.map((n) => `L${n}`).join(" or ");
  return [`${written}: \`${symbol}\` is declared at ${file}#${now}, not #L${line}`];
}

/** The repository's own top-level folders: a code span starting with one of them and a slash is a path. */
const REPO_FOLDERS = new Set(
  readdirSync(root, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && !entry.name.startsWith(".") && !NOT_DOCS.has(entry.name))
    .map((entry) => entry.name),
);
/** A plain path: no placeholder (`<id>`), glob or space, which would name a family of files. */
const REPO_PATH = /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_./-]*$/;

/** A line number written as prose ("line 203", "lines 12-14"): nothing could check it. */
const PROSE_LINE = /\blines? \d+/gi;

/** Code spans of `text` (a doc, fences blanked) that are paths in the repository but name nothing. */
function pathProblems(doc: string, text: string): string[] {
  const problems: string[] = [];
  for (const match of text.matchAll(/(?<!`)`([^`\n]+)`(?!`)/g)) {
    const named = match[1]!;
    if (!REPO_PATH.test(named) || !REPO_FOLDERS.has(named.split("/")[0]!)) continue;
    if (existsSync(path.join(root, named))) continue;
    const line = text.slice(0, match.index).split("\n").length;
    problems.push(`${doc}:${line}: \`${named}\` names no file or folder of the repository`);
  }
  return problems;
}

/** Every problem of one doc (relative to the root). */
function docProblems(doc: string): string[] {
  const cache = new Map<string, string>();
  const readRepoFile = (file: string): string => {
    if (!cache.has(file)) cache.set(file, readFileSync(path.join(root, file), "utf8"));
    return cache.get(file)!;
  };
  const markdown = readRepoFile(doc);
  const problems = linksOf(markdown).flatMap((link) => linkProblems(doc, link, readRepoFile));
  const text = withoutFences(markdown);
  problems.push(...pathProblems(doc, text));
  // Prose outside code blocks and code spans only: a code span may quote a log line or a command.
  const prose = text.replace(/(`+)[^`]*?\1/g, (span) => span.replace(/[^\n]/g, ""));
  for (const match of prose.matchAll(PROSE_LINE)) {
    const line = prose.slice(0, match.index).split("\n").length;
    problems.push(
      `${doc}:${line}: "${match[0]}" is a line number no test checks; link the symbol declared there instead ([\`name\`](file#L<n>))`,
    );
  }
  return problems;
}

describe("the checker", () => {
  it("reads inline links, images and reference definitions, not code", () => {
    const markdown = [
      "See [`Reconciler.poll`](../runtime/reconciler/reconciler.ts#L203) and ![a picture](img.png).",
      "`[not](a-link)` and",
      "```",
      "[nor](this)",
      "```",
      '[the API][api], [a [nested] text](api.md#the-routes "title")',
      "",
      "[api]: api.md",
    ].join("\n");
    expect(linksOf(markdown)).toEqual([
      { text: "`Reconciler.poll`", target: "../runtime/reconciler/reconciler.ts#L203", line: 1 },
      { text: "a picture", target: "img.png", line: 1 },
      { text: "a [nested] text", target: "api.md#the-routes", line: 6 },
      { text: "api", target: "api.md", line: 8 },
    ]);
  });

  it("makes GitHub's heading anchors", () => {
    expect(headingSlug("Backups: the runtime's, from outside the Pod")).toBe(
      "backups-the-runtimes-from-outside-the-pod",
    );
    expect(headingSlug("Left to do (issue 20)")).toBe("left-to-do-issue-20");
    expect(headingSlug("TLS: the front door")).toBe("tls-the-front-door");
    expect(headingSlug("`sbx sync` and [sync modes](cli.md)")).toBe("sbx-sync-and-sync-modes");
    expect(headingSlug("A — B")).toBe("a--b");
    expect([...anchorsOf("# Title\n## Step\n```\n## not one\n```\n## Step\n")]).toEqual([
      "title",
      "step",
      "step-1",
    ]);
  });

  it("finds a symbol's line: declarations, members, nested functions, routes", () => {
    const source = [
      "export class Reconciler {", //   1
      "  constructor() {}", //          2
      "  async poll(): Promise<void> {", // 3
      "    const inner = 1;", //        4
      "  }", //                         5
      "}", //                           6
      "export function registerRoutes(app: any) {", // 7
      "  function chooseRoute() {}", // 8
      '  app.post("/projects", async () => {});', // 9
      "}", //                           10
      "function poll() {}", //          11
      "export function twice(a: string): void;", // 12
      "export function twice(a: number): void;", // 13
      "export function twice(a: unknown): void {}", // 14
    ].join("\n");
    const declarations = declarationsOf("x.ts", source);
    expect(findSymbol("Reconciler.poll", declarations)).toEqual({ lines: [3] });
    expect(findSymbol("Reconciler.constructor", declarations)).toEqual({ lines: [2] });
    expect(findSymbol("inner", declarations)).toEqual({ lines: [4] });
    expect(findSymbol("Reconciler.inner", declarations)).toEqual({ lines: [4] });
    expect(findSymbol("registerRoutes.inner", declarations)).toHaveProperty("error");
    expect(findSymbol("chooseRoute", declarations)).toEqual({ lines: [8] });
    expect(findSymbol("POST /projects", declarations)).toEqual({ lines: [9] });
    expect(findSymbol("registerRoutes.POST /projects", declarations)).toEqual({ lines: [9] });
    expect(findSymbol("poll", declarations)).toEqual({ lines: [11] }); // the whole path wins
    expect(findSymbol("twice", declarations)).toEqual({ lines: [12, 13, 14] });
    expect(findSymbol("missing", declarations)).toEqual({ error: "`missing` is declared nowhere in it" });
    expect(findSymbol("GET /projects", declarations)).toHaveProperty("error");
    expect(findSymbol('app.post("/projects")', declarations)).toHaveProperty("error");
  });

  it("holds a path in a code span to the repository's files, and leaves other code alone", () => {
    const text = [
      "`runtime/main.ts` and `docs/` exist; `runtime/mian.ts` does not;",
      "`runtime/<id>.ts`, `npm run local`, `a/b` and `github.com/pulumi/pulumi/sdk/v3` are no paths of it",
    ].join("\n");
    expect(pathProblems("docs/a.md", text)).toEqual([
      "docs/a.md:1: `runtime/mian.ts` names no file or folder of the repository",
    ]);
  });

  it("names the doc, the link, the symbol and where the symbol is now", () => {
    const problems = linkProblems(
      "docs/tour.md",
      { text: "`Reconciler.poll`", target: "../runtime/reconciler/reconciler.ts#L1", line: 7 },
      (file) => readFileSync(path.join(root, file), "utf8"),
    );
    expect(problems).toEqual([
      expect.stringMatching(
        /^docs\/tour\.md:7: \[`Reconciler\.poll`\]\(\.\.\/runtime\/reconciler\/reconciler\.ts#L1\): `Reconciler\.poll` is declared at runtime\/reconciler\/reconciler\.ts#L\d+, not #L1$/,
      ),
    ]);
    const read = (file: string) => readFileSync(path.join(root, file), "utf8");
    expect(linkProblems("docs/a.md", { text: "x", target: "nowhere.md", line: 1 }, read)).toEqual([
      "docs/a.md:1: [x](nowhere.md): docs/nowhere.md does not exist",
    ]);
    expect(
      linkProblems("docs/a.md", { text: "x", target: "tour.md#no-such-heading", line: 1 }, read),
    ).toEqual([
      "docs/a.md:1: [x](tour.md#no-such-heading): docs/tour.md has no heading whose anchor is #no-such-heading",
    ]);
    expect(
      linkProblems("docs/a.md", { text: "runtime/main.ts", target: "../runtime/main.ts#L1", line: 1 }, read),
    ).toEqual([expect.stringContaining("a line link's text must name the symbol declared on that line")]);
  });
});

describe("links in the docs", () => {
  const docs = markdownFiles().sort();

  it("are read from every doc", () => {
    expect(docs).toEqual(expect.arrayContaining(["README.md", "docs/architecture.md", "docs/tour.md"]));
  });

  it("docs/README.md lists every doc in docs/", () => {
    const listed = new Set(
      linksOf(readFileSync(path.join(root, "docs/README.md"), "utf8")).map(
        (link) => link.target.split("#")[0],
      ),
    );
    const unlisted = docs.filter(
      (doc) =>
        path.posix.dirname(doc) === "docs" &&
        doc !== "docs/README.md" &&
        !listed.has(path.posix.basename(doc)),
    );
    expect(unlisted, "docs missing from the index in docs/README.md").toEqual([]);
  });

  for (const doc of docs) {
    it(`${doc}: each names a file that exists, a heading it has, or the line of the symbol it names`, () => {
      expect(docProblems(doc)).toEqual([]);
    });
  }
});
