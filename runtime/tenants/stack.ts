import { existsSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import {
  LocalWorkspace,
  PulumiCommand,
  type EngineEvent,
  type OpMap,
  type PulumiFn,
  Stack,
} from "@pulumi/pulumi/automation/index.js";
import type { TenantSecret } from "../../components/tenant/secrets.js";
import { tenantProgram } from "../../stacks/tenant/program.js";
import type { ProgramVersion } from "../../stacks/tenant/version.js";
import { tenantNames } from "../../components/tenant/names.js";
import type { TenantSpecInput } from "../../components/tenant/spec.js";
import {
  fileBackendDir,
  fileStateLayout,
  purgeRemovedGcsStackState,
  purgeRemovedStackState,
} from "../stack-state.js";
import { GcsClient, hostTokenSource } from "../gcp/storage.js";
import { writeFileAtomic } from "../../lib/files.js";
import { toolchain } from "../../lib/toolchain.js";
import { sharedProviderFor } from "./shared-provider.js";
import { STACK_KEY_PROVIDER, stackKeyService } from "./stack-keys.js";
import { initTenantStackFiles } from "./stack-init.js";

/** The Pulumi project every tenant stack belongs to. */
export const TENANT_PROJECT = "agent-sandbox-tenant";

export interface TenantStackOptions {
  /** `file:///...` here, `gs://<bucket>/state` on GCP. */
  readonly backendUrl: string;
  /** One work directory per tenant lives under here (a shared one corrupts workspace.json, pulumi#8186). */
  readonly workRoot: string;
  /**
   * Secrets provider of the stacks made: a `gcpkms://` URL, or `passphrase` (Pulumi's, with `passphrase`).
   * Absent, with a `passphrase`: this process's key service (`STACK_KEY_PROVIDER`, runtime/tenants/stack-keys.ts),
   * its key derived from the passphrase. A stack keeps the provider it was made with.
   */
  readonly secretsProvider?: string;
  /** The platform's state passphrase: the key service's key, and what opens stacks made with `passphrase`. */
  readonly passphrase?: string;
  readonly onEvent?: (event: EngineEvent) => void;
  /** Aborting it cancels the engine's update (a cancelled operation). */
  readonly signal?: AbortSignal;
  /** The engine the provider plugin talks to (`unix://...`); default: DOCKER_HOST or /var/run/docker.sock. */
  readonly dockerHost?: string;
  /** The tenant program version the stacks record (default: this checkout's). A rollout applies another's. */
  readonly programVersion?: ProgramVersion;
  /** The project's secrets with their values (the reconciler opens them per operation): its files. */
  readonly secrets?: readonly TenantSecret[];
  /**
   * The engine runs' PULUMI_HOME. Absent: `tenantEngineHome(workRoot)`, where the CLI keeps no automatic logs;
   * the benchmark's baseline names the operator's own.
   */
  readonly engineHome?: string;
  /** Attach to the process's long-lived `sandbox` provider instead of starting one (`tenants.sharedProvider`). */
  readonly sharedProvider?: boolean;
  /**
   * The cluster's kubeconfig for a kubernetes tenant's provider (`tenants.kubernetes.kubeconfigFile`; on GKE
   * with a token the runtime mints for the operation).
   */
  readonly kubeconfig?: () => string | Promise<string>;
  /**
   * The program of the spec's stack: its backend's (the reconciler's `SandboxBackend.program`). Absent: the
   * platform's tenant program, as for a container or a microVM.
   */
  readonly program?: (spec: TenantSpecInput, options: TenantStackOptions) => Promise<PulumiFn>;
}

/** The platform's tenant program of `spec`; `kubeconfig` is what a kubernetes tenant's provider needs. */
export function platformTenantProgram(
  spec: TenantSpecInput,
  options: TenantStackOptions,
  kubeconfig?: string,
): PulumiFn {
  return tenantProgram(spec, options.programVersion, options.secrets, kubeconfig);
}

async function programOf(spec: TenantSpecInput, options: TenantStackOptions): Promise<PulumiFn> {
  return options.program ? options.program(spec, options) : platformTenantProgram(spec, options);
}

export async function localWorkspace(
  projectId: string,
  program: PulumiFn,
  options: TenantStackOptions,
): Promise<LocalWorkspace> {
  return tenantWorkspace(path.join(options.workRoot, tenantNames(projectId).stack), program, options);
}

const commands = new Map<string, Promise<PulumiCommand>>();
/**
 * The CLI at `root`, its version checked once per process (`PulumiCommand.get` runs `pulumi version`:
 * 0.18 s that every operation and drift check paid again; tests/bench/drift-check.ts).
 */
function pulumiCommand(root: string): Promise<PulumiCommand> {
  let command = commands.get(root);
  if (!command) {
    command = PulumiCommand.get({ root, skipVersionCheck: false });
    commands.set(root, command);
    command.catch(() => commands.delete(root)); // a CLI installed later is found on the next call
  }
  return command;
}

const engineHomes = new Map<string, Promise<string>>();

/**
 * The PULUMI_HOME of the tenants' engine runs: `<workRoot>/.pulumi-home`, made once per process. The CLI
 * (3.259 here; pulumi/pulumi#23731) keeps a log of every run of its own in `$PULUMI_HOME/logs`, at debug level
 * and sealed by the stack's secrets manager, and first lists every log there to rotate them (up to 500 MB
 * and 7 days of files): with 17,600 files from tenant operations, a `pulumi stack ls` took 188 ms against
 * 90 ms with a fresh home, and an `up` spent about a sixth of its CPU on its log (docs/tenant-stacks.md). The
 * runtime keeps each operation's engine events itself, so these runs keep none: here `logs` is a file, which
 * the CLI takes as "automatic logging unavailable" and goes on. `plugins` is the operator's own PULUMI_HOME's
 * (a link), so a plugin installed there (`pulumi plugin install`, the GCP host) is found as before.
 */
export function tenantEngineHome(workRoot: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const home = path.join(workRoot, ".pulumi-home");
  let made = engineHomes.get(home);
  if (!made) {
    made = makeEngineHome(home, env.PULUMI_HOME ?? path.join(os.homedir(), ".pulumi"));
    engineHomes.set(home, made);
    made.catch(() => engineHomes.delete(home));
  }
  return made;
}

async function makeEngineHome(home: string, operatorHome: string): Promise<string> {
  await fs.mkdir(home, { recursive: true, mode: 0o700 });
  const logs = path.join(home, "logs");
  const stat = await fs.lstat(logs).catch(() => undefined);
  if (!stat?.isFile()) {
    // A directory (a CLI ran with this home before it was made here) is its logs: removed with it.
    if (stat) await fs.rm(logs, { recursive: true, force: true });
    await writeFileAtomic(
      logs,
      "Not a directory on purpose: the Pulumi CLI keeps no automatic logs of tenant operations (runtime/tenants/stack.ts tenantEngineHome).\n",
      "0644",
    );
  }
  // The operator's plugins, linked; a directory of plugins found here instead is kept as it is.
  const plugins = path.join(home, "plugins");
  const target = path.join(operatorHome, "plugins");
  const linked = await fs.lstat(plugins).catch(() => undefined);
  if (!linked || (linked.isSymbolicLink() && (await fs.readlink(plugins)) !== target)) {
    await fs.rm(plugins, { force: true });
    // Another process making the same home may have linked it meanwhile.
    await fs.symlink(target, plugins).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "EEXIST") throw error;
    });
  }
  return home;
}

