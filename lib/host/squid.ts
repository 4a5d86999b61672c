import { createHash } from "node:crypto";
import { promises as fs, readFileSync } from "node:fs";
import * as path from "node:path";
import { renderSquidBaselineFragment, renderSquidConf, squidPaths } from "./render.js";
import { writeFileAtomic } from "../files.js";
import type { Check, HostPart } from "./check.js";
import { hostPublicAddresses, tcpReachable } from "./net.js";
import { livePid, processAlive, run, waitFor, withFileLock } from "../process.js";

export interface SquidOptions {
  readonly port: number;
  /** Names Squid resolves before asking DNS (default /etc/hosts). */
  readonly hostsFile?: string;
  /** The resolvers Squid asks (default: the host's /etc/resolv.conf). */
  readonly dnsNameservers?: readonly string[];
  /** The host's own public addresses the proxy refuses (default: read from the interfaces at ensure). */
  readonly hostAddresses?: readonly string[];
  readonly configDir: string;
  readonly logDir: string;
  readonly runDir: string;
}

export { squidPaths };

export function renderSquidConfig(options: SquidOptions): string {
  return renderSquidConf(options);
}

/**
 * The instance's Squid service name (`squid -n`), which names its shared memory segments
 * (`/dev/shm/<name>-cf__*.shm`). Every Squid started without one is "squid" and shares them: a second
 * instance on the host (a test platform, another platform instance) unlinks and re-creates the first's at
 * its start, and removes them at its shutdown, so the first's worker could no longer restart. One name per
 * config file; `-k` commands find the instance by its pid file and need none.
 */
export function squidServiceName(config: string): string {
  return `sbx${createHash("sha256").update(path.resolve(config)).digest("hex").slice(0, 12)}`;
}

/** `squid -k parse` of a config; the error names the offending line. */
export async function validateSquidConfig(file: string): Promise<void> {
  try {
    await run("squid", ["-k", "parse", "-f", file]);
  } catch (error) {
    const fatal = (error as Error).message.split("\n").filter((line) => /FATAL|ERROR|Bungled/.test(line));
    throw new Error(`squid rejects ${file}: ${fatal.join(" | ") || (error as Error).message}`);
  }
}

async function readOrEmpty(file: string): Promise<string> {
  return fs.readFile(file, "utf8").catch(() => "");
}

/** The `cache_log` a Squid config names (undefined when it names none) and its `workers` (1 by default). */
async function logAndWorkersOf(config: string): Promise<{ log: string | undefined; workers: number }> {
  const text = await readOrEmpty(config);
  return {
    log: /^\s*cache_log\s+(\S+)/m.exec(text)?.[1],
    workers: Number(/^\s*workers\s+(\d+)/m.exec(text)?.[1] ?? 1),
  };
}

/**
 * Whether every worker (kid1..kidN; a line without a kid is kid1's) has logged "Reconfiguring Squid Cache"
 * (or, a worker started again meanwhile, "Starting Squid Cache": it read the config at its start) in `text`
 * and, after its last such line, "Accepting HTTP Socket connections". The coordinator (kid N+1)
 * reconfigures too but accepts nothing, so it is not waited for.
 */
export function workersReconfigured(text: string, workers: number): boolean {
  const { state } = readCacheLog(text);
  for (let kid = 1; kid <= workers; kid++) if (state.get(kid) !== "accepting") return false;
  return true;
}

/**
 * What a reconfigure that did not finish left in the cache log since its signal, for its error: each worker's
 * state (`kid1 accepting`, `kid2 reconfiguring`, `kid2 no reconfigure logged`) and the last FATAL or ERROR
 * lines (a worker that could not open the shared port says so there).
 */
export function reconfigureEvidence(text: string, workers: number): string {
  const { state, errors } = readCacheLog(text);
  const kids = Array.from(
    { length: workers },
    (_, i) => `kid${i + 1} ${state.get(i + 1) ?? "no reconfigure logged"}`,
  );
  const last = errors.slice(-3);
  return `${kids.join(", ")}${last.length > 0 ? `; last errors: ${last.join(" | ")}` : ""}`;
}

