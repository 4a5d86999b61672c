import { spawn, type ChildProcess } from "node:child_process";
import * as path from "node:path";
import { createInterface } from "node:readline";
import { REPO_ROOT } from "../../lib/toolchain.js";

/** Loaded before the plugin: exit once stdin (the parent's pipe) ends. The plugin itself never reads stdin. */
const EXIT_WITH_PARENT = `data:text/javascript,${encodeURIComponent(
  'process.stdin.on("end", () => process.exit(0)).on("error", () => process.exit(0)).resume();',
)}`;

/**
 * One long-lived `sandbox` provider plugin that the engines of many tenant operations attach to, instead
 * of each `pulumi up` starting its own Node.js plugin (0.3-0.5 s of every operation here, and a second
 * Node.js process per operation on 2 cores when many run at once; pulumi/pulumi#22767). The
 * engine attaches to a running provider named in `PULUMI_DEBUG_PROVIDERS` (`sandbox:<port>`) and never
 * stops it.
 *
 * Why sharing is safe for this provider: it has no provider configuration (every resource's inputs carry
 * what it needs), keeps no state between calls, and does not log through the engine; so concurrent
 * operations on different stacks share nothing but the process. What one engine cancels reaches only
 * the calls that engine made. When the process dies, the operations it was serving fail (the engine
 * loses its connection) and the next operation gets a new process.
 */
export class SharedProvider {
  private child: ChildProcess | undefined;
  private starting: Promise<string> | undefined;
  private readonly exitListeners = new Set<(code: number | null) => void>();

  constructor(
    private readonly env: Record<string, string>,
    /** The plugin's entry point: this checkout's bundle (what `bin/pulumi-resource-sandbox` runs). */
    private readonly bundle = path.join(REPO_ROOT, "dist", "plugins", "sandbox.mjs"),
  ) {}

  /** `sandbox:<port>` for `PULUMI_DEBUG_PROVIDERS`; starts the process when none runs. */
  async debugProviders(): Promise<string> {
    return `sandbox:${await this.port()}`;
  }

  /** The running process's pid (undefined when none runs): what a fault test kills. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Calls `listener` once the current process (if any) exits. */
  onExit(listener: (code: number | null) => void): void {
    this.exitListeners.add(listener);
  }

  private port(): Promise<string> {
    this.starting ??= this.start().catch((error: unknown) => {
      this.starting = undefined;
      throw error;
    });
    return this.starting;
  }

  private start(): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      // Its stdin is a pipe from this process: when the runtime dies (even by SIGKILL) the pipe closes and
      // the provider exits with it, instead of living on, re-parented to init.
      const child = spawn(
        process.execPath,
        ["--enable-source-maps", "--import", EXIT_WITH_PARENT, this.bundle],
        {
          env: { ...process.env, ...this.env },
          stdio: ["pipe", "pipe", "pipe"],
        },
      );
      this.child = child;
      let stderr = "";
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
        stderr = (stderr + chunk).slice(-4_000);
      });
      const lines = createInterface({ input: child.stdout! });
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new Error(`the shared sandbox provider did not say its port within 30 s: ${stderr.trim()}`));
      }, 30_000);
      lines.once("line", (line) => {
        clearTimeout(timer);
        const port = line.trim();
        if (/^\d+$/.test(port)) resolve(port);
        else reject(new Error(`the shared sandbox provider printed ${JSON.stringify(line)}, not a port`));
      });
      child.once("error", (error) => {
        clearTimeout(timer);
        reject(new Error(`the shared sandbox provider did not start: ${error.message}`));
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(
          new Error(`the shared sandbox provider exited (${code}) before it said its port: ${stderr.trim()}`),
        );
        providerExits += 1;
        if (this.child === child) {
          this.child = undefined;
          this.starting = undefined; // the next operation starts a new one
        }
        for (const listener of this.exitListeners) listener(code);
        this.exitListeners.clear();
      });
      child.unref();
      (child.stdin as unknown as { unref?: () => void }).unref?.();
      (child.stdout as unknown as { unref?: () => void }).unref?.();
      (child.stderr as unknown as { unref?: () => void }).unref?.();
    });
  }

  /** Stops the process (operations still attached to it fail). */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGTERM");
    await exited;
  }
}

const shared = new Map<string, SharedProvider>();
let providerExits = 0;

/**
 * How many shared provider processes of this process have exited so far: an operation that failed while
 * this grew may have failed only because its provider died (the reconciler runs it again).
 */
export function sharedProviderExits(): number {
  return providerExits;
}

/**
 * The process's shared provider for an environment (the engine would start its plugin with the CLI's
 * environment: its PATH and DOCKER_HOST decide what the provider talks to, so each distinct one gets
 * its own process).
 */
export function sharedProviderFor(env: Record<string, string>): SharedProvider {
  const key = JSON.stringify(Object.entries(env).sort(([a], [b]) => a.localeCompare(b)));
  let provider = shared.get(key);
  if (!provider) {
    provider = new SharedProvider(env);
    shared.set(key, provider);
  }
  return provider;
}
