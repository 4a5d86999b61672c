// The backend registry (runtime/backends/registry.ts): the one place that picks a project's backend, from
// the spec it is given or reads once. Backends of the test's own record what they were asked.
import { describe, expect, it } from "vitest";
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Database, Queryable } from "../../runtime/store/db.js";
import type { BackendKind, BackendTarget, SandboxBackend } from "../../runtime/backends/backend.js";
import { platformBackends, SandboxBackends } from "../../runtime/backends/registry.js";
import { backUpInside } from "../../runtime/backends/shared.js";
import { idleShutdownJob } from "../../runtime/jobs/idle.js";
import { InsideDevServers } from "../../runtime/sandbox/dev-servers.js";
import { SandboxNotRunningError } from "../../runtime/sandbox/exec.js";
import type { SandboxRunner } from "../../runtime/sandbox/runner.js";
import type { TerminalAttachment } from "../../runtime/terminal/attach.js";

/** The platform's backends, for what each is (their traits); nothing here reaches an engine. */
const platform = platformBackends({
  docker: () => {
    throw new Error("no engine here");
  },
});
const backendTraits = (kind: BackendKind | undefined) => platform.traits(kind);
const asked: string[] = [];
const recording = (kind: BackendKind): SandboxBackend => ({
  kind,
  traits: backendTraits(kind),
  admit: () => ({ backend: kind }),
  program: async () => async () => ({}),
  runner: async ({ projectId, spec }: BackendTarget) => {
    asked.push(`${kind} runner ${projectId} ${spec?.backend ?? "-"}`);
    return { kind } as unknown as SandboxRunner;
  },
  attach: async ({ projectId }: BackendTarget, session: string) => {
    asked.push(`${kind} attach ${projectId} ${session}`);
    return { kind } as unknown as TerminalAttachment;
  },
  finalBackup: async (_db, spec) => {
    asked.push(`${kind} final backup ${spec.projectId}`);
    return "ok";
  },
  beforeRestart: async () => undefined,
  sshSessions: async () => 0,
  diedAt: async () => undefined,
  prepareImage: async () => undefined,
});
const registry = () =>
  new SandboxBackends([recording("container"), recording("microvm"), recording("kubernetes")]);

/** A database holding one tenant row per project, counting its queries. */
function tenants(specs: Record<string, Partial<TenantSpec>>) {
  const queries: string[] = [];
  const db: Queryable = {
    async query<Row>(sql: string, params?: unknown[]) {
      queries.push(sql);
      const spec = specs[params?.[0] as string];
      return { rows: (spec ? [{ project_id: params?.[0], spec }] : []) as Row[] };
    },
  };
  return { db, queries };
}

describe("the backend registry", () => {
  it("picks the backend the recorded spec names; an absent backend, or no spec yet, is a container", async () => {
    asked.length = 0;
    const backends = registry();
    const spec = (backend?: BackendKind) => ({ projectId: "p", backend }) as TenantSpec;
    expect(backends.of(spec("microvm")).kind).toBe("microvm");
    expect(backends.of(spec("kubernetes")).kind).toBe("kubernetes");
    expect(backends.of(spec("container")).kind).toBe("container");
    expect(backends.of(spec()).kind).toBe("container");
    expect(backends.of(undefined).kind).toBe("container");
    await backends.runner({ projectId: "p", spec: spec("microvm") });
    expect(asked).toEqual(["microvm runner p microvm"]);
  });

  it("reads a project's spec once for its runner or terminal, and passes it on", async () => {
    asked.length = 0;
    const { db, queries } = tenants({ vm: { backend: "microvm" }, pod: { backend: "kubernetes" }, old: {} });
    const backends = registry();
    await backends.runners(db)("vm");
    await backends.runners(db)("pod");
    await backends.runners(db)("old");
    await backends.runners(db)("creating");
    expect(queries).toHaveLength(4);
    await backends.attacher(db).attach("vm");
    await backends.attacher(db).attach("pod", "second");
    expect(queries).toHaveLength(6);
    expect(asked).toEqual([
      "microvm runner vm microvm",
      "kubernetes runner pod kubernetes",
      "container runner old -",
      "container runner creating -",
      "microvm attach vm main",
      "kubernetes attach pod second",
    ]);
  });

  it("refuses, naming why, a kubernetes project where no cluster is configured, and a microVM while the host is probed", async () => {
    const none = platformBackends({
      docker: () => {
        throw new Error("no engine here");
      },
      microvm: () => undefined,
    });
    const target = (backend: BackendKind) => ({
      projectId: "p1",
      spec: { projectId: "p1", backend, subnet: "10.0.0.0/24" } as TenantSpec,
    });
    await expect(none.runner(target("kubernetes"))).rejects.toThrow(
      "project p1 runs on a kubernetes cluster, and this runtime has none configured",
    );
    await expect(none.runner(target("microvm"))).rejects.toThrow(
      "this runtime cannot reach microVMs (still probing the host; try again in seconds)",
    );
    const unavailable = platformBackends({
      docker: () => {
        throw new Error("no engine here");
      },
      microvm: () => ({ available: false, reason: "no KVM and no QEMU" }),
    });
    await expect(
      unavailable.attacher(tenants({ p1: target("microvm").spec }).db).attach("p1"),
    ).rejects.toThrow("this runtime cannot reach microVMs (no KVM and no QEMU)");
  });
});