/** Each worker's state after the log's lines (a kid's reconfigure, then its accept), and the FATAL/ERROR lines. */
function readCacheLog(text: string) {
  const state = new Map<number, "reconfiguring" | "accepting">();
  const errors: string[] = [];
  for (const line of text.split("\n")) {
    const event =
      /(?:kid(\d+)\|\s*)?(Reconfiguring Squid Cache|Starting Squid Cache|Accepting HTTP Socket connections)/.exec(
        line,
      );
    if (!event) {
      if (/\b(FATAL|ERROR)\b/.test(line)) errors.push(line.trim());
      continue;
    }
    const kid = Number(event[1] ?? 1);
    if (event[2] !== "Accepting HTTP Socket connections") state.set(kid, "reconfiguring");
    else if (state.has(kid)) state.set(kid, "accepting");
  }
  return { state, errors };
}

/** The cache log's size now (0 when there is none yet): where what comes next begins. */
async function logSize(log: string | undefined): Promise<number> {
  if (log === undefined) return 0;
  return fs.stat(log).then(
    (s) => s.size,
    () => 0,
  );
}

async function logSince(file: string, offset: number): Promise<string> {
  const handle = await fs.open(file, "r");
  try {
    const { size } = await handle.stat();
    const from = size < offset ? 0 : offset; // rotated or truncated: read it all
    const buffer = Buffer.alloc(size - from);
    await handle.read(buffer, 0, buffer.length, from);
    return buffer.toString("utf8");
  } finally {
    await handle.close();
  }
}

/**
 * Sends a reconfigure (`send`, e.g. `squid -k reconfigure -f config`) and returns once every worker has
 * re-read the config and accepts again. A worker closes its listening port while it re-reads the config:
 * with one worker a connection in between is refused (a caller that went on at once, a tenant create
 * answering "running", would hand out a proxy that resets its first request); with several the
 * coordinator holds the shared port and the connection waits, but until every worker is done one of them
 * may still answer with the old allowlist. Done = for each worker, a "Reconfiguring Squid Cache" line
 * written after the signal and then an "Accepting HTTP Socket connections" line, in the config's cache log
 * ({@link workersReconfigured}). A second signal during a reconfigure makes Squid reconfigure again, which
 * logs its own start line, so a waiter never takes an earlier reconfigure (one that may have read the
 * config before its change) for its own. A config without a cache log is not waited for. The caller's
 * files must be written before the call: a reconfigure another caller began after that, and finished well,
 * is the caller's too, so callers that queue for one at once share one (`<config>.reconfigured` says when the
 * newest began).
 */
export async function reconfigureSquid(
  config: string,
  send: () => Promise<unknown>,
  timeoutMs = 20_000,
): Promise<void> {
  // What the caller wrote is on disk by now: a reconfigure that begins after this moment reads it.
  const asked = instant();
  // One at a time, across processes (the runtime's claims and PATCHes, every provider): a reconfigure sent
  // while SMP workers are still in the last one can leave a worker unable to open the shared HTTP port
  // ("FATAL: Unable to open HTTP Socket"), and after a few such deaths in a row the master stops restarting
  // them: seen with four tenant creates at a time, 46 tenants in (npm run bench fleet, session 34).
  await withFileLock(
    `${config}.reconfigure.lock`,
    async () => {
      // Callers that waited for the lock together need one reconfigure, not one each: the first of them to
      // get it does it, and the rest find it begun after they asked (and finished well).
      if (await reconfiguredSince(config, asked)) return;
      const began = instant();
      await reconfigureNow(config, send, timeoutMs);
      await writeFileAtomic(`${config}.reconfigured`, `${began.boot} ${began.ns}\n`, "0644");
    },
    4 * timeoutMs,
  );
}

let bootId: string | undefined;

