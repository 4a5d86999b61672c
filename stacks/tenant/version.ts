import { execFile, execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { promises as fs, readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { cacheRoot, REPO_ROOT } from "../../lib/toolchain.js";

/**
 * What makes up the tenant program: the inline program, its components, the provider plugin that serves
 * their resources, the shared primitives they import, and the locked dependency versions. A change to any
 * of them is a new program version; a change elsewhere (the API, the web console) is not.
 */
export const TENANT_PROGRAM_SOURCES = [
  "stacks/tenant",
  "components/tenant",
  "components/resources",
  "provider",
  "lib",
  "package-lock.json",
] as const;

export interface ProgramVersion {
  /** `sha256:` and 16 hex digits of the sources' contents: the same in every checkout of the same code. */
  readonly version: string;
  /** The checkout's git commit, when it is a git checkout (shown beside the version, never compared). */
  readonly commit?: string;
}

function filesUnder(root: string, relative: string): string[] {
  const full = path.join(root, relative);
  let entries;
  try {
    entries = readdirSync(full, { withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOTDIR") return [relative];
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  return entries
    .filter((entry) => entry.name !== "node_modules" && !entry.name.startsWith("."))
    .flatMap((entry) =>
      entry.isDirectory()
        ? filesUnder(root, path.join(relative, entry.name))
        : entry.isFile()
          ? [path.join(relative, entry.name)]
          : [],
    );
}

/** The content hash of the tenant program in the checkout at `root` (this one by default). */
export function tenantProgramVersion(root: string = REPO_ROOT): ProgramVersion {
  const hash = createHash("sha256");
  const files = TENANT_PROGRAM_SOURCES.flatMap((source) => filesUnder(root, source)).sort();
  for (const file of files) {
    hash.update(file.split(path.sep).join("/")).update("\0");
    hash.update(readFileSync(path.join(root, file))).update("\0");
  }
  let commit: string | undefined;
  try {
    commit = execFileSync("git", ["rev-parse", "--verify", "--quiet", "HEAD"], {
      cwd: root,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    }).trim();
  } catch {
    commit = undefined; // not a git checkout (an unpacked release): the content hash is enough
  }
  return { version: `sha256:${hash.digest("hex").slice(0, 16)}`, ...(commit ? { commit } : {}) };
}

/**
 * Type-checks the tenant program of the checkout at `root` (stacks/tenant/tsconfig.json: the program and
 * everything it imports). Resolves with tsc's report when it fails to compile, undefined when it compiles.
 *
 * Incremental: the compiler's build information is kept in the cache, one file per checkout, so a check of
 * a checkout checked before parses its 666 files again but re-checks only what changed (a preview and the
 * rollout after it check the same program; a second check of an unchanged one reports its errors again).
 * Each run works on a copy of that file and renames it into place, so two checks at once never read one
 * half written; the one that ends last is kept. What no check used for a week is removed.
 */
export async function tenantProgramCompileErrors(root: string = REPO_ROOT): Promise<string | undefined> {
  const cache = path.join(cacheRoot(), "tsbuildinfo");
  await fs.mkdir(cache, { recursive: true });
  const key = createHash("sha256")
    .update(await fs.realpath(root))
    .digest("hex")
    .slice(0, 16);
  const kept = path.join(cache, `tenant-program-${key}.tsbuildinfo`);
  const own = path.join(cache, `.tenant-program-${key}.${process.pid}.${randomBytes(4).toString("hex")}`);
  await fs.copyFile(kept, own).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== "ENOENT") throw error;
  });
  try {
    const report = await new Promise<string | undefined>((resolve, reject) => {
      execFile(
        path.join(root, "node_modules", ".bin", "tsc"),
        [
          ...["-p", path.join(root, "stacks", "tenant", "tsconfig.json"), "--pretty", "false"],
          ...["--incremental", "--tsBuildInfoFile", own],
        ],
        { cwd: root, maxBuffer: 16 * 1024 * 1024 },
        (error, stdout, stderr) => {
          if (!error) return resolve(undefined);
          if (typeof error.code === "number") return resolve(`${stdout}${stderr}`.trim());
          reject(new Error(`cannot run the TypeScript compiler in ${root}: ${error.message}`));
        },
      );
    });
    await fs.rename(own, kept).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "ENOENT") throw error; // tsc wrote none (it could not read its configuration)
    });
    await forgetUnused(cache);
    return report;
  } finally {
    await fs.rm(own, { force: true });
  }
}

/** A checkout's build information unused for a week (a checkout since deleted, a test's copy) goes. */
async function forgetUnused(cache: string): Promise<void> {
  const before = Date.now() - 7 * 24 * 3600 * 1000;
  for (const name of await fs.readdir(cache)) {
    if (!name.includes("tenant-program-")) continue;
    const file = path.join(cache, name);
    const stat = await fs.stat(file).catch(() => undefined);
    if (stat && stat.mtimeMs < before) await fs.rm(file, { force: true });
  }
}

let current: ProgramVersion | undefined;
/** This process's tenant program version, computed once. */
export function currentProgramVersion(): ProgramVersion {
  return (current ??= tenantProgramVersion());
}