describe("the dev servers of a sandbox whose kernel is not the host's (a microVM's, a Pod's)", () => {
  const noEngine = () => {
    throw new Error("no engine here");
  };

  it("a kubernetes project's are looked for only where its Pod admits the front door", async () => {
    const backends = platformBackends({ docker: noEngine });
    const pod = (kubernetes: Record<string, unknown>) =>
      ({ backend: "kubernetes", kubernetes: { runtimeClassName: "gvisor", ...kubernetes } }) as TenantSpec;
    const { db } = tenants({
      closed: pod({}),
      open: pod({ frontDoorFrom: ["10.128.0.2/32"] }),
    });
    // null: the API's 409 naming frontDoorFrom; undefined: looked for, and not running (no cluster here).
    expect(await backends.devServers(db)("closed")).toBeNull();
    expect(await backends.devServers(db)("open")).toBeUndefined();
  });

  /** A runner printing `output` for the sockets' script, counting its runs; `exit` its exit code. */
  function inside(output: string | (() => Promise<never>), exit = 0) {
    const runs = { count: 0 };
    const runner = {
      run: async (argv: readonly string[]) => {
        runs.count += 1;
        expect(argv.slice(0, 2)).toEqual(["sh", "-c"]);
        if (typeof output === "function") return output();
        return { exitCode: exit, stdout: output, stderr: exit ? "find: not found" : "" };
      },
    } as SandboxRunner;
    return { runs, runner };
  }
  const LISTENING =
    "@tcp\n  sl  local_address rem_address   st\n   0: 00000000:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 77 1\n@tcp6\n@fd\n@cwd\n";

  it("reads once for concurrent askers and within maxAgeMs, with the address it was given", async () => {
    const { runs, runner } = inside(LISTENING);
    const servers = new InsideDevServers(
      async () => runner,
      async () => "10.196.0.9",
    );
    const target = { projectId: "p" };
    const [a, b] = await Promise.all([servers.found(target), servers.found(target, 1_000)]);
    expect(a).toEqual([{ port: 3000, address: "0.0.0.0", host: "10.196.0.9" }]);
    expect(b).toBe(a);
    expect(runs.count).toBe(1);
    await servers.found(target, 60_000);
    expect(runs.count).toBe(1);
    await servers.found(target);
    expect(runs.count).toBe(2);
  });

  it("a sandbox not running is undefined and not kept; a Pod without an address yet is not running; a failed read says why", async () => {
    let running = false;
    const stopped = new InsideDevServers(async ({ projectId }: { projectId: string }) => {
      if (!running) throw new SandboxNotRunningError(projectId);
      return inside(LISTENING).runner;
    });
    expect(await stopped.found({ projectId: "p" }, 60_000)).toBeUndefined();
    running = true;
    expect(await stopped.found({ projectId: "p" }, 60_000)).toHaveLength(1);

    const between = new InsideDevServers(
      async () => inside(LISTENING).runner,
      async () => undefined,
    );
    expect(await between.found({ projectId: "p" })).toBeUndefined();

    const broken = new InsideDevServers(async () => inside("", 127).runner);
    await expect(broken.found({ projectId: "p" })).rejects.toThrow(
      "reading the sandbox's sockets failed (127): find: not found",
    );
  });
});

/** A runner whose backup daemon answers `once` with `exitCode` (and `stderr`) and `status` with `status`. */
function daemon(exitCode: number, stderr: string, status: string | Error): SandboxRunner {
  return {
    run: async (argv: readonly string[]) => {
      if (argv[1] === "once") return { exitCode, stdout: "", stderr };
      if (status instanceof Error) throw status;
      return { exitCode: 0, stdout: status, stderr: "" };
    },
  } as SandboxRunner;
}

/** A database recording the last_backup written per statement. */
function backupRecords() {
  const written: string[] = [];
  const db = {
    async query(_sql: string, params?: unknown[]) {
      written.push(String(params?.[1]));
      return { rows: [] };
    },
  } as unknown as Database;
  return { db, written };
}

