// What an operation does to its tenant's stack before the engine runs, in the state backend the stacks are
// in: a killed engine or worker leaves a lock, pending operations, or a torn metadata file behind, each of
// which would fail every later operation of the project. The file backend's layout is runtime/stack-state.ts's.
import { existsSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { Stack } from "@pulumi/pulumi/automation/index.js";
import { tenantNames } from "../../components/tenant/names.js";
import { processAlive } from "../../lib/process.js";
import { fileBackendDir, fileStateLayout } from "../stack-state.js";
import {
  fileBackendStacksDir,
  localWorkspace,
  tenantStackExists,
  TENANT_PROJECT,
  type TenantStackOptions,
} from "./stack.js";

/** SIGTERM, then SIGKILL after 15 s; true when the process was alive. */
async function stopProcess(pid: number): Promise<boolean> {
  if (!processAlive(pid)) return false;
  process.kill(pid, "SIGTERM");
  for (let waited = 0; processAlive(pid) && waited < 15_000; waited += 100)
    await new Promise((resolve) => setTimeout(resolve, 100));
  if (processAlive(pid)) process.kill(pid, "SIGKILL");
  return true;
}

/**
 * The file backend's lock files of a tenant's stack, with the engine each names (none on other backends).
 * `interrupted`: a lock whose write never finished (`<lock>.json.<n>.tmp`, never renamed into place), so no
 * engine holds it; the engine still reads it as a lock and fails on it ("unexpected end of JSON input")
 * until it is removed. A lock write that ran out of space leaves one.
 */
async function stackLocks(
  projectId: string,
  options: TenantStackOptions,
): Promise<{ file: string; pid?: number; hostname?: string; interrupted: boolean }[]> {
  const backendDir = fileBackendDir(options.backendUrl);
  if (backendDir === undefined) return [];
  const dir = fileStateLayout(backendDir, TENANT_PROJECT, tenantNames(projectId).stack).locks;
  // `<lock>.json.attrs` beside each lock is the blob store's metadata of it: it goes with its lock.
  const files = (existsSync(dir) ? await fs.readdir(dir) : []).filter((file) => !file.endsWith(".attrs"));
  return Promise.all(
    files.map(async (file) => {
      const text = await fs.readFile(path.join(dir, file), "utf8").catch(() => "{}");
      let lock: { pid?: number; hostname?: string } = {};
      try {
        lock = JSON.parse(text) as typeof lock;
      } catch {
        // an interrupted write's partial content: what holds it is told by its name
      }
      return { file: path.join(dir, file), ...lock, interrupted: file.endsWith(".tmp") };
    }),
  );
}

/**
 * Whether the stack is locked by an engine of this host that is dead: an engine killed mid-operation
 * (SIGKILL, out of memory) while its runtime lives on leaves its lock and, mid-create, pending operations.
 * Nothing else can hold that lock, so it is stale (left, it blocks every later
 * operation of the project).
 */
export async function deadEngineLock(projectId: string, options: TenantStackOptions): Promise<boolean> {
  return (await stackLocks(projectId, options)).some(staleLock);
}

/** A lock no engine holds: an interrupted write, or one naming a dead engine of this host. */
const staleLock = (lock: { pid?: number; hostname?: string; interrupted: boolean }): boolean =>
  lock.interrupted || (lock.hostname === os.hostname() && lock.pid !== undefined && !processAlive(lock.pid));

/**
 * The file backend writes each file's metadata sidecar (`<file>.attrs`, gocloud's fileblob) in place, truncating
 * it first, just before it renames the new file over the old. An engine killed in between leaves an empty or
 * half-written sidecar beside an intact checkpoint, and every later read of the stack fails ("failed to load
 * checkpoint: EOF"). A missing sidecar is read as no metadata, which the
 * backend does not need: a torn one of the stack's checkpoint or its backup is removed.
 */
export async function removeTornSidecars(
  projectId: string,
  options: Pick<TenantStackOptions, "backendUrl">,
  log: (m: string) => void,
): Promise<string[]> {
  const dir = fileBackendStacksDir(options.backendUrl);
  if (!dir) return [];
  const stack = tenantNames(projectId).stack;
  const removed: string[] = [];
  for (const file of [".json", ".json.gz", ".json.bak", ".json.gz.bak"].map((s) => `${stack}${s}.attrs`)) {
    const sidecar = path.join(dir, file);
    const text = await fs.readFile(sidecar, "utf8").catch(() => undefined);
    if (text === undefined) continue;
    try {
      JSON.parse(text);
      continue;
    } catch {
      log(
        `removing the torn metadata file ${file} of ${stack} (${text.length} bytes) left by a killed engine`,
      );
      await fs.rm(sidecar, { force: true });
      removed.push(sidecar);
    }
  }
  return removed;
}

/**
 * A crashed worker or engine leaves its stack locked and, mid-create, with pending operations in the
 * state. Before another attempt: drop the stale lock and clear pending operations; resources those left
 * half-recorded are adopted by the provider's create. With `takeOver` (the worker's lease expired, so it
 * is not running), an engine it left running is an orphan and is stopped first; without, only stale locks
 * (dead engines', interrupted writes) go.
 */
export async function recoverStack(
  projectId: string,
  options: TenantStackOptions,
  log: (m: string) => void,
  takeOver = true,
): Promise<void> {
  const stackName = tenantNames(projectId).stack;
  for (const lock of await stackLocks(projectId, options)) {
    const ours = lock.hostname === os.hostname() && lock.pid !== undefined;
    if (!takeOver && !staleLock(lock)) continue;
    // A worker killed with SIGKILL leaves its `pulumi` child running. The lease says the worker is
    // gone, so that engine is an orphan: stop it (SIGTERM lets it cancel cleanly) before taking over.
    if (takeOver && ours && (await stopProcess(lock.pid!))) {
      log(`stopped orphaned engine pid ${lock.pid} of ${stackName}`);
    }
    log(`removing stale lock ${path.basename(lock.file)} of ${stackName}`);
    await fs.rm(lock.file, { force: true });
    await fs.rm(`${lock.file}.attrs`, { force: true });
  }
  await removeTornSidecars(projectId, options, log);
  const workspace = await localWorkspace(projectId, async () => ({}), options);
  if (!(await tenantStackExists(projectId, options, workspace))) return;
  // Cloud backends release a dead update's lock through `cancel`; the file backend's lock was removed above.
  if (takeOver && !options.backendUrl.startsWith("file://"))
    await (await Stack.select(stackName, workspace)).cancel().catch(() => undefined);
  const state = await workspace.exportStack(stackName);
  const pending = state.deployment?.pending_operations ?? [];
  if (pending.length > 0) {
    log(`clearing ${pending.length} pending operation(s) of ${stackName} left by a crashed worker or engine`);
    state.deployment.pending_operations = [];
    await workspace.importStack(stackName, state);
  }
}

/**
 * Before an operation's engine runs: whatever attempt this is, a torn metadata file an engine killed under
 * an earlier one left goes; a later attempt (its worker's lease expired) takes the stack over, stopping the
 * dead worker's engine; a first one removes only a dead engine's lock (the runtime lived on).
 */
export async function readyStack(
  projectId: string,
  attempt: number,
  options: TenantStackOptions,
  log: (m: string) => void,
): Promise<void> {
  await removeTornSidecars(projectId, options, log);
  if (attempt > 1) await recoverStack(projectId, options, log);
  else if (await deadEngineLock(projectId, options)) await recoverStack(projectId, options, log, false);
}
