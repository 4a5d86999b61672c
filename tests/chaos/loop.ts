// The fault loops (issue 18): one project at a time goes through create, update (an allowlist PATCH), stop,
// start, snapshot, restore and delete through the API, and each operation gets one fault at a random point
// (seeded): SIGKILL of the runtime (its reconciler dies mid-operation; it is started again and a new one
// takes the operation over once the lease expires), SIGKILL of the shared `sandbox` provider plugin (the
// engines attached to it lose it), or SIGKILL of the Pulumi engine running the operation (the CLI the
// Automation API started: the runtime lives on, and the stack is left locked with the engine's work half
// done). Then the loop waits for the reconciler to finish; an operation the fault
// made fail is asked for again as its user would (once). Before each operation a file is written in the
// sandbox's home; after it, every file written so far must be there (the home volume is kept by every
// operation but delete), plus what the operation itself promised: the allowlist applied, the sandbox
// stopped or running, a snapshot's system state back after the restore. After the delete nothing of the
// project may be left. After every operation the platform's own orphan sweep counts what no stack owns.
import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { tenantNames } from "../../components/tenant/names.js";
import { squidPaths } from "../../lib/host/squid.js";
import { docker, execIn } from "../helpers/containers.js";
import { tenantLeftovers } from "../helpers/host.js";
import { alive, type ChaosPlatform } from "./platform.js";

export const CHAOS_KINDS = [
  "create",
  "update",
  "stop",
  "start",
  "snapshot",
  "restore",
  "fork",
  "delete",
] as const;
export type ChaosKind = (typeof CHAOS_KINDS)[number];
export const FAULTS = ["runtime", "provider", "engine"] as const;
export type Fault = (typeof FAULTS)[number];

/** mulberry32: a small seeded generator, so a failing run can be replayed with its seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** An engine fault's kill point: up to this long after the engine started. */
const ENGINE_WINDOW_MS = 800;

/** How long each operation takes here unfaulted (2 cores), the window a kill point is drawn from. */
export const DEFAULT_WINDOWS_MS: Record<ChaosKind, number> = {
  create: 15_000,
  update: 6_000,
  stop: 8_000,
  start: 6_000,
  snapshot: 10_000,
  restore: 8_000,
  fork: 15_000,
  delete: 8_000,
};

export interface FaultRecord {
  readonly round: number;
  readonly kind: ChaosKind;
  readonly fault: Fault;
  readonly projectId: string;
  /** The kill point: milliseconds after the request was answered (an engine fault: after the engine started). */
  readonly killAfterMs: number;
  /** Whether the operation was still in flight when the process was killed. */
  duringOperation: boolean;
  /** The killed process's pid (none: no provider process ran at that moment). */
  killedPid?: number;
  /** How the faulted operation ended once the reconciler had finished; and the retry's, if it needed one. */
  outcome: string;
  retried?: string;
  attempts: number;
  /** The operation (and its retry) succeeded, nothing was left over and nothing was lost. */
  survived: boolean;
  orphans: string[];
  lostFiles: string[];
  /** Other promises the operation did not keep (state, allowlist, snapshot contents). */
  broken: string[];
  /** Processes of the killed runtime still alive after the recovery. */
  strays: string[];
  seconds: number;
  /** From the request to the end of the (first) operation. */
  operationMs: number;
}

export interface ChaosSummary {
  readonly seed: number;
  readonly rounds: number;
  readonly faultsInjected: number;
  readonly duringOperation: number;
  readonly survived: number;
  readonly retriedByUser: number;
  readonly orphansFound: number;
  readonly lostFiles: number;
  readonly brokenPromises: number;
  readonly strayProcesses: number;
  readonly byKind: Record<string, { injected: number; survived: number; during: number }>;
  readonly roundSeconds: number[];
  readonly records: FaultRecord[];
}