/** A workspace of the tenant project in `workDir`: its stacks, in the options' backend. */
export async function tenantWorkspace(
  workDir: string,
  program: PulumiFn,
  options: TenantStackOptions,
): Promise<LocalWorkspace> {
  const chain = toolchain();
  // What the provider plugin runs with (a shared one included): the CLI's tools and the engine to talk to.
  const pluginEnv = { ...chain.env, ...(options.dockerHost ? { DOCKER_HOST: options.dockerHost } : {}) };
  await fs.mkdir(workDir, { recursive: true });
  const home = options.engineHome ?? (await tenantEngineHome(options.workRoot));
  const keys =
    options.secretsProvider === undefined && options.passphrase
      ? await stackKeyService(options.passphrase)
      : undefined;
  return LocalWorkspace.create({
    workDir,
    program,
    pulumiCommand: await pulumiCommand(chain.pulumiRoot),
    projectSettings: { name: TENANT_PROJECT, runtime: "nodejs", backend: { url: options.backendUrl } },
    secretsProvider: options.secretsProvider ?? (keys ? STACK_KEY_PROVIDER : "passphrase"),
    envVars: {
      ...pluginEnv,
      PULUMI_HOME: home,
      // Both: a stack made before the key service (or with `passphrase`) is opened by the passphrase.
      ...(options.passphrase ? { PULUMI_CONFIG_PASSPHRASE: options.passphrase } : {}),
      ...keys?.env,
      ...(options.sharedProvider
        ? { PULUMI_DEBUG_PROVIDERS: await sharedProviderFor(pluginEnv).debugProviders() }
        : {}),
    },
  });
}

