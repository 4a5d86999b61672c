import { execFile, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { REPO_ROOT } from "../../lib/toolchain.js";

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
 */
export function tenantProgramCompileErrors(root: string = REPO_ROOT): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    execFile(
      path.join(root, "node_modules", ".bin", "tsc"),
      ["-p", path.join(root, "stacks", "tenant", "tsconfig.json"), "--pretty", "false"],
      { cwd: root, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (!error) return resolve(undefined);
        if (typeof error.code === "number") return resolve(`${stdout}${stderr}`.trim());
        reject(new Error(`cannot run the TypeScript compiler in ${root}: ${error.message}`));
      },
    );
  });
}

let current: ProgramVersion | undefined;
/** This process's tenant program version, computed once. */
export function currentProgramVersion(): ProgramVersion {
  return (current ??= tenantProgramVersion());
}