/**
 * A moment on this host that every process reads alike: the boot's id and CLOCK_MONOTONIC in nanoseconds
 * (the wall clock can be set back; the monotonic one starts again at a boot, which the id tells apart).
 */
function instant(): { boot: string; ns: bigint } {
  bootId ??= readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  return { boot: bootId, ns: process.hrtime.bigint() };
}

/** Whether the newest reconfigure of `config` that finished well began after `moment`. */
async function reconfiguredSince(config: string, moment: { boot: string; ns: bigint }): Promise<boolean> {
  const [boot, ns] = (await readOrEmpty(`${config}.reconfigured`)).trim().split(" ");
  return boot === moment.boot && /^\d+$/.test(ns ?? "") && BigInt(ns!) > moment.ns;
}

async function reconfigureNow(
  config: string,
  send: () => Promise<unknown>,
  timeoutMs: number,
): Promise<void> {
  const { log, workers } = await logAndWorkersOf(config);
  const offset = await logSize(log);
  await send();
  if (log === undefined) return;
  const done = async () => (workersReconfigured(await logSince(log, offset), workers) ? true : undefined);
  try {
    await waitFor(`squid to listen again after a reconfigure (see ${log})`, timeoutMs, done);
  } catch (error) {
    // A worker that is alive but has not accepted again within the bound is stuck: two full runs (session
    // 54) had Squid 5.7's kid2 begin a reconfigure and never listen again, no error logged, and every later
    // reconfigure fail on it. Killed, it is started again by its master and reads the config at its start
    // (its connections in flight are lost; new ones wait on the shared port meanwhile).
    const killed = await killStuckWorkers(config, await logSince(log, offset).catch(() => ""), workers);
    if (killed.length > 0) {
      // Said where an operator reads Squid's own account of the reconfigure (appended, as Squid appends).
      const what = killed.map(({ kid, pid }) => `kid${kid} (pid ${pid})`).join(", ");
      await fs
        .appendFile(
          log,
          `${squidLogTime(new Date())} agent-sandbox| killed ${what}: not listening ${timeoutMs} ms after a reconfigure; its master starts it again\n`,
        )
        .catch(() => undefined);
    }
    // As long again for the workers (a restarted one's start counts as its reading of the config), with the
    // lock held: released at once, the caller's rollback or the next queued caller would signal into this
    // reconfigure, which can leave workers unable to open the shared port (above; 30 signals back to back
    // did that to a bare 2-worker Squid 5.7 here). Done then, the caller's change is applied; if not, it is
    // not known to be, so the call fails naming each worker's state.
    const finished = await waitFor("squid's workers to finish the reconfigure", timeoutMs, done).then(
      () => true,
      () => false,
    );
    if (finished) return;
    const evidence = reconfigureEvidence(await logSince(log, offset).catch(() => ""), workers);
    throw new Error(`${(error as Error).message}: ${evidence}`);
  }
}

/** A moment as Squid's cache log writes it: `2026/12/06 19:52:01`, local time. */
function squidLogTime(at: Date): string {
  const two = (n: number) => String(n).padStart(2, "0");
  return (
    `${at.getFullYear()}/${two(at.getMonth() + 1)}/${two(at.getDate())} ` +
    `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}`
  );
}

/**
 * Kills (SIGKILL) the workers of the instance running `config` that `text`, its cache log since a
 * reconfigure's signal, does not show accepting again; returns their kid numbers and pids. Only running
 * workers are killed: one that died is its master's to start again, or not.
 */
async function killStuckWorkers(
  config: string,
  text: string,
  workers: number,
): Promise<{ kid: number; pid: number }[]> {
  const { state } = readCacheLog(text);
  const killed: { kid: number; pid: number }[] = [];
  for (const [kid, pid] of await squidWorkers(config)) {
    if (kid > workers || state.get(kid) === "accepting") continue;
    try {
      process.kill(pid, "SIGKILL");
      killed.push({ kid, pid });
    } catch {
      // gone already
    }
  }
  return killed;
}

