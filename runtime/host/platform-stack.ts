import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { parse as parseYaml, stringify as toYaml } from "yaml";
import { REPO_ROOT, toolchain, type Toolchain } from "../../lib/toolchain.js";

export interface PlatformStackOptions {
  /** The stack's name (`dev`, `local`, a test's own). */
  readonly stack: string;
  /** Its config (the checkout's `Pulumi.<stack>.yaml`, or a test's own file). */
  readonly configFile: string;
  /** Directory of the stack's `file://` state backend. */
  readonly stateDir: string;
  /** Another state backend instead (the production one a CI preview reads: `gs://...`); no stateDir made. */
  readonly backendUrl?: string;
  /**
   * Where the engine runs the program from: a mirror of the checkout (symlinks) that holds the stack files
   * `pulumi stack init` writes (the passphrase salt) and PULUMI_HOME, so the checkout stays untouched.
   */
  readonly workDir: string;
  /** Encrypts the stack's secrets (runtime/secrets.ts statePassphrase). */
  readonly passphrase: string;
}

export interface PulumiResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Top-level entries of the checkout the program needs; stack files stay out of the mirror. */
const isStackFile = (name: string) => /^Pulumi\..+\.ya?ml$/.test(name);

/**
 * The platform stack (stacks/platform) run by the Pulumi CLI as a program directory: `up`, `preview`,
 * `destroy` of one stack with a file backend, the plugins of the toolchain and no global state touched.
 */
export class PlatformStack {
  constructor(
    readonly options: PlatformStackOptions,
    private readonly chain: Toolchain = toolchain(),
  ) {}

  private env(): NodeJS.ProcessEnv {
    return {
      ...process.env,
      ...this.chain.env,
      PULUMI_BACKEND_URL: this.options.backendUrl ?? `file://${this.options.stateDir}`,
      PULUMI_CONFIG_PASSPHRASE: this.options.passphrase,
      PULUMI_HOME: path.join(this.options.workDir, ".pulumi-home"),
    };
  }

  /** Runs the CLI in the work directory; resolves with its exit code (never rejects on a non-zero one). */
  pulumi(args: readonly string[], timeoutMs = 600_000): Promise<PulumiResult> {
    return new Promise((resolve, reject) => {
      execFile(
        this.chain.pulumiBin,
        [...args, "--non-interactive"],
        { cwd: this.options.workDir, env: this.env(), timeout: timeoutMs, maxBuffer: 64 << 20 },
        (error, stdout, stderr) => {
          if (error && typeof error.code !== "number") {
            reject(new Error(`pulumi ${args.join(" ")}: ${error.message}`));
            return;
          }
          resolve({ code: typeof error?.code === "number" ? error.code : 0, stdout, stderr });
        },
      );
    });
  }

  /** Like {@link pulumi}, but a non-zero exit is an error carrying the CLI's own output. */
  async pulumiOk(args: readonly string[], timeoutMs?: number): Promise<string> {
    const result = await this.pulumi(args, timeoutMs);
    if (result.code !== 0) {
      throw new Error(
        `pulumi ${args.join(" ")} failed (exit ${result.code}):\n${result.stdout.slice(-4000)}\n${result.stderr.slice(-4000)}`,
      );
    }
    return result.stdout;
  }

  /**
   * Mirrors the checkout into the work directory and selects the stack, creating it when it does not exist
   * yet unless `create` is false (then a missing stack is the CLI's error).
   */
  async prepare({ create = true }: { create?: boolean } = {}): Promise<void> {
    if (!this.options.backendUrl) await fs.mkdir(this.options.stateDir, { recursive: true, mode: 0o700 });
    await fs.mkdir(path.join(this.options.workDir, ".pulumi-home"), { recursive: true, mode: 0o700 });
    for (const entry of await fs.readdir(REPO_ROOT)) {
      if (isStackFile(entry) || entry === ".git") continue;
      const link = path.join(this.options.workDir, entry);
      const target = path.join(REPO_ROOT, entry);
      const current = await fs.readlink(link).catch(() => undefined);
      if (current === target) continue;
      await fs.rm(link, { force: true });
      await fs.symlink(target, link);
    }
    await this.writeStackFile();
    await this.pulumiOk(["stack", "select", ...(create ? ["--create"] : []), "--stack", this.options.stack]);
  }

  /**
   * The work directory's `Pulumi.<stack>.yaml`: the given config, plus the passphrase salt the engine
   * wrote there before. (With `--config-file` the engine writes the salt into the given file instead,
   * which may be the checkout's.)
   */
  private async writeStackFile(): Promise<void> {
    const file = path.join(this.options.workDir, `Pulumi.${this.options.stack}.yaml`);
    const source = parseYaml(await fs.readFile(this.options.configFile, "utf8")) as Record<
      string,
      unknown
    > | null;
    const previous = parseYaml(await fs.readFile(file, "utf8").catch(() => "")) as Record<
      string,
      unknown
    > | null;
    const merged = { ...(source ?? {}) };
    delete merged.encryptionsalt;
    if (typeof previous?.encryptionsalt === "string") merged.encryptionsalt = previous.encryptionsalt;
    await fs.writeFile(file, toYaml(merged), { mode: 0o600 });
  }

  private stackArgs(): string[] {
    return ["--stack", this.options.stack];
  }

  /** `pulumi up`; with `refresh` the host is read first, so drift is repaired too. */
  up(options: { refresh?: boolean; expectNoChanges?: boolean } = {}): Promise<PulumiResult> {
    return this.pulumi([
      "up",
      "--yes",
      "--skip-preview",
      ...(options.refresh ? ["--refresh"] : []),
      ...(options.expectNoChanges ? ["--expect-no-changes"] : []),
      ...this.stackArgs(),
    ]);
  }

  /** `pulumi preview` (`--refresh` reads the host first); `--json` for the steps and change summary. */
  preview(options: { refresh?: boolean } = {}): Promise<PulumiResult> {
    return this.pulumi(["preview", "--json", ...(options.refresh ? ["--refresh"] : []), ...this.stackArgs()]);
  }

  destroy(): Promise<PulumiResult> {
    return this.pulumi(["destroy", "--yes", "--skip-preview", ...this.stackArgs()]);
  }

  /** The stack's outputs (after an `up`). */
  async outputs(): Promise<Record<string, unknown>> {
    const stdout = await this.pulumiOk(["stack", "output", "--json", "--stack", this.options.stack]);
    return JSON.parse(stdout) as Record<string, unknown>;
  }
}
