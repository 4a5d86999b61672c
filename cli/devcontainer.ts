// devcontainer.json (US5, FR-016/FR-017): what `sbx start` honours and what it says it does not.
// https://containers.dev/implementors/json_reference/ — JSON with comments and trailing commas.
import { existsSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { CliError, EXIT } from "./errors.js";

export interface DevContainer {
  readonly file: string;
  readonly image?: string;
  /** Absolute paths. */
  readonly build?: { readonly dockerfile: string; readonly context: string };
  readonly forwardPorts: readonly number[];
  readonly postCreateCommand?: string;
  readonly containerEnv: Readonly<Record<string, string>>;
  readonly remoteUser?: string;
  /** Keys present that sbx does not act on, with why. */
  readonly unsupported: readonly string[];
}

const HONOURED = new Set([
  "name",
  "image",
  "build",
  "forwardPorts",
  "postCreateCommand",
  "containerEnv",
  "remoteUser",
]);
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Comments and trailing commas out, strings untouched. */
export function stripJsonc(text: string): string {
  return dropTrailingCommas(dropComments(text));
}

/** The index just past the string literal that starts at `i` (a `"`). */
function stringEnd(text: string, i: number): number {
  let j = i + 1;
  while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
  return j + 1;
}

/** Rewrites `text` outside its string literals: `step` says what to write for the character at `i`, and where to go on. */
function outsideStrings(text: string, step: (i: number) => [string, number]): string {
  let out = "";
  for (let i = 0; i < text.length;) {
    let written: string;
    if (text[i] === '"') [written, i] = [text.slice(i, stringEnd(text, i)), stringEnd(text, i)];
    else [written, i] = step(i);
    out += written;
  }
  return out;
}

const dropComments = (text: string) =>
  outsideStrings(text, (i) => {
    if (text.startsWith("//", i)) {
      const newline = text.indexOf("\n", i);
      return ["\n", newline < 0 ? text.length : newline + 1];
    }
    if (text.startsWith("/*", i)) {
      const end = text.indexOf("*/", i + 2);
      return [" ", end < 0 ? text.length : end + 2];
    }
    return [text[i]!, i + 1];
  });

const dropTrailingCommas = (text: string) =>
  outsideStrings(text, (i) => [
    text[i] === "," && /^\s*[}\]]/.test(text.slice(i + 1)) ? "" : text[i]!,
    i + 1,
  ]);

export function findDevContainer(root: string): string | undefined {
  return [path.join(root, ".devcontainer", "devcontainer.json"), path.join(root, ".devcontainer.json")].find(
    (f) => existsSync(f),
  );
}

const bad = (file: string, why: string) =>
  new CliError(EXIT.badInput, `${file}: ${why}; nothing was created`);

export function readDevContainer(root: string): DevContainer | undefined {
  const file = findDevContainer(root);
  if (!file) return undefined;
  const shown = path.relative(root, file);
  let doc: unknown;
  try {
    doc = JSON.parse(stripJsonc(readFileSync(file, "utf8")));
  } catch (error) {
    throw bad(shown, `does not parse: ${(error as Error).message}`);
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) throw bad(shown, "is not a JSON object");
  const d = doc as Record<string, unknown>;
  const unsupported = Object.keys(d)
    .filter((key) => !HONOURED.has(key))
    .map((key) => `${key} (not supported by sbx)`);
  const str = (key: string): string | undefined => {
    if (d[key] === undefined) return undefined;
    if (typeof d[key] !== "string" || !d[key]) throw bad(shown, `${key} must be a non-empty string`);
    return d[key];
  };
  const image = str("image");
  let build: DevContainer["build"];
  if (d.build !== undefined) {
    const b = d.build as Record<string, unknown>;
    if (typeof b !== "object" || b === null || typeof b.dockerfile !== "string")
      throw bad(shown, "build must be an object with a dockerfile");
    const base = path.dirname(file);
    build = {
      dockerfile: path.resolve(base, b.dockerfile),
      context: path.resolve(base, typeof b.context === "string" ? b.context : "."),
    };
    if (!existsSync(build.dockerfile)) throw bad(shown, `build.dockerfile ${b.dockerfile} does not exist`);
    for (const key of Object.keys(b).filter((k) => k !== "dockerfile" && k !== "context"))
      unsupported.push(`build.${key} (not supported by sbx)`);
  }
  if (image && build) throw bad(shown, "has both image and build; use one");
  const forwardPorts: number[] = [];
  if (d.forwardPorts !== undefined) {
    if (!Array.isArray(d.forwardPorts)) throw bad(shown, "forwardPorts must be an array");
    for (const port of d.forwardPorts) {
      if (typeof port === "number" && Number.isInteger(port) && port >= 1 && port <= 65535)
        forwardPorts.push(port);
      else
        unsupported.push(
          `forwardPorts entry ${JSON.stringify(port)} (only port numbers of the sandbox itself)`,
        );
    }
  }
  let postCreateCommand: string | undefined;
  const post = d.postCreateCommand;
  if (typeof post === "string") postCreateCommand = post;
  else if (Array.isArray(post) && post.every((w) => typeof w === "string"))
    postCreateCommand = post.map((w) => `'${String(w).replace(/'/g, `'\\''`)}'`).join(" ");
  else if (post !== undefined)
    unsupported.push("postCreateCommand as an object (parallel commands are not supported)");
  const containerEnv: Record<string, string> = {};
  if (d.containerEnv !== undefined) {
    if (typeof d.containerEnv !== "object" || d.containerEnv === null)
      throw bad(shown, "containerEnv must be an object");
    for (const [key, value] of Object.entries(d.containerEnv)) {
      if (!ENV_NAME.test(key) || typeof value !== "string")
        throw bad(shown, `containerEnv ${JSON.stringify(key)} must be a variable name with a string value`);
      if (value.includes("${"))
        unsupported.push(`containerEnv.${key}'s \${...} substitution (used as written)`);
      containerEnv[key] = value;
    }
  }
  const remoteUser = str("remoteUser");
  if (remoteUser && remoteUser !== "agent")
    unsupported.push(`remoteUser ${JSON.stringify(remoteUser)} (the sandbox's shells run as agent)`);
  return {
    file: shown,
    ...(image ? { image } : {}),
    ...(build ? { build } : {}),
    forwardPorts,
    ...(postCreateCommand ? { postCreateCommand } : {}),
    containerEnv,
    ...(remoteUser ? { remoteUser } : {}),
    unsupported,
  };
}

/** containerEnv as `KEY='value'` lines for a shell to source. */
export function renderEnvFile(env: Readonly<Record<string, string>>): string {
  return Object.entries(env)
    .map(([key, value]) => `${key}='${value.replace(/'/g, `'\\''`)}'\n`)
    .join("");
}