async function workspaceFor(
  projectId: string,
  program: PulumiFn,
  options: TenantStackOptions,
): Promise<Stack> {
  const workspace = await localWorkspace(projectId, program, options);
  const name = tenantNames(projectId).stack;
  // createOrSelect is `stack select`, then `stack init` when that fails: a create paid for a CLI run
  // (0.2 s) that could only fail. A file backend answers the question with one stat.
  if (fileBackendStacksDir(options.backendUrl) === undefined) return Stack.createOrSelect(name, workspace);
  if (!(await tenantStackExists(projectId, options, workspace))) {
    // The key service's stacks in a file backend are made without a CLI run (runtime/tenants/stack-init.ts).
    const made =
      options.secretsProvider === undefined &&
      !!options.passphrase &&
      (await initTenantStackFiles({
        backendUrl: options.backendUrl,
        project: TENANT_PROJECT,
        stack: name,
        workDir: workspace.workDir,
        passphrase: options.passphrase,
        cliVersion: workspace.pulumiVersion,
      }));
    if (!made) return Stack.create(name, workspace);
  }
  // `stack select` would check what the stat just did and record the workspace's current stack, which no
  // command of this workspace reads (each names its stack: `--stack`): one more CLI run per operation of an
  // existing stack. The workspace is this operation's own, made for it.
  workspace.selectStack = async () => undefined;
  return Stack.select(name, workspace);
}

/** What an operation reads of an `up` or `destroy`: the engine's count of resource changes by kind. */
export interface TenantOperationResult {
  readonly summary: { readonly resourceChanges: OpMap };
}

/**
 * Runs `stack.up` or `stack.destroy` without the read-back the Automation API does after it: three more
 * CLI runs after an up (`stack output`, again with `--show-secrets`, `stack history`) and one after a
 * destroy, to build a result of outputs and a summary from the history. That was 1.0 s of a 3.5 s create
 * here (tests/bench/tenant-create.ts); no operation reads the outputs, and the change counts it does read
 * are in the engine's own summary event, taken from the event stream the operation watches anyway. The
 * stack object is the operation's own, made for it, so replacing its read-back touches nothing else.
 */
async function withoutReadBack(
  stack: Stack,
  run: (onEvent: (event: EngineEvent) => void) => Promise<unknown>,
  onEvent?: (event: EngineEvent) => void,
): Promise<TenantOperationResult> {
  let changes: OpMap | undefined;
  stack.outputs = async () => ({});
  stack.info = async () => undefined;
  await run((event) => {
    if (event.summaryEvent) changes = event.summaryEvent.resourceChanges;
    onEvent?.(event);
  });
  // An engine that ended without its summary event (never seen): the history has the same counts.
  changes ??= (await stack.history(1))[0]?.resourceChanges ?? {};
  return { summary: { resourceChanges: changes } };
}

/**
 * `pulumi up` of the tenant's stack: creates it on first use, converges it afterwards. With `refresh`,
 * the engine first reads what really exists, so whatever drifted (a removed container, a deleted rule)
 * is put back: what the reconciler does for every operation after the create.
 */
export async function upTenant(
  spec: TenantSpecInput,
  options: TenantStackOptions,
  refresh = false,
): Promise<TenantOperationResult> {
  const stack = await workspaceFor(spec.projectId, await programOf(spec, options), options);
  return withoutReadBack(
    stack,
    (onEvent) => stack.up({ onEvent, signal: options.signal, refresh }),
    options.onEvent,
  );
}

/**
 * The engine's own error lines from an Automation API failure (its message holds the whole CLI output);
 * what an operation shows its user.
 */
/**
 * The signal that ended the Pulumi engine under `error` (the Automation API's command error, or one that
 * has it as its cause): an engine killed (SIGKILL, the out-of-memory killer) rather than one that failed.
 */
export function engineSignal(error: unknown): string | undefined {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const signal = (e as { commandResult?: { err?: { signal?: unknown } } }).commandResult?.err?.signal;
    if (typeof signal === "string") return signal;
  }
  return undefined;
}

export function engineErrorSummary(error: unknown): string {
  const signal = engineSignal(error);
  if (signal) return `the Pulumi engine was killed (${signal})`;
  const text = error instanceof Error ? error.message : String(error);
  const all = text.split("\n").map((line) => line.trim());
  const lines: string[] = [];
  all.forEach((line, at) => {
    if (!line.startsWith("error: ") || /^error: update failed$|^error: preview failed$/.test(line)) return;
    const body = line.slice("error: ".length);
    if (!/^\d+ errors occurred:$/.test(body)) return void lines.push(body);
    // The causes are the numbered lines below (a full state backend's lock write said only
    // "2 errors occurred:"); the engine's placeholder "Unknown" says nothing.
    for (let next = at + 1; /^\d+\) /.test(all[next] ?? ""); next++) {
      const cause = all[next]!.replace(/^\d+\) /, "");
      if (cause !== "Unknown") lines.push(cause);
    }
  });
  return (
    [...new Set(lines)].join("; ") || text.split("\n").find((line) => line.trim()) || "unknown engine error"
  );
}