export interface ChaosLoopOptions {
  readonly seed: number;
  /** Rounds of the whole lifecycle; the fault of operation j in round r is FAULTS[(r + j) % 3]. */
  readonly rounds: number;
  /** Each kind's first window; then the duration of its latest operation that ran unfaulted. */
  readonly windowsMs?: Partial<Record<ChaosKind, number>>;
  /** Only this fault (default: each in turn). */
  readonly only?: Fault;
  /** false: no fault at all (a calibration round: each operation's duration). */
  readonly inject?: boolean;
  readonly log?: (line: string) => void;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A home file: its name under ~/chaos and what it holds. */
type Files = Map<string, string>;

const running = (container: string) =>
  docker("inspect", "--format", "{{.State.Running}}", container).catch(() => "absent");

/** `name content` per file under ~/chaos, from the live sandbox or (stopped) from its home volume. */
async function homeFiles(chaos: ChaosPlatform, projectId: string): Promise<Map<string, string>> {
  const names = tenantNames(projectId);
  const list = `cd /h 2>/dev/null && for f in chaos/*; do [ -f "$f" ] && echo "$(basename "$f") $(cat "$f")"; done; true`;
  let text: string;
  if ((await running(names.container)) === "true") {
    const result = await execIn(names.container, list.replace("/h", "/home/agent"));
    if (result.code !== 0) throw new Error(`reading the home of ${projectId}: ${result.stderr}`);
    text = result.stdout;
  } else {
    text = await docker(
      "run",
      "--rm",
      "--network",
      "none",
      "-v",
      `${names.volume}:/h:ro`,
      "--entrypoint",
      "bash",
      chaos.platform.config.tenants.image,
      "-c",
      list,
    );
  }
  return new Map(
    text
      .split("\n")
      .filter(Boolean)
      .map((line) => line.split(" ") as [string, string]),
  );
}

async function writeHomeFile(projectId: string, files: Files, name: string): Promise<void> {
  const content = randomBytes(8).toString("hex");
  const result = await execIn(
    tenantNames(projectId).container,
    `mkdir -p chaos && printf %s ${content} > chaos/${name}.tmp && mv chaos/${name}.tmp chaos/${name} && sync`,
  );
  if (result.code !== 0) throw new Error(`writing ${name} in ${projectId}: ${result.stderr}`);
  files.set(name, content);
}

async function lostOf(chaos: ChaosPlatform, projectId: string, files: Files): Promise<string[]> {
  const found = await homeFiles(chaos, projectId);
  return [...files]
    .filter(([name, content]) => found.get(name) !== content)
    .map(([name]) => `${projectId}: ~/chaos/${name} ${found.has(name) ? "changed" : "missing"}`);
}

async function anyInFlight(chaos: ChaosPlatform, operationIds: readonly string[]): Promise<boolean> {
  const { rows } = await chaos.db.query<{ state: string }>(
    "select state from operations where id = any($1)",
    [operationIds],
  );
  return rows.some((r) => ["pending", "running"].includes(r.state));
}

/**
 * Every operation of `operationIds` finished: succeeded when all did, else the first that did not. None (a
 * request cut off before it queued anything) is a failure naming the request's error.
 */
async function settledAll(
  chaos: ChaosPlatform,
  operationIds: readonly string[],
  cutOff?: Error,
): Promise<{ state: string; attempt: number; error: string | null }> {
  if (operationIds.length === 0)
    return { state: "failed", attempt: 0, error: `nothing queued (${cutOff?.message ?? "no error"})` };
  const all = [];
  for (const id of operationIds) all.push(await chaos.settled(id));
  const attempt = Math.max(...all.map((o) => o.attempt));
  const bad = all.find((o) => o.state !== "succeeded");
  return bad
    ? { state: bad.state, attempt, error: bad.error ?? null }
    : { state: "succeeded", attempt, error: null };
}

/** How many copies the fork step asks for. */
const FORKS = 2;

/** The live forks of a project (the runtime's own list). */
async function forksOf(chaos: ChaosPlatform, projectId: string): Promise<string[]> {
  const answer = await chaos.api("GET", `/projects/${projectId}/forks`);
  if (answer.status !== 200) throw new Error(`GET forks of ${projectId}: ${answer.status}`);
  return (answer.body.forks as { project_id: string; forked_from: string }[])
    .filter((f) => f.forked_from === projectId)
    .map((f) => f.project_id);
}

/** The newest operation of a project (what the request just queued). */
async function latestOperation(chaos: ChaosPlatform, projectId: string): Promise<string> {
  const { rows } = await chaos.db.query<{ id: string }>(
    "select id from operations where project_id = $1 order by seq desc limit 1",
    [projectId],
  );
  if (!rows[0]) throw new Error(`no operation of ${projectId}`);
  return rows[0].id;
}

export async function runChaosLoop(chaos: ChaosPlatform, options: ChaosLoopOptions): Promise<ChaosSummary> {
  const rng = seededRandom(options.seed);
  const log = options.log ?? (() => undefined);
  const windows = { ...DEFAULT_WINDOWS_MS, ...options.windowsMs };
  const records: FaultRecord[] = [];
  const roundSeconds: number[] = [];
  const host = chaos.platform.config.host;

  const expectOk = async (method: string, url: string, body?: unknown) => {
    const answer = await chaos.api(method, url, body);
    if (answer.status >= 300)
      throw new Error(`${method} ${url}: ${answer.status} ${JSON.stringify(answer.body)}`);
    return answer;
  };

  for (let round = 0; round < options.rounds; round++) {
    const roundStarted = performance.now();
    const files: Files = new Map();
    let atFork: Files = new Map();
    let projectId = "";
    const domain = `chaos-${round}.example.test`;
    /** Each kind: its request, the request a user repeats when it failed, and what it promised. */
    const steps: Record<
      ChaosKind,
      {
        before?: () => Promise<void>;
        request: () => Promise<unknown>;
        /**
         * The kill point counts from the request's sending, not its answer: the request itself does work a
         * kill may interrupt (a fork's freeze and copies). A request the kill cut off is not repeated
         * when {@link operations} finds what it made.
         */
        killFromSend?: boolean;
        /** The operations the request queued (default: the project's newest). */
        operations?: () => Promise<string[]>;
        /** What its user asks for when it failed (the request itself unless given). */
        retry?: () => Promise<unknown>;
        check: () => Promise<string[]>;
      }
    > = {
      create: {
        request: async () => {
          const answer = await expectOk("POST", "/projects", {
            name: `chaos-${round}`,
            allowlist: ["example.test"],
            idle_shutdown: false,
          });
          projectId = answer.body.project_id;
        },
        // A second POST would make another project: the failed one is started (its stack applied again).
        retry: () => expectOk("POST", `/projects/${projectId}/start`, {}),
        check: async () =>
          (await running(tenantNames(projectId).container)) === "true"
            ? []
            : ["created sandbox is not running"],
      },
      update: {
        before: () => writeHomeFile(projectId, files, `r${round}-update`),
        request: () => expectOk("PATCH", `/projects/${projectId}`, { allowlist: ["example.test", domain] }),
        // The same PATCH again changes nothing (the desired state has it): a start applies the stack again.
        retry: () => expectOk("POST", `/projects/${projectId}/start`, {}),
        check: async () => {
          const domains = await fs
            .readFile(path.join(squidPaths(host).fragmentsDir, `tenant-${projectId}.domains`), "utf8")
            .catch(() => "");
          return domains.split("\n").includes(domain) ? [] : [`allowlist ${domain} not applied`];
        },
      },
      stop: {
        before: () => writeHomeFile(projectId, files, `r${round}-stop`),
        request: () => expectOk("POST", `/projects/${projectId}/stop`, {}),
        check: async () =>
          (await running(tenantNames(projectId).container)) === "false" ? [] : ["sandbox not stopped"],
      },
      start: {
        request: () => expectOk("POST", `/projects/${projectId}/start`, {}),
        check: async () =>
          (await running(tenantNames(projectId).container)) === "true" ? [] : ["sandbox not running"],
      },
      snapshot: {
        before: async () => {
          await writeHomeFile(projectId, files, `r${round}-snapshot`);
          const marked = await execIn(
            tenantNames(projectId).container,
            `echo ${round} > /opt/chaos-snapshot`,
            "root",
          );
          if (marked.code !== 0) throw new Error(`marking the system state: ${marked.stderr}`);
        },
        request: () => expectOk("POST", `/projects/${projectId}/snapshot`, {}),
        check: async () => {
          const list = await expectOk("GET", `/projects/${projectId}/snapshots`);
          return list.body.snapshots.length > 0 ? [] : ["no snapshot listed"];
        },
      },
      restore: {
        before: async () => {
          await writeHomeFile(projectId, files, `r${round}-restore`);
          // Written after the snapshot, outside the home: the restore must take the system state back.
          const marked = await execIn(
            tenantNames(projectId).container,
            "touch /opt/chaos-after-snapshot",
            "root",
          );
          if (marked.code !== 0) throw new Error(`marking the system state: ${marked.stderr}`);
        },
        request: () => expectOk("POST", `/projects/${projectId}/restore`, {}),
        check: async () => {
          const container = tenantNames(projectId).container;
          if ((await running(container)) !== "true") return ["restored sandbox is not running"];
          const state = await execIn(container, "cat /opt/chaos-snapshot; ls /opt/chaos-after-snapshot 2>&1");
          const broken: string[] = [];
          if (state.stdout.split("\n")[0] !== String(round))
            broken.push(`snapshot's system file not back (${state.stdout})`);
          if (!state.stdout.includes("No such file"))
            broken.push("a file written after the snapshot survived the restore");
          return broken;
        },
      },
      fork: {
        before: async () => {
          await writeHomeFile(projectId, files, `r${round}-fork`);
          atFork = new Map(files);
        },
        killFromSend: true,
        request: () => expectOk("POST", `/projects/${projectId}/fork`, { count: FORKS }),
        operations: async () => {
          const { rows } = await chaos.db.query<{ id: string }>(
            `select distinct on (o.project_id) o.id from operations o join projects p on p.id = o.project_id
              where p.forked_from = $1 order by o.project_id, o.seq desc`,
            [projectId],
          );
          return rows.map((r) => r.id);
        },
        // A fork whose create failed is started, as a failed create is; none made: the fork is asked again.
        retry: async () => {
          const forks = await forksOf(chaos, projectId);
          if (forks.length === 0) return expectOk("POST", `/projects/${projectId}/fork`, { count: FORKS });
          for (const fork of forks) {
            const view = await expectOk("GET", `/projects/${fork}`);
            if (view.body.status === "error") await expectOk("POST", `/projects/${fork}/start`, {});
          }
          return undefined;
        },
        check: async () => {
          const broken: string[] = [];
          // The source was thawed: a write in its home goes through at once, not after the freeze's deadline.
          const write = await execIn(
            tenantNames(projectId).container,
            "timeout 10 sh -c 'echo thawed > chaos-thawed && sync' && echo written",
          );
          if (write.stdout !== "written") broken.push(`the source's home takes no write: ${write.stderr}`);
          const forks = await forksOf(chaos, projectId);
          if (forks.length !== FORKS) broken.push(`${forks.length} forks, not ${FORKS}: ${forks.join(", ")}`);
          for (const fork of forks) {
            if ((await running(tenantNames(fork).container)) !== "true")
              broken.push(`fork ${fork} is not running`);
            else broken.push(...(await lostOf(chaos, fork, atFork)).map((l) => `fork ${l}`));
            // Gone again before the source's delete, and nothing of it left.
            const deleted = await chaos.api("DELETE", `/projects/${fork}`);
            if (deleted.status !== 202) {
              broken.push(`DELETE fork ${fork}: ${deleted.status}`);
              continue;
            }
            const gone = await chaos.settled(await latestOperation(chaos, fork));
            if (gone.state !== "succeeded") broken.push(`fork ${fork}'s delete ${gone.state}: ${gone.error}`);
            broken.push(...(await tenantLeftovers(host, fork)).map((l) => `fork ${fork}: ${l} left`));
          }
          return broken;
        },
      },
      delete: {
        before: () => writeHomeFile(projectId, files, `r${round}-delete`),
        request: () => expectOk("DELETE", `/projects/${projectId}`),
        check: async () => {
          const view = await chaos.api("GET", `/projects/${projectId}`);
          return view.status === 404 ? [] : [`deleted project answers ${view.status}`];
        },
      },
    };

    for (const [j, kind] of CHAOS_KINDS.entries()) {
      const fault: Fault = options.only ?? FAULTS[(round + j) % FAULTS.length]!;
      const step = steps[kind];
      const started = performance.now();
      await step.before?.();
      // Answered (or, for a request the kill may cut off, still on its way: its answer is awaited after).
      let answered = !step.killFromSend;
      const answer = step.killFromSend
        ? step.request().then(
            () => ((answered = true), undefined),
            (error: Error) => ((answered = true), error),
          )
        : (await step.request(), Promise.resolve(undefined));
      const requested = performance.now();
      const operationsOf = step.operations ?? (async () => [await latestOperation(chaos, projectId)]);
      const known = step.killFromSend ? undefined : await operationsOf();
      const operations = async () => known ?? (await operationsOf());
      /** Whether the request is still unanswered, or an operation it queued is still pending or running. */
      const inFlightNow = async () => !answered || (await anyInFlight(chaos, await operations()));
      // An engine runs for a part of the operation only: its kill point counts from the engine's start.
      const killAfterMs = Math.round(rng() * (fault === "engine" ? ENGINE_WINDOW_MS : windows[kind]));
      const record: FaultRecord = {
        round,
        kind,
        fault,
        projectId,
        killAfterMs,
        duringOperation: false,
        outcome: "",
        attempts: 0,
        survived: false,
        orphans: [],
        lostFiles: [],
        broken: [],
        strays: [],
        seconds: 0,
        operationMs: 0,
      };
      // Sleep to the kill point, or until the operation has finished before it.
      const deadline =
        options.inject === false
          ? Number.POSITIVE_INFINITY
          : requested + (fault === "engine" ? 0 : killAfterMs);
      for (;;) {
        record.duringOperation = await inFlightNow();
        if (!record.duringOperation || performance.now() >= deadline) break;
        await sleep(Math.min(100, deadline - performance.now()));
      }
      let killedRuntime: { pid: number; command: string }[] = [];
      if (options.inject === false) {
        // no fault
      } else if (fault === "runtime") {
        record.killedPid = chaos.runtime.child.pid;
        killedRuntime = await chaos.killRuntime();
        await chaos.restartRuntime();
      } else {
        // The provider starts with the first engine after a runtime start, and an engine runs only during
        // a stack operation: while the operation is in flight, wait for one rather than kill nothing.
        const target = fault === "provider" ? () => chaos.providerPid() : () => chaos.enginePid();
        for (;;) {
          record.killedPid = target();
          if (record.killedPid || !record.duringOperation) break;
          await sleep(50);
          record.duringOperation = await inFlightNow();
        }
        if (record.killedPid && fault === "engine") {
          await sleep(killAfterMs);
          // The engine may have finished meanwhile: the operation's next one, if it runs one.
          if (!alive(record.killedPid)) record.killedPid = chaos.enginePid();
          record.duringOperation = await inFlightNow();
        }
        if (record.killedPid) process.kill(record.killedPid, "SIGKILL");
      }
      // A request the kill cut off made nothing (or its answer was lost): what it queued is looked for.
      const cutOff = await answer;
      const done = await settledAll(chaos, await operations(), cutOff);
      record.operationMs = Math.round(performance.now() - requested);
      record.outcome = done.state;
      record.attempts = done.attempt;
      let final = done;
      if (done.state !== "succeeded") {
        // As its user would: the request once more.
        await (step.retry ?? step.request)();
        final = await settledAll(
          chaos,
          step.operations ? await step.operations() : [await latestOperation(chaos, projectId)],
        );
        record.retried = final.state === "succeeded" ? "succeeded" : `${final.state}: ${final.error}`;
      }
      if (final.state === "succeeded") {
        record.broken.push(...(await step.check()));
        if (kind === "delete") {
          record.orphans.push(...(await tenantLeftovers(host, projectId)).map((l) => `${projectId}: ${l}`));
        } else {
          record.lostFiles.push(...(await lostOf(chaos, projectId, files)));
          const view = await expectOk("GET", `/projects/${projectId}`);
          const expected = kind === "stop" ? "stopped" : "running";
          if (view.body.status !== expected)
            record.broken.push(`project is ${view.body.status}, not ${expected}`);
        }
      } else record.broken.push(`${kind} did not succeed: ${final.error}`);
      record.orphans.push(
        ...(await chaos.orphans()).map((o) => `${o.kind} ${o.name} (project ${o.tenant}: ${o.why})`),
      );
      record.strays.push(
        ...killedRuntime.filter((p) => alive(p.pid)).map((p) => `${p.pid} ${p.command.slice(0, 160)}`),
      );
      record.survived =
        final.state === "succeeded" &&
        record.orphans.length === 0 &&
        record.lostFiles.length === 0 &&
        record.broken.length === 0;
      record.seconds = Math.round(performance.now() - started) / 1000;
      records.push(record);
      // An operation that finished before its kill point ran unfaulted: its duration is the kind's window
      // from now on (the first snapshot into a fresh registry pushes the base layers, later ones do not).
      if (!record.duringOperation && done.state === "succeeded")
        windows[kind] = Math.max(1000, record.operationMs);
      log(
        `round ${round} ${kind.padEnd(8)} kill ${fault.padEnd(8)} at ${String(killAfterMs).padStart(5)} ms` +
          ` (${record.duringOperation ? "during" : "after "})${record.killedPid ? "" : ` [no ${fault} running]`}:` +
          ` ${record.outcome}${record.retried ? `, retry ${record.retried}` : ""}, attempt ${record.attempts},` +
          ` orphans ${record.orphans.length}, lost ${record.lostFiles.length}, broken ${record.broken.length},` +
          ` strays ${record.strays.length}, ${record.seconds} s` +
          [...record.orphans, ...record.lostFiles, ...record.broken, ...record.strays]
            .map((l) => `\n    ${l}`)
            .join(""),
      );
      if (final.state !== "succeeded" && kind === "create") break; // nothing to go on with
    }
    roundSeconds.push(Math.round(performance.now() - roundStarted) / 1000);
  }

  const injected = records.filter((r) => r.killedPid !== undefined);
  const byKind: ChaosSummary["byKind"] = {};
  for (const r of injected) {
    const entry = (byKind[`${r.kind}/${r.fault}`] ??= { injected: 0, survived: 0, during: 0 });
    entry.injected += 1;
    if (r.survived) entry.survived += 1;
    if (r.duringOperation) entry.during += 1;
  }
  return {
    seed: options.seed,
    rounds: options.rounds,
    faultsInjected: injected.length,
    duringOperation: injected.filter((r) => r.duringOperation).length,
    survived: injected.filter((r) => r.survived).length,
    retriedByUser: records.filter((r) => r.retried !== undefined).length,
    orphansFound: records.reduce((n, r) => n + r.orphans.length, 0),
    lostFiles: records.reduce((n, r) => n + r.lostFiles.length, 0),
    brokenPromises: records.reduce((n, r) => n + r.broken.length, 0),
    strayProcesses: records.reduce((n, r) => n + r.strays.length, 0),
    byKind,
    roundSeconds,
    records,
  };
}

/**
 * One round with no fault: each operation's duration here (at least a second), the windows the kill
 * points are drawn from. Its records are checked like any other round's.
 */
export async function calibrateWindows(
  chaos: ChaosPlatform,
  seed: number,
): Promise<{ windowsMs: Record<ChaosKind, number>; round: ChaosSummary }> {
  const round = await runChaosLoop(chaos, { seed, rounds: 1, inject: false });
  const windowsMs = { ...DEFAULT_WINDOWS_MS };
  for (const r of round.records) windowsMs[r.kind] = Math.max(1000, r.operationMs);
  return { windowsMs, round };
}

/** The summary as the loop prints it. */
export function chaosSummaryText(summary: ChaosSummary): string {
  const lines = [
    `chaos: seed ${summary.seed}, ${summary.rounds} round(s): ${summary.faultsInjected} faults injected` +
      ` (${summary.duringOperation} during an operation), ${summary.survived} survived,` +
      ` ${summary.retriedByUser} operation(s) failed by the fault and repeated by the user,` +
      ` ${summary.orphansFound} orphans, ${summary.lostFiles} lost files, ${summary.brokenPromises} broken promises,` +
      ` ${summary.strayProcesses} stray processes`,
    ...Object.entries(summary.byKind).map(
      ([key, v]) => `  ${key.padEnd(18)} injected ${v.injected} (during ${v.during}), survived ${v.survived}`,
    ),
    `  seconds per round: ${summary.roundSeconds.join(", ")}`,
  ];
  return `${lines.join("\n")}\n`;
}
