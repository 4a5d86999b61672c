// devcontainer.json (US5, FR-016/FR-017): what `sbx start` honours and what it says it does not.
// https://containers.dev/implementors/json_reference/ — JSON with comments and trailing commas.
import { existsSync, readFileSync, statSync } from "node:fs";
import * as path from "node:path";
import { CliError, EXIT } from "./errors.js";

export interface DevContainer {
  readonly file: string;
  readonly image?: string;
  /** Absolute paths. */
  readonly build?: { readonly dockerfile: string; readonly context: string };
  readonly forwardPorts: readonly number[];
  readonly postCreateCommand?: string;
  /** Run at each `sbx start`, as the agent, in the repository. */
  readonly postStartCommand?: string;
  readonly containerEnv: Readonly<Record<string, string>>;
  /** The agent's shells' environment: `${localEnv:...}` already substituted, `${containerEnv:...}` left to the shell. */
  readonly remoteEnv: Readonly<Record<string, string>>;
  /** Local features, in the order they are installed. */
  readonly features: readonly DevContainerFeature[];
  readonly remoteUser?: string;
  /** Keys present that sbx does not act on, with why. */
  readonly unsupported: readonly string[];
}

/** A local Dev Container feature (https://containers.dev/implementors/features/): a folder beside devcontainer.json. */
export interface DevContainerFeature {
  /** As devcontainer.json names it (`./features/hello`). */
  readonly ref: string;
  readonly id: string;
  /** Absolute path of the folder holding devcontainer-feature.json and install.sh. */
  readonly dir: string;
  /** Every option, given or defaulted, under its environment name (`GREETING`). */
  readonly options: Readonly<Record<string, string>>;
  /** The feature's own containerEnv, set in the image (`${PATH}` expanded by the build). */
  readonly containerEnv: Readonly<Record<string, string>>;
  readonly installsAfter: readonly string[];
}