/** Raised when a create failed and was rolled back; `cause` is the engine's error. */
export class TenantCreateError extends Error {
  constructor(projectId: string, cause: unknown, rollback?: unknown) {
    const why = engineErrorSummary(cause);
    super(
      rollback === undefined
        ? `creating tenant ${projectId} failed and was rolled back: ${why}`
        : `creating tenant ${projectId} failed (${why}) and so did the rollback: ${engineErrorSummary(rollback)}`,
      { cause },
    );
    this.name = "TenantCreateError";
  }
}

/**
 * A first `up` that leaves either a working sandbox or nothing: on failure every resource the attempt
 * made is destroyed and the stack removed, so no container, bridge, rule, ACL file or state is orphaned.
 */
export async function createTenant(spec: TenantSpecInput, options: TenantStackOptions) {
  try {
    return await upTenant(spec, options);
  } catch (error) {
    try {
      await destroyTenant(spec.projectId, options);
    } catch (rollback) {
      throw new TenantCreateError(spec.projectId, error, rollback);
    }
    throw new TenantCreateError(spec.projectId, error);
  }
}

/** The tenant's stack for refresh/preview, with its program (needed by preview). */
export async function tenantStack(spec: TenantSpecInput, options: TenantStackOptions): Promise<Stack> {
  return workspaceFor(spec.projectId, await programOf(spec, options), options);
}

/** Where a file backend keeps the tenant project's stacks (their checkpoints `<stack>.json`). */
export function fileBackendStacksDir(backendUrl: string): string | undefined {
  const dir = fileBackendDir(backendUrl);
  return dir === undefined ? undefined : fileStateLayout(dir, TENANT_PROJECT, "").stacksDir;
}

/**
 * Whether the tenant's stack exists: one stack's lookup, never a listing of the backend. Listing a file
 * backend while other stacks are being written races their temporary files (`EOF`, `NotFound` on
 * `tenant-<other>.json.<n>.tmp`): concurrent deletes failed on it.
 */
export async function tenantStackExists(
  projectId: string,
  options: TenantStackOptions,
  workspace: LocalWorkspace,
): Promise<boolean> {
  const stackName = tenantNames(projectId).stack;
  const dir = fileBackendStacksDir(options.backendUrl);
  if (dir) return [".json", ".json.gz"].some((suffix) => existsSync(path.join(dir, `${stackName}${suffix}`)));
  try {
    await Stack.select(stackName, workspace);
    return true;
  } catch (error) {
    if (/no stack named|not found|does not exist/i.test((error as Error).message)) return false;
    throw error;
  }
}

/**
 * Destroys every resource of the tenant, removes the stack and purges what the backend keeps of it.
 * A tenant whose stack no longer exists is already deleted: a second delete is a no-op.
 */
export async function destroyTenant(
  projectId: string,
  options: TenantStackOptions,
): Promise<"deleted" | "absent"> {
  const stackName = tenantNames(projectId).stack;
  const workspace = await localWorkspace(projectId, async () => ({}), options);
  const purge = async () => {
    if (options.backendUrl.startsWith("file://"))
      await purgeRemovedStackState(options.backendUrl, TENANT_PROJECT, stackName);
    else if (options.backendUrl.startsWith("gs://"))
      await purgeRemovedGcsStackState(
        new GcsClient(hostTokenSource()),
        options.backendUrl,
        TENANT_PROJECT,
        stackName,
      );
    await fs.rm(path.join(options.workRoot, stackName), { recursive: true, force: true });
  };
  if (!(await tenantStackExists(projectId, options, workspace))) {
    // Also a delete cut short between `stack rm` and the purge (a killed runtime): what the
    // backend kept of the stack (history, backups, `.bak`, lock) goes now.
    await purge();
    return "absent";
  }
  // In a file backend the stat above was the check `stack select` would make (workspaceFor): one CLI run
  // fewer per delete. Elsewhere `tenantStackExists` selected it already.
  if (fileBackendStacksDir(options.backendUrl) !== undefined) workspace.selectStack = async () => undefined;
  const stack = await Stack.select(stackName, workspace);
  await withoutReadBack(stack, (onEvent) => stack.destroy({ onEvent }), options.onEvent);
  await stack.workspace.removeStack(stackName);
  await purge();
  return "deleted";
}