/** Where one Squid instance lives: the files a daemon-level resource needs, whatever wrote its config. */
export interface SquidInstance {
  readonly port: number;
  readonly config: string;
  readonly pidFile: string;
  readonly logDir: string;
}

const accepting = (port: number) =>
  tcpReachable("127.0.0.1", port, 300).then(
    () => true,
    () => false,
  );

/** The instance's pid when it runs and accepts connections on its port, else undefined. */
export async function squidServing(instance: SquidInstance): Promise<number | undefined> {
  const pid = await livePid(instance.pidFile, "squid");
  return pid !== undefined && (await accepting(instance.port)) ? pid : undefined;
}

/**
 * Brings one Squid instance to "running with its current config": starts it when it is not running,
 * `-k reconfigure` when it runs and `reconfigure` is set. The config is validated first.
 */
export async function runSquid(
  instance: SquidInstance,
  reconfigure: boolean,
  log: (line: string) => void,
): Promise<number> {
  await fs.mkdir(instance.logDir, { recursive: true });
  await fs.mkdir(path.dirname(instance.pidFile), { recursive: true });
  await run("chown", ["proxy:proxy", instance.logDir]); // Squid writes its logs after dropping to "proxy"
  await validateSquidConfig(instance.config);
  let pid = await livePid(instance.pidFile, "squid");
  if (pid !== undefined && !(await accepting(instance.port))) {
    // Starting up or shutting down: wait until it serves or is gone before deciding.
    await waitFor("squid to settle", 15_000, async () =>
      (await accepting(instance.port)) || (await livePid(instance.pidFile, "squid")) === undefined
        ? true
        : undefined,
    );
    pid = await livePid(instance.pidFile, "squid");
  }
  if (pid !== undefined) {
    if (reconfigure) {
      log(`reconfiguring squid (pid ${pid})`);
      await reconfigureSquid(instance.config, () =>
        run("squid", ["-k", "reconfigure", "-f", instance.config]),
      );
    }
  } else {
    await killOrphanedKids(instance.config, log);
    if (await accepting(instance.port)) {
      throw new Error(
        `port ${instance.port} is taken by another process; stop it or set agent-sandbox:host.squidPort`,
      );
    }
    log(`starting squid on port ${instance.port} (logs: ${instance.logDir})`);
    // Squid refuses to start over a pid file whose process "runs", and a killed master stays a zombie
    // until init reaps it: "FATAL: Squid is already running: Found fresh instance PID file". It is not
    // running (livePid above), so its pid file is stale.
    await fs.rm(instance.pidFile, { force: true });
    const { log: cacheLog, workers } = await logAndWorkersOf(instance.config);
    const offset = await logSize(cacheLog);
    await run("squid", ["-n", squidServiceName(instance.config), "-f", instance.config]);
    // Started = every worker accepts, not the first: the port answers once one does, and a reconfigure sent
    // while another is still starting kills it ("FATAL: Unable to open HTTP Socket", its master starts it
    // again; a full run's squid-workers test saw kid1 so replaced, under load).
    if (cacheLog !== undefined)
      await waitFor(`squid's ${workers} workers to accept (see ${cacheLog})`, 30_000, async () =>
        workersReconfigured(await logSince(cacheLog, offset).catch(() => ""), workers) ? true : undefined,
      );
  }
  return waitFor(`squid (see ${instance.logDir}/cache.log)`, 30_000, async () => squidServing(instance));
}

/**
 * The kids (workers and coordinator) of the instance that runs `config`, each with its name (`squid-1`,
 * `squid-coord-3`): their command line is `(squid-N) --kid squid-N [-n name] -f config`.
 */
async function kidsOf(config: string): Promise<{ pid: number; name: string }[]> {
  const kids: { pid: number; name: string }[] = [];
  for (const entry of await fs.readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = (await fs.readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "")).split("\0");
    const [kid, f] = [argv.indexOf("--kid"), argv.indexOf("-f")];
    if (kid >= 0 && f >= 0 && argv[f + 1] === config)
      kids.push({ pid: Number(entry), name: argv[kid + 1] ?? "" });
  }
  return kids;
}