const HONOURED = new Set([
  "name",
  "image",
  "build",
  "features",
  "forwardPorts",
  "postCreateCommand",
  "postStartCommand",
  "containerEnv",
  "remoteEnv",
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

/** A lifecycle command's string or array form as one shell command line; the object form is unsupported. */
function lifecycleCommand(value: unknown, key: string, unsupported: string[]): string | undefined {
  if (typeof value === "string") return value || undefined;
  if (Array.isArray(value) && value.every((w) => typeof w === "string"))
    return value.map((w) => `'${String(w).replace(/'/g, `'\\''`)}'`).join(" ") || undefined;
  if (value !== undefined) unsupported.push(`${key} as an object (parallel commands are not supported)`);
  return undefined;
}

/** The environment name of a feature option, as the spec makes it (`install-tools` → `INSTALL_TOOLS`). */
export function featureOptionEnvName(option: string): string {
  return option
    .replace(/[^\w_]/g, "_")
    .replace(/^[\d_]+/g, "_")
    .toUpperCase();
}

/**
 * `features`, local ones only: a remote reference (an OCI registry's, a tarball's URL) cannot be fetched here,
 * and is refused naming it. Each folder must hold devcontainer-feature.json and install.sh.
 */
export function readFeatures(
  value: unknown,
  devcontainerDir: string,
  root: string,
  fail: (why: string) => Error,
): DevContainerFeature[] {
  if (value === undefined) return [];
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw fail("features must be an object of feature references");
  const features = Object.entries(value as Record<string, unknown>).map(([ref, given]) => {
    const named = (why: string) => fail(`feature ${JSON.stringify(ref)} ${why}`);
    if (!ref.startsWith("./") && !ref.startsWith("../"))
      throw named(
        "is not a local feature: only local features (a ./path beside devcontainer.json) are supported here, the sandbox's platform cannot fetch features from a registry",
      );
    const dir = path.resolve(devcontainerDir, ref);
    if (path.relative(root, dir).startsWith("..")) throw named("is outside the repository");
    if (!existsSync(dir) || !statSync(dir).isDirectory()) throw named("does not exist (no such folder)");
    const metaFile = path.join(dir, "devcontainer-feature.json");
    if (!existsSync(metaFile)) throw named("has no devcontainer-feature.json");
    if (!existsSync(path.join(dir, "install.sh"))) throw named("has no install.sh");
    let meta: Record<string, unknown>;
    try {
      meta = JSON.parse(stripJsonc(readFileSync(metaFile, "utf8"))) as Record<string, unknown>;
    } catch (error) {
      throw named(`devcontainer-feature.json does not parse: ${(error as Error).message}`);
    }
    if (typeof meta !== "object" || meta === null || typeof meta.id !== "string" || !meta.id)
      throw named("devcontainer-feature.json has no id");
    const declared = (
      typeof meta.options === "object" && meta.options !== null ? meta.options : {}
    ) as Record<string, { default?: unknown }>;
    // A bare string is the `version` option's value (the spec's shorthand).
    const chosen: Record<string, unknown> =
      typeof given === "string"
        ? { version: given }
        : typeof given === "object" && given !== null && !Array.isArray(given)
          ? (given as Record<string, unknown>)
          : {};
    const options: Record<string, string> = {};
    for (const [option, spec] of Object.entries(declared))
      if (spec?.default !== undefined) options[featureOptionEnvName(option)] = String(spec.default);
    for (const [option, chosenValue] of Object.entries(chosen)) {
      if (!(option in declared)) throw named(`has no option ${JSON.stringify(option)}`);
      if (
        typeof chosenValue !== "string" &&
        typeof chosenValue !== "boolean" &&
        typeof chosenValue !== "number"
      )
        throw named(`option ${JSON.stringify(option)} must be a string or a boolean`);
      options[featureOptionEnvName(option)] = String(chosenValue);
    }
    const containerEnv: Record<string, string> = {};
    for (const [key, env] of Object.entries((meta.containerEnv ?? {}) as Record<string, unknown>)) {
      if (!ENV_NAME.test(key) || typeof env !== "string" || env.includes("\n"))
        throw named(
          `containerEnv ${JSON.stringify(key)} must be a variable name with a one-line string value`,
        );
      containerEnv[key] = env;
    }
    const installsAfter = Array.isArray(meta.installsAfter)
      ? meta.installsAfter.filter((a): a is string => typeof a === "string")
      : [];
    return { ref, id: meta.id, dir, options, containerEnv, installsAfter };
  });
  return orderFeatures(features);
}

/** The id a reference names: `ghcr.io/x/features/node:1` and `./features/node` both name `node`. */
const idOf = (ref: string) => path.basename(ref.replace(/[:@][^/]*$/, ""));

/** Declared order, except that a feature goes after those its installsAfter names (when they are here). */
export function orderFeatures<F extends Pick<DevContainerFeature, "id" | "installsAfter">>(
  features: readonly F[],
): F[] {
  const ordered: F[] = [];
  const pending = [...features];
  while (pending.length > 0) {
    const ready = pending.findIndex((f) =>
      f.installsAfter.every((after) => !pending.some((other) => other !== f && other.id === idOf(after))),
    );
    // A cycle: the rest in declared order.
    ordered.push(...pending.splice(ready < 0 ? 0 : ready, ready < 0 ? pending.length : 1));
  }
  return ordered;
}

/** `${localEnv:VAR}` and `${localEnv:VAR:default}` with this machine's environment. */
export function substituteLocalEnv(value: string, env: NodeJS.ProcessEnv): string {
  return value.replace(
    /\$\{localEnv:([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}/g,
    (_, name: string, fallback?: string) => env[name] ?? fallback ?? "",
  );
}

export function readDevContainer(
  root: string,
  env: NodeJS.ProcessEnv = process.env,
): DevContainer | undefined {
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
  const postCreateCommand = lifecycleCommand(d.postCreateCommand, "postCreateCommand", unsupported);
  const postStartCommand = lifecycleCommand(d.postStartCommand, "postStartCommand", unsupported);
  const features = readFeatures(d.features, path.dirname(file), root, (why) => bad(shown, why));
  const remoteEnv: Record<string, string> = {};
  if (d.remoteEnv !== undefined) {
    if (typeof d.remoteEnv !== "object" || d.remoteEnv === null)
      throw bad(shown, "remoteEnv must be an object");
    for (const [key, value] of Object.entries(d.remoteEnv)) {
      if (!ENV_NAME.test(key) || typeof value !== "string")
        throw bad(shown, `remoteEnv ${JSON.stringify(key)} must be a variable name with a string value`);
      remoteEnv[key] = substituteLocalEnv(value, env);
    }
  }
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
    ...(postStartCommand ? { postStartCommand } : {}),
    containerEnv,
    remoteEnv,
    features,
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

/**
 * remoteEnv as `KEY="value"` lines for a shell to source: `${containerEnv:VAR}` (`:default`) becomes the shell's
 * `${VAR-}` (`${VAR:-default}`: empty when unset, also under `set -u`), everything else is taken literally.
 */
export function renderRemoteEnvFile(env: Readonly<Record<string, string>>): string {
  const literal = (text: string) => text.replace(/[\\"$`]/g, (c) => `\\${c}`);
  const reference = /\$\{containerEnv:([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}/g;
  return Object.entries(env)
    .map(([key, value]) => {
      let out = "";
      let at = 0;
      for (const match of value.matchAll(reference)) {
        out += literal(value.slice(at, match.index));
        out += match[2] === undefined ? `\${${match[1]}-}` : `\${${match[1]}:-${literal(match[2])}}`;
        at = match.index + match[0].length;
      }
      return `${key}="${out}${literal(value.slice(at))}"\n`;
    })
    .join("");
}

/**
 * The Dockerfile that installs local features FROM `base`, in the build context {@link featureContextDir} names:
 * each feature's folder copied in, its options in devcontainer-features.env, install.sh run as root (as the
 * spec says), then the feature's containerEnv. A failing install.sh prints `sbx-feature-failed <index>`.
 */
export function renderFeaturesDockerfile(
  base: string,
  baseUser: string,
  features: readonly DevContainerFeature[],
): string {
  const lines = [`FROM ${base}`, "USER root"];
  features.forEach((feature, i) => {
    const dir = `/tmp/sbx-features/${featureContextDir(feature, i)}`;
    lines.push(
      `COPY ${featureContextDir(feature, i)} ${dir}`,
      `RUN cd ${dir} && chmod +x install.sh && set -a && . ./devcontainer-features.env && set +a && ` +
        `{ ./install.sh || { echo "sbx-feature-failed ${i}: install.sh exited $?" >&2; exit 1; }; } && rm -rf ${dir}`,
      ...Object.entries(feature.containerEnv).map(
        ([key, value]) => `ENV ${key}="${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`,
      ),
    );
  });
  // The image's environment reaches what the engine runs, not SSH's sessions: the agent's login shells get the
  // features' containerEnv (as the build resolved it) from profile.d, before the container.env sbx start writes.
  const keys = [...new Set(features.flatMap((f) => Object.keys(f.containerEnv)))];
  if (keys.length > 0)
    lines.push(
      `RUN env -i ${keys.map((k) => `${k}="$${k}"`).join(" ")} sh -c 'export -p' | grep -E '^export (${keys.join("|")})=' >/etc/profile.d/00-devcontainer-features.sh`,
    );
  lines.push(`USER ${baseUser || "root"}`, "");
  return lines.join("\n");
}

/** The folder of the build context a feature is copied into: its position and a plain form of its id. */
export const featureContextDir = (feature: Pick<DevContainerFeature, "id">, index: number) =>
  `${String(index).padStart(2, "0")}-${feature.id.replace(/[^A-Za-z0-9_.-]/g, "-")}`;

/** The options (and the users the spec names) as the env file each install.sh is run with. */
export function renderFeatureEnvFile(feature: DevContainerFeature): string {
  return renderEnvFile({
    ...feature.options,
    _REMOTE_USER: "agent",
    _REMOTE_USER_HOME: "/home/agent",
    _CONTAINER_USER: "agent",
    _CONTAINER_USER_HOME: "/home/agent",
  });
}
