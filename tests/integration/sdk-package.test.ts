// The SDK as a user outside this repository gets it (sdk/README.md, "Install"): `npm pack` in sdk/ gives
// compiled JavaScript and declarations; the tarball, installed offline into a project in a temporary
// directory, type-checks a TypeScript consumer, and the README's own example (read from its code block, so
// the two cannot drift) runs with plain `node` against a real runtime on loopback, the real reconciler and
// one real sandbox.
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { emailOf, PASSWORD, sandboxRuntime, type ApiHarness } from "../helpers/api.js";
import { tenantLeftovers, type TestPlatform } from "../helpers/host.js";

const SDK_DIR = path.join(REPO_ROOT, "sdk");
const TSC = path.join(REPO_ROOT, "node_modules", ".bin", "tsc");

interface Finished {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * `command args` in `cwd`, asynchronously (the runtime answering the example lives in this process);
 * answers its exit code and output, never throws on a non-zero exit. No NODE_OPTIONS reaches it: what runs
 * is plain node, without the loader this test runs under.
 */
function runIn(
  cwd: string,
  command: string,
  args: readonly string[],
  options: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<Finished> {
  const env: NodeJS.ProcessEnv = { ...process.env, ...options.env };
  delete env.NODE_OPTIONS;
  return new Promise((resolve, reject) => {
    execFile(
      command,
      args,
      { cwd, env, timeout: options.timeoutMs ?? 120_000, maxBuffer: 16 << 20 },
      (error, stdout, stderr) => {
        if (error && typeof error.code !== "number") reject(new Error(`${command}: ${error.message}`));
        else resolve({ code: error ? Number(error.code) : 0, stdout, stderr });
      },
    );
  });
}

/** Like runIn, but a non-zero exit throws with the command's output. */
async function mustRun(cwd: string, command: string, args: readonly string[]): Promise<string> {
  const done = await runIn(cwd, command, args);
  if (done.code !== 0)
    throw new Error(`${command} ${args.join(" ")} exited ${done.code}: ${done.stderr}${done.stdout}`);
  return done.stdout;
}

interface LockEntry {
  readonly version: string;
  readonly dependencies?: Record<string, string>;
  readonly [field: string]: unknown;
}

/**
 * The lockfile of a project depending only on the tarball `tarballName` (its package.json `sdk`): the SDK's
 * dependencies and theirs at the versions the repository's own package-lock.json holds. npm's cache keeps
 * the tarballs the repository's `npm ci` fetched but not registry metadata to resolve a version range with
 * (`npm install --offline` answers ENOTCACHED), so the project names exact versions and integrities and
 * `npm ci --offline` takes them from the cache.
 */
function consumerLock(tarballName: string, sdk: { version: string; dependencies: Record<string, string> }) {
  const repoLock = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockEntry>;
  };
  const packages: Record<string, unknown> = {};
  const pending = Object.keys(sdk.dependencies);
  while (pending.length > 0) {
    const name = pending.pop()!;
    const key = `node_modules/${name}`;
    if (key in packages) continue;
    const entry = repoLock.packages[key];
    if (!entry) throw new Error(`the repository's package-lock.json has no ${key}`);
    // The repository installs these for its own dev tools; in the consumer they are plain dependencies.
    packages[key] = Object.fromEntries(
      Object.entries(entry).filter(([field]) => field !== "dev" && field !== "devOptional"),
    );
    pending.push(...Object.keys(entry.dependencies ?? {}));
  }
  const dependencies = { "@agent-sandbox/sdk": `file:${tarballName}` };
  return {
    name: "sdk-consumer",
    version: "1.0.0",
    lockfileVersion: 3,
    requires: true,
    packages: {
      "": { name: "sdk-consumer", version: "1.0.0", dependencies },
      "node_modules/@agent-sandbox/sdk": {
        version: sdk.version,
        resolved: `file:${tarballName}`,
        dependencies: sdk.dependencies,
      },
      ...packages,
    },
  };
}

/** The one ```js block of sdk/README.md: the example a user outside the repository writes. */
function readmeExample(): string {
  const readme = fs.readFileSync(path.join(SDK_DIR, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
  if (blocks.length !== 1) throw new Error(`sdk/README.md has ${blocks.length} js code blocks, not one`);
  return blocks[0]!;
}

let platform: TestPlatform;
let h: ApiHarness<"alice">;
let base: string;
const work = fs.mkdtempSync(path.join(tmpdir(), "sdk-package-"));
const packed = path.join(work, "packed");
const project = path.join(work, "consumer");
let tarballFiles: string[];

beforeAll(async () => {
  // What a user does: `npm pack` in sdk/ (its prepack compiles src/ into dist/), the tarball taken elsewhere.
  fs.mkdirSync(packed);
  fs.mkdirSync(project);
  await mustRun(SDK_DIR, "npm", ["pack", "--pack-destination", packed]);
  const [name, ...others] = fs.readdirSync(packed);
  if (!name || others.length > 0) throw new Error(`npm pack wrote ${fs.readdirSync(packed).join(", ")}`);
  const tarball = path.join(packed, name);
  tarballFiles = (await mustRun(work, "tar", ["-tzf", tarball])).split("\n").filter(Boolean);

  const sdk = JSON.parse(fs.readFileSync(path.join(SDK_DIR, "package.json"), "utf8")) as {
    version: string;
    dependencies: Record<string, string>;
  };
  fs.copyFileSync(tarball, path.join(project, name));
  fs.writeFileSync(
    path.join(project, "package.json"),
    JSON.stringify({
      name: "sdk-consumer",
      version: "1.0.0",
      private: true,
      type: "module",
      dependencies: { "@agent-sandbox/sdk": `file:${name}` },
    }),
  );
  fs.writeFileSync(path.join(project, "package-lock.json"), JSON.stringify(consumerLock(name, sdk), null, 2));
  await mustRun(project, "npm", ["ci", "--offline", "--ignore-scripts", "--no-audit", "--no-fund"]);

  ({ platform, h, base } = await sandboxRuntime({
    subnetPool: "10.212.0.0/24",
    sshPortRange: [29210, 29215],
  }));
}, 700_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
  fs.rmSync(work, { recursive: true, force: true });
}, 600_000);

describe("the SDK package, installed outside the repository", () => {
  it("npm pack gives compiled JavaScript and declarations for every source file, and no TypeScript source", () => {
    const sources = fs.readdirSync(path.join(SDK_DIR, "src")).filter((file) => file.endsWith(".ts"));
    expect(sources).toContain("index.ts");
    for (const source of sources) {
      const stem = `package/dist/${source.replace(/\.ts$/, "")}`;
      expect(tarballFiles).toContain(`${stem}.js`);
      expect(tarballFiles).toContain(`${stem}.d.ts`);
    }
    expect(tarballFiles.filter((file) => file.endsWith(".ts") && !file.endsWith(".d.ts"))).toEqual([]);
    expect(tarballFiles.filter((file) => !file.startsWith("package/dist/")).sort()).toEqual([
      "package/README.md",
      "package/package.json",
    ]);
  });

  it("the package pins ws and its types as the repository does; the consumer's install holds them, outside the repository", () => {
    const manifest = (dir: string) =>
      JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as {
        version: string;
        dependencies: Record<string, string>;
        devDependencies: Record<string, string>;
      };
    const root = manifest(REPO_ROOT);
    const sdk = manifest(SDK_DIR);
    expect(sdk.dependencies).toEqual({
      ws: root.dependencies.ws,
      "@types/ws": root.devDependencies["@types/ws"],
    });
    expect(path.relative(REPO_ROOT, project).startsWith("..")).toBe(true);
    const installed = path.join(project, "node_modules");
    expect(manifest(path.join(installed, "@agent-sandbox", "sdk")).version).toBe(sdk.version);
    expect(manifest(path.join(installed, "ws")).version).toBe(sdk.dependencies.ws);
    expect(manifest(path.join(installed, "@types", "ws")).version).toBe(sdk.dependencies["@types/ws"]);
  });

  it("a TypeScript consumer type-checks against the package's declarations; a wrong argument is refused", async () => {
    // skipLibCheck off (TypeScript's default): the package's own declarations must compile where they are
    // installed, e.g. `import WebSocket from "ws"` finds @types/ws among its dependencies.
    fs.writeFileSync(
      path.join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ["node"],
        },
        include: ["*.ts"],
      }),
    );
    fs.writeFileSync(
      path.join(project, "consumer.ts"),
      [
        'import { Client, Sandbox, type ExecResult, type FileWritten } from "@agent-sandbox/sdk";',
        "export async function job(api: string, email: string, password: string): Promise<string> {",
        "  const client = await Client.login(api, email, password);",
        '  const sandbox = await Sandbox.create(client, { name: "typed" });',
        '  const result: ExecResult = await sandbox.exec(["echo", "hi"], { timeout_s: 10 });',
        '  const written: FileWritten = await sandbox.files.write("a.txt", "hello\\n", "644");',
        "  const exitCode: number = result.exit_code;",
        "  return `${exitCode} ${result.stdout} ${written.size}`;",
        "}",
        "",
      ].join("\n"),
    );
    fs.writeFileSync(
      path.join(project, "wrong.ts"),
      [
        'import type { Sandbox } from "@agent-sandbox/sdk";',
        "export async function wrong(sandbox: Sandbox): Promise<void> {",
        '  await sandbox.exec(["true"], { timeout_s: "soon" });',
        "}",
        "",
      ].join("\n"),
    );
    const checked = await runIn(project, TSC, ["-p", "."]);
    const errors = checked.stdout.split("\n").filter((line) => /error TS\d+/.test(line));
    expect(errors, checked.stdout + checked.stderr).toHaveLength(1);
    expect(errors[0]).toMatch(
      /^wrong\.ts\(3,\d+\): error TS2322: Type 'string' is not assignable to type 'number'/,
    );
    expect(checked.code).not.toBe(0);
  });

  it("the README's example runs with plain node: the exec's output, the file written, the sandbox deleted and nothing left behind", async () => {
    fs.writeFileSync(path.join(project, "example.mjs"), readmeExample());
    const ran = await runIn(project, process.execPath, ["example.mjs"], {
      env: { SBX_API: base, SBX_EMAIL: emailOf("alice"), SBX_PASSWORD: PASSWORD },
      timeoutMs: 600_000,
    });
    expect(ran.code, ran.stderr).toBe(0);
    const id = /^sandbox ([0-9a-f-]{36}) is running$/m.exec(ran.stdout)?.[1];
    expect(id, ran.stdout).toBeDefined();
    expect(ran.stdout).toMatch(/^exit 0: git version \d+\.\d+/m);
    expect(ran.stdout).toContain("step 1\nstep 2\n");
    expect(ran.stdout).toContain("notes.txt: hello\n");
    // The example asked for the deletion; it completes on the reconciler.
    await h.waitForStatus("alice", id!, "gone", 300_000);
    expect(await tenantLeftovers(platform.config.host, id!)).toEqual([]);
  });
});