/** The pids of the kids (workers and coordinator) of the instance that runs `config`. */
export async function squidKids(config: string): Promise<number[]> {
  return (await kidsOf(config)).map(({ pid }) => pid);
}

/** The workers of the instance that runs `config`: kid N's pid by N (the coordinator is not among them). */
export async function squidWorkers(config: string): Promise<Map<number, number>> {
  const byKid = new Map<number, number>();
  for (const { pid, name } of await kidsOf(config)) {
    const kid = /^squid-(\d+)$/.exec(name)?.[1];
    if (kid !== undefined) byKid.set(Number(kid), pid);
  }
  return byKid;
}

/**
 * Kills the kids a master left behind (it was killed alone: `kill -9` of the pid file's process, an OOM
 * kill). They keep the shared port open and serve the config they last read, but nothing can reload or
 * stop them (`-k` finds the instance by its master's pid file), and a new Squid could not bind the port.
 * Called only when the pid file names no live master.
 */
async function killOrphanedKids(config: string, log: (line: string) => void): Promise<void> {
  const orphans = await squidKids(config);
  if (orphans.length === 0) return;
  log(`killing squid's kids left by a master that is gone (pids ${orphans.join(", ")})`);
  for (const pid of orphans) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone already
    }
  }
  await waitFor("squid's orphaned kids to exit", 10_000, async () =>
    orphans.some(processAlive) ? undefined : true,
  );
}

/** Shuts the instance down (if it runs; a master's orphaned kids too) and waits until its pid is gone. */
export async function stopSquid(instance: SquidInstance): Promise<void> {
  if ((await livePid(instance.pidFile, "squid")) === undefined)
    return killOrphanedKids(instance.config, () => undefined);
  await run("squid", ["-k", "shutdown", "-f", instance.config]);
  await waitFor("squid to exit", 30_000, async () =>
    (await livePid(instance.pidFile, "squid")) === undefined ? true : undefined,
  );
}

/**
 * The egress proxy: our own Squid instance with its own config, pid file and logs, so it never depends
 * on (or disturbs) a distribution-managed squid service.
 */
export function squidProxy(options: SquidOptions): HostPart {
  const name = "squid";
  const paths = squidPaths(options);
  const instance: SquidInstance = { port: options.port, ...paths };
  const probe = async (): Promise<Check> => {
    const pid = await livePid(paths.pidFile, "squid");
    if (pid === undefined)
      return { name, ready: false, detail: `not running (no live pid in ${paths.pidFile})` };
    await tcpReachable("127.0.0.1", options.port, 500);
    return { name, ready: true, detail: `pid ${pid}, port ${options.port}, config ${paths.config}` };
  };
  return {
    name,
    probe,
    async ensure(log) {
      await fs.mkdir(paths.fragmentsDir, { recursive: true });
      const baseline = renderSquidBaselineFragment();
      if ((await readOrEmpty(paths.baselineFragment)) !== baseline)
        await writeFileAtomic(paths.baselineFragment, baseline, "0644");

      const desired = renderSquidConfig({
        ...options,
        hostAddresses: options.hostAddresses ?? hostPublicAddresses(),
      });
      const changed = (await readOrEmpty(paths.config)) !== desired;
      if (changed) {
        // Validate a candidate next to the live file: a bad config must never replace a good one.
        const candidate = `${paths.config}.candidate`;
        await writeFileAtomic(candidate, desired, "0644");
        try {
          await validateSquidConfig(candidate);
        } finally {
          await fs.rm(candidate, { force: true });
        }
        log(`writing ${paths.config}`);
        await writeFileAtomic(paths.config, desired, "0644");
      }
      await runSquid(instance, changed, log);
      return probe();
    },
  };
}