describe("the final backup of a sandbox whose daemon runs inside it (a container's, a microVM's)", () => {
  const spec = { projectId: "p2" } as TenantSpec;

  it("says ok and records what the daemon says of its backups", async () => {
    const { db, written } = backupRecords();
    const outcome = await backUpInside(db, spec, 30, async () =>
      daemon(0, "", JSON.stringify({ state: "idle", last_result: "ok" })),
    );
    expect(outcome).toBe("ok");
    expect(written.map((w) => JSON.parse(w))).toEqual([{ state: "idle", last_result: "ok", usage: null }]);
  });

  it("says why it failed: the daemon's last line, or its own sync holding the lock past the deadline", async () => {
    const { db } = backupRecords();
    const status = JSON.stringify({ last_error: "remote full" });
    expect(await backUpInside(db, spec, 30, async () => daemon(1, "x\nrclone: quota\n", status))).toBe(
      "failed: rclone: quota",
    );
    expect(await backUpInside(db, spec, 30, async () => daemon(75, "", status))).toBe(
      "failed: another backup (the daemon's) was still running at the deadline",
    );
    expect(await backUpInside(db, spec, 30, async () => daemon(1, "", status))).toBe("failed: remote full");
  });

  it("skips a sandbox that is not running, and logs a status it could not read after a backup that worked", async () => {
    const { db, written } = backupRecords();
    const down = async (): Promise<SandboxRunner> => {
      throw new SandboxNotRunningError("sandbox-p2");
    };
    expect(await backUpInside(db, spec, 30, down)).toBe("skipped: the sandbox is not running");
    expect(written).toEqual([]);
    const logged: unknown[] = [];
    const slow = daemon(0, "", new Error("timed out"));
    expect(
      await backUpInside(
        db,
        spec,
        30,
        async () => slow,
        (m, f) => logged.push([m, f]),
      ),
    ).toBe("ok");
    expect(JSON.parse(written[0]!)).toMatchObject({ last_result: "ok", last_trigger: "once" });
    expect(logged).toEqual([
      ["backup status unreadable after the final backup", { project: "p2", error: "timed out" }],
    ]);
  });
});

describe("what each backend is", () => {
  const backends = platformBackends({
    docker: () => {
      throw new Error("no engine here");
    },
  });
  const spec = (backend: BackendKind) => ({ projectId: "p3", backend, image: "img" }) as TenantSpec;

  it("a Pod keeps no snapshots and is backed up from outside; a container and a microVM keep both, their daemon inside", () => {
    expect(backends.of(spec("kubernetes")).snapshots).toBeUndefined();
    expect(backendTraits("kubernetes")).toEqual({
      sandboxNoun: "Pod",
      snapshots: false,
      backupDaemonInside: false,
      tokenCopiedIn: false,
      warmPool: false,
    });
    for (const kind of ["container", "microvm"] as const) {
      expect(backends.of(spec(kind)).snapshots).toBeDefined();
      expect(backendTraits(kind)).toMatchObject({ snapshots: true, backupDaemonInside: true });
    }
    expect(backendTraits(undefined).sandboxNoun).toBe("container");
    // Only containers are pooled: a microVM boots from its own disks, a Pod is the cluster's to schedule.
    expect(
      (["container", "microvm", "kubernetes"] as const).filter((k) => backendTraits(k).warmPool),
    ).toEqual(["container"]);
  });

  it("a snapshot without the platform's snapshot options fails naming them; a kubernetes backup without its taker is skipped", async () => {
    const { db } = backupRecords();
    await expect(backends.of(spec("container")).snapshots!.take(db, spec("container"))).rejects.toThrow(
      "this reconciler has no snapshot registry configured",
    );
    await expect(backends.of(spec("microvm")).snapshots!.take(db, spec("microvm"))).rejects.toThrow(
      "this reconciler has no snapshot registry configured",
    );
    expect(await backends.of(spec("container")).snapshots!.deleteAll(db, spec("container"))).toEqual([]);
    expect(await backends.of(spec("kubernetes")).finalBackup(db, spec("kubernetes"), 30)).toBe(
      "skipped: this reconciler takes no kubernetes backups",
    );
  });
});

describe("the idle shutdown, across backends", () => {
  it("asks the snapshot-and-stop of an idle container, and leaves a backend that keeps no snapshots running", async () => {
    const idle = new Date(0);
    const candidates = [
      { id: "pod", last_active: idle, spec: { projectId: "pod", backend: "kubernetes" } },
      { id: "box", last_active: idle, spec: { projectId: "box" } },
    ];
    const requested: number[] = [];
    const db = {
      query: async () => ({ rows: candidates }),
      // requestOperation's transaction: one per project asked to snapshot and stop.
      transaction: async () => {
        requested.push(1);
        return { operation: {}, created: true };
      },
    } as unknown as Database;
    const job = idleShutdownJob(db, {
      idleMinutes: 1,
      intervalMs: 60_000,
      liveTerminal: () => false,
      backends: registry(),
    });
    expect(await job.run()).toEqual({ checked: 2, stopped: ["box"] });
    expect(requested).toHaveLength(1);
  });
});
