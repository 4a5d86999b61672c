import { randomUUID } from "node:crypto";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import { generateSshKeyPair } from "../../lib/ssh-keygen.js";
import type { Database, Queryable } from "../db.js";
import type { BackendKind } from "../backends/backend.js";
import { backendKinds, type SandboxBackends } from "../backends/registry.js";
import { HttpError } from "../errors.js";
import { type Operation } from "../operations.js";
import type { SecretBox } from "../secrets.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import type { SandboxRunners } from "../sandbox/runner.js";
import { readBackupStatus, recordBackupStatus, type BackupStatus } from "../sandbox/backup.js";
import { listSnapshots } from "../tenants/snapshots.js";
import { getDrift, type DriftStatus } from "../tenants/drift.js";
import type Docker from "dockerode";
import type { TicketIssuer } from "../terminal/tickets.js";
import type { WarmPool } from "../tenants/pool.js";
import {
  requestCreateIn,
  requestOperation,
  requestSettingsChange,
  TenantRequestError,
  type TenantDefaults,
  type TenantState,
} from "../tenants/service.js";
import { PLATFORM_BACKENDS, type TenantSpec } from "../../components/tenant/spec.js";
import { PROJECT, type RateLimit } from "../../stacks/config.js";
import type { Auth } from "./auth.js";
import { RateLimiter } from "./rate-limit.js";
import { PROJECT_STATUSES, type BackupStatusBody, type ProjectBody, type SandboxView } from "./responses.js";
import { chars, parseInput } from "./validation.js";
import { frontDoorRoutes } from "../../lib/front-door.js";
import { Allowlist, FrontDoorPorts, PatchProjectBody, settingsChange } from "./project-settings.js";

export interface ProjectRoutesOptions {
  readonly db: Database;
  readonly auth: Auth;
  readonly defaults: TenantDefaults;
  readonly secrets: SecretBox;
  /** The address clients use for SSH (the host's public name or IP). */
  readonly publicHost: string;
  /** The engine the sandboxes run on (an image a PATCH names must be on it). */
  readonly docker: Docker;
  /** Each project's sandbox by its backend (backup-status asks the sandbox's backup daemon). */
  readonly sandboxes: SandboxRunners;
  /** Where `terminal_url` points (`ws://host:9000/terminal`) and who signs its tickets. */
  readonly terminal?: { readonly urlBase: string; readonly tickets: TicketIssuer };
  /** Live projects per user (`agent-sandbox:runtime.projectQuota`). */
  readonly quota: number;
  /** Creates per user (`agent-sandbox:runtime.rateLimits.createProject`). */
  readonly createRate: RateLimit;
  /**
   * How long a create waits for its sandbox to run before answering 202
   * (`agent-sandbox:runtime.createWaitSeconds`, which runtime/main.ts passes); absent or 0: at once.
   */
  readonly createWaitSeconds?: number;
  /** The warm pool a create claims from first (absent: every create is cold). */
  readonly pool?: WarmPool;
  /**
   * Each project's backend (runtime/backends/): what it is, what a create of it adds to the spec, and its
   * live sandbox where it observes one (a Pod as the cluster has it now).
   */
  readonly backends: SandboxBackends;
}

/** How long one project's view waits for the cluster before it answers without the Pod's state. */
const OBSERVE_TIMEOUT_MS = 3_000;

// Patterns rather than refinements, so that the OpenAPI document says exactly what is accepted.
const ProjectName = chars(1, 100)
  // Not blank: a character that String.prototype.trim keeps, spelt out (`\S` differs between dialects).
  .regex(/[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]/, {
    message: "must not be blank",
  })
  // \p{Cc}, spelt out: a document's pattern has no flags.
  .regex(/^[^\u0000-\u001f\u007f-\u009f]*$/, { message: "must not contain control characters" })
  .transform((name) => name.trim());

/** A create's body, its `backend` one of `kinds` (the registry's: the OpenAPI document lists them). */
export function createProjectBody(kinds: readonly [string, ...string[]]) {
  return z
    .object({
      name: ProjectName,
      // The same rules the tenant's Squid allowlist applies, checked before anything is recorded.
      allowlist: Allowlist.optional(),
      /** Snapshot and stop the sandbox when nobody has used it for `tenants.idleMinutes` (default true). */
      idle_shutdown: z.boolean().optional(),
      /** Dev-server ports reachable through the front door (as PATCH takes them). */
      ports: FrontDoorPorts.optional(),
      /**
       * Where the sandbox runs: `container` (shares the host's kernel), `microvm` (a QEMU microVM with its
       * own kernel) or `kubernetes` (a Pod on the platform's cluster, where configured), or a backend the
       * runtime registered; the platform's `tenants.backend` when absent.
       */
      backend: z.enum(kinds).optional(),
    })
    .strict();
}
/** The create's body with the platform's backends. */
export const CreateProjectBody = createProjectBody(PLATFORM_BACKENDS);
export const ProjectParams = z.object({ id: z.uuid({ message: "must be a project id (UUID)" }) }).strict();
/** Start, stop and delete take no input: a body, if any, is empty JSON (`{}`, or nothing at all). */
export const EmptyBody = z.object({}).strict().optional();
export const SnapshotBody = z
  .object({
    /** Stop the sandbox once the snapshot is pushed (what an idle shutdown does). */
    stop: z.boolean().default(false),
  })
  .strict()
  .default({ stop: false });
export const SnapshotTag = z
  .string()
  .regex(/^[0-9]{8}-[0-9]{6}-[0-9]{3}$/, { message: "must be a snapshot tag such as 20261122-031502-123" })
  .meta({ examples: ["20261122-031502-123"] });
export const RestoreBody = z
  .object({
    /** The snapshot to restore; the newest when absent (the base image when there is none). */
    snapshot: SnapshotTag.optional(),
  })
  .strict()
  .default({});
/**
 * RFC 7240 preferences a create honours: `respond-async` (answer 202 at once) and `wait=<seconds>` (wait at
 * most that long, never longer than configured). Others are ignored, as the RFC asks.
 */
export const PreferHeader = z
  .string()
  .meta({
    description:
      "`respond-async`: answer 202 at once; `wait=<seconds>`: wait at most that long for the sandbox (up to agent-sandbox:runtime.createWaitSeconds)",
    examples: ["respond-async", "wait=10"],
  })
  .optional();

/** How long a create may wait (ms) given the request's `Prefer` header, and the preference applied. */
export function createWaitOf(
  prefer: string | string[] | undefined,
  configuredSeconds: number,
): { ms: number; applied?: string } {
  const preferences = [prefer ?? []]
    .flat()
    .flatMap((header) => header.split(","))
    .map((preference) => preference.split(";")[0]!.trim().toLowerCase());
  if (preferences.includes("respond-async")) return { ms: 0, applied: "respond-async" };
  const wait = preferences.map((p) => /^wait=(\d{1,9})$/.exec(p)?.[1]).find((v) => v !== undefined);
  if (wait === undefined) return { ms: configuredSeconds * 1000 };
  const seconds = Math.min(Number(wait), configuredSeconds);
  return { ms: seconds * 1000, applied: `wait=${seconds}` };
}

/** Operation states after which nothing more happens to it. */
const FINISHED = new Set<Operation["state"]>(["succeeded", "failed", "cancelled"]);
/** How often a waiting create looks at its operation (one indexed read). */
const CREATE_POLL_MS = 200;

export const IdempotencyKey = z
  .string()
  .regex(/^[A-Za-z0-9_.:-]{1,200}$/, { message: "must be 1-200 characters of [A-Za-z0-9_.:-]" })
  .meta({ examples: ["create-20261122-1"] })
  .optional();

/** Seed 000's project states; a tenant being reconfigured shows the state it is heading for. */
export type ProjectStatus = (typeof PROJECT_STATUSES)[number];

export function projectStatus(state: TenantState, spec: Pick<TenantSpec, "running">): ProjectStatus {
  switch (state) {
    case "creating":
    case "running":
    case "stopped":
    case "snapshotting":
    case "restoring":
    case "error":
      return state;
    case "updating":
      return spec.running ? "running" : "stopped";
    case "deleting":
    case "deleted":
      return "deleting";
    default: {
      const never: never = state;
      throw new Error(`unknown tenant state ${String(never)}`);
    }
  }
}

interface ProjectRow {
  id: string;
  name: string;
  created_at: Date;
  state: TenantState;
  /** The desired state's `running` (the whole spec is not read: a listing reads only what it shows). */
  running: boolean;
  /** The desired state's front-door ports (absent in specs recorded before them). */
  ports: { port: number; name?: string }[] | null;
  ssh_port: number | null;
  backend: BackendKind;
  /** A microVM's accelerator (kvm or tcg), as the host's probe decided at its create. */
  accelerator: "kvm" | "tcg" | null;
  last_error: string | null;
  last_backup_at: string | null;
  idle_shutdown: boolean;
  drift_status: DriftStatus | null;
  drift_checked_at: Date | null;
  drift_stalled: boolean | null;
  drift_resources: number | null;
  op_id: string | null;
  op_kind: Operation["kind"] | null;
  op_state: Operation["state"] | null;
  op_error: string | null;
  op_events: number | null;
  op_last: Record<string, unknown> | null;
  snapshot_tag: string | null;
  snapshot_at: Date | null;
  ssh_host_key: string | null;
}

// One query per request whatever the number of projects: each one's newest operation (its progress) and
// newest snapshot come from lateral joins, on indexes (operations_project_newest, snapshots_newest).
const PROJECT_QUERY = `
  select p.id, p.name, p.created_at, p.idle_shutdown, t.state,
         d.status as drift_status, d.checked_at as drift_checked_at, d.stalled as drift_stalled,
         jsonb_array_length(d.resources) as drift_resources, (t.spec->>'running')::boolean as running,
         coalesce(t.spec->>'backend', 'container') as backend, t.spec->'microvm'->>'accelerator' as accelerator, t.spec->'ports' as ports, t.ssh_port, t.last_error,
         t.last_backup->>'last_success_at' as last_backup_at,
         o.id as op_id, o.kind as op_kind, o.state as op_state, o.error as op_error,
         (select count(*)::int from operation_events e where e.operation_id = o.id) as op_events,
         (select e.event from operation_events e where e.operation_id = o.id order by e.seq desc limit 1) as op_last,
         s.tag as snapshot_tag, s.created_at as snapshot_at, k.public_key as ssh_host_key
    from projects p join tenants t on t.project_id = p.id
    left join project_drift d on d.project_id = p.id
    left join ssh_gateway_host_keys k on k.project_id = p.id
    left join lateral (select * from operations o where o.project_id = p.id order by o.seq desc limit 1) o on true
    left join lateral (select tag, created_at from snapshots s where s.project_id = p.id
                        order by created_at desc, tag desc limit 1) s on true`;

interface Caller {
  readonly userId: string;
  readonly origin?: string;
}

const caller = (request: FastifyRequest, userId: string): Caller => ({
  userId,
  origin: typeof request.headers.origin === "string" ? request.headers.origin : undefined,
});

/** One of the caller's live projects; another user's project is indistinguishable from none (404). */
export async function ownProject(db: Queryable, userId: string, id: string): Promise<ProjectRow> {
  const { rows } = await db.query<ProjectRow>(
    `${PROJECT_QUERY} where p.id = $1 and p.user_id = $2 and t.state <> 'deleted'`,
    [id, userId],
  );
  if (!rows[0]) throw new HttpError(404, "not_found", "project not found");
  return rows[0];
}

/** The user's projects that hold a subnet and an SSH port: every one not yet deleted. */
async function liveProjects(db: Queryable, userId: string): Promise<number> {
  const { rows } = await db.query<{ count: number }>(
    `select count(*)::int as count from projects p join tenants t on t.project_id = p.id
      where p.user_id = $1 and t.state <> 'deleted'`,
    [userId],
  );
  return rows[0]?.count ?? 0;
}

export function registerProjectRoutes(app: FastifyInstance, options: ProjectRoutesOptions): void {
  const { db, auth, secrets } = options;
  const quotaKey = `${PROJECT}:runtime.projectQuota`;
  const quotaExceeded = () =>
    new HttpError(
      403,
      "quota_exceeded",
      `project quota reached: at most ${options.quota} projects per user (${quotaKey} is ${options.quota}); delete one to create another`,
      { quota: options.quota, config_key: quotaKey },
    );
  const createLimiter = new RateLimiter(
    db,
    "createProject",
    options.createRate,
    `${PROJECT}:runtime.rateLimits.createProject`,
    "project creations",
  );

  /**
   * A running project's `terminal_url` carries a fresh single-use ticket (≤ 60 s) bound to the caller,
   * the project and the request's Origin; fetch the project again to reconnect.
   */
  const terminalUrl = (row: ProjectRow, userId: string, origin: string | undefined) =>
    options.terminal && row.state === "running"
      ? `${options.terminal.urlBase}/${row.id}?token=${options.terminal.tickets.issue(userId, row.id, origin)}`
      : null;

  const frontDoor = options.defaults.host?.frontDoor;
  const frontDoorUrls = (row: ProjectRow) =>
    frontDoor
      ? frontDoorRoutes(row.id, row.ports ?? [], frontDoor.port, frontDoor.domain, frontDoor.tls).map(
          ({ port, name, url }) => ({ name: name ?? null, port, url }),
        )
      : [];

  const view = (row: ProjectRow, caller: Caller, privateKey?: string): ProjectBody => ({
    project_id: row.id,
    name: row.name,
    status: projectStatus(row.state, row),
    error: row.state === "error" ? row.last_error : null,
    created_at: row.created_at.toISOString(),
    backend: row.backend,
    accelerator: row.accelerator,
    ssh: {
      host: options.publicHost,
      port: row.ssh_port,
      user: "agent",
      ...(privateKey === undefined ? {} : { private_key: privateKey }),
      ...(row.ssh_host_key ? { host_key: row.ssh_host_key } : {}),
    },
    // The terminal proxy (its own issue) issues single-use tickets for this URL.
    terminal_url: terminalUrl(row, caller.userId, caller.origin),
    operation:
      row.op_id && row.op_kind && row.op_state
        ? {
            id: row.op_id,
            kind: row.op_kind,
            state: row.op_state,
            error: row.op_error,
            progress: { events: row.op_events ?? 0, last: row.op_last },
          }
        : null,
    last_snapshot:
      row.snapshot_tag && row.snapshot_at
        ? { tag: row.snapshot_tag, created_at: row.snapshot_at.toISOString() }
        : null,
    last_backup_at: row.last_backup_at,
    idle_shutdown: row.idle_shutdown,
    drift:
      row.drift_status && row.drift_checked_at
        ? {
            status: row.drift_status,
            checked_at: row.drift_checked_at.toISOString(),
            resources: row.drift_resources ?? 0,
            stalled: row.drift_stalled ?? false,
          }
        : null,
    front_door: frontDoorUrls(row),
  });

  const tenantError = (error: unknown): never => {
    if (error instanceof TenantRequestError) {
      throw new HttpError(
        error.status,
        error.status === 404 ? "not_found" : error.status === 409 ? "conflict" : "validation_failed",
        error.message,
      );
    }
    throw error;
  };

  app.get("/projects", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { rows } = await db.query<ProjectRow>(
      `${PROJECT_QUERY} where p.user_id = $1 and t.state <> 'deleted' order by p.created_at, p.id`,
      [userId],
    );
    return { projects: rows.map((row) => view(row, caller(request, userId))) };
  });

  // A waiting create answers 202 at once when the server is closing, rather than hold its shutdown.
  let closing = false;
  app.addHook("preClose", async () => {
    closing = true;
  });

  /**
   * Waits until the project's create operation has finished, `ms` have passed, the client has hung up or
   * the server is closing, whichever comes first.
   */
  const createSettled = async (request: FastifyRequest, projectId: string, ms: number): Promise<void> => {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline && !closing && !request.raw.socket?.destroyed) {
      const { rows } = await db.query<{ state: TenantState; op_state: Operation["state"] | null }>(
        `select t.state, (select o.state from operations o where o.project_id = t.project_id and o.kind = 'create'
                            order by o.seq desc limit 1) as op_state
           from tenants t where t.project_id = $1`,
        [projectId],
      );
      const row = rows[0];
      if (!row || row.state === "deleting" || row.state === "deleted" || !row.op_state) return;
      if (FINISHED.has(row.op_state)) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(CREATE_POLL_MS, deadline - Date.now())));
    }
  };

  /** The create an Idempotency-Key already made, once settled as a first request would be (200). */
  const repeatedCreate = async (
    request: FastifyRequest,
    userId: string,
    scopedKey: string,
    waitMs: number,
  ): Promise<{ body: ProjectBody } | undefined> => {
    const { rows } = await db.query<{ project_id: string }>(
      "select project_id from operations where idempotency_key = $1",
      [scopedKey],
    );
    if (!rows[0]) return undefined;
    const projectId = (await ownProject(db, userId, rows[0].project_id)).id;
    await createSettled(request, projectId, waitMs);
    const { rows: keys } = await db.query<{ ssh_private_key: string }>(
      "select ssh_private_key from projects where id = $1",
      [projectId],
    );
    const existing = await ownProject(db, userId, projectId);
    return { body: view(existing, caller(request, userId), secrets.open(keys[0]!.ssh_private_key)) };
  };

  // Checks before work: the input, the quota and the rate are settled before ssh-keygen runs or anything
  // is allocated, and the quota once more under the allocation lock, where no other create can interleave.
  // Then the answer waits for the sandbox (runtime.createWaitSeconds, or less by `Prefer`): 201 with seed
  // 000's shape (`running`, `ssh`, `terminal_url`) when it runs by then, 202 to follow otherwise.
  const createBody = createProjectBody(backendKinds(options.backends));
  app.post("/projects", async (request, reply) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const body = parseInput(createBody, request.body, "body");
    // As an object, so that a refusal names the header.
    const { "idempotency-key": key } = parseInput(
      z.object({ "idempotency-key": IdempotencyKey }),
      { "idempotency-key": request.headers["idempotency-key"] },
      "headers",
    );
    const wait = createWaitOf(request.headers.prefer, options.createWaitSeconds ?? 0);
    if (wait.applied) void reply.header("preference-applied", wait.applied);
    const scopedKey = key ? `${userId}:create:${key}` : undefined;
    if (scopedKey) {
      const repeat = await repeatedCreate(request, userId, scopedKey, wait.ms);
      if (repeat) return reply.status(200).send(repeat.body);
    }
    if ((await liveProjects(db, userId)) >= options.quota) throw quotaExceeded();
    await createLimiter.take(userId);
    let projectId: string = randomUUID();
    const keys = await generateSshKeyPair(`agent@${projectId}`);
    const created = await db
      .transaction(async (tx) => {
        // A ready member of the warm pool (runtime/tenants/pool.ts), made the caller's in this transaction;
        // without one, a cold create, which takes the allocation lock until commit: one at a time from here.
        const backend = body.backend ?? options.defaults.backend;
        // Before anything is allocated: a backend this platform cannot run now is refused naming why.
        const backendFields = options.backends.admit(backend, options.defaults);
        const claimed = await (options.backends.traits(backend).warmPool ? options.pool : undefined)?.claim(
          tx,
          {
            ownerId: userId,
            sshPublicKey: keys.publicKey,
            allowlist: body.allowlist,
            ports: body.ports,
            idempotencyKey: scopedKey,
          },
        );
        if (claimed) projectId = claimed;
        else
          await requestCreateIn(tx, options.defaults, {
            projectId,
            ownerId: userId,
            allowlist: body.allowlist,
            ports: body.ports,
            sshPublicKey: keys.publicKey,
            idempotencyKey: scopedKey,
            backendFields,
          });
        await tx.query(
          "insert into projects (id, user_id, name, ssh_private_key, idle_shutdown) values ($1, $2, $3, $4, $5)",
          [projectId, userId, body.name, secrets.seal(keys.privateKey), body.idle_shutdown ?? true],
        );
        if ((await liveProjects(tx, userId)) > options.quota) throw quotaExceeded();
        return true as const;
      })
      .catch(async (error: unknown) => {
        // The same key sent twice at once: both looked before either had committed, and the other one
        // recorded its create first (this one then fails on the key, or on the lock): this is its repeat.
        const repeat = scopedKey ? await repeatedCreate(request, userId, scopedKey, wait.ms) : undefined;
        return repeat ?? tenantError(error);
      });
    if (created !== true) return reply.status(200).send(created.body);
    await createSettled(request, projectId, wait.ms);
    const project = view(await ownProject(db, userId, projectId), caller(request, userId), keys.privateKey);
    return reply.status(project.status === "running" ? 201 : 202).send(project);
  });

  app.get("/projects/:id", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    const row = await ownProject(db, userId, id);
    const body = view(row, caller(request, userId));
    // The live sandbox where its backend observes one (a Pod: the stack being applied does not say it was
    // scheduled, pulled its image or passed its readiness probe). One that does not answer in time is unknown.
    const observing = options.backends.observe(id, row.backend);
    if (!observing) return body;
    const observed = await Promise.race([
      observing.catch((error: Error) => ({ phase: "unknown" as const, message: error.message })),
      new Promise<SandboxView>((resolve) =>
        setTimeout(
          () =>
            resolve({
              phase: "unknown",
              message: `the cluster did not answer within ${OBSERVE_TIMEOUT_MS} ms`,
            }),
          OBSERVE_TIMEOUT_MS,
        ).unref(),
      ),
    ]);
    return { ...body, sandbox: observed };
  });

  // Live settings: stack settings are one `update` of the tenant's stack (202 with it in `operation`);
  // project settings alone (idle shutdown, drift remediation) change nothing on the stack (200).
  app.patch("/projects/:id", async (request, reply) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    const body = parseInput(PatchProjectBody, request.body, "body");
    await ownProject(db, userId, id);
    if (body.image) {
      const found = await options.docker
        .getImage(body.image)
        .inspect()
        .then(() => true)
        .catch((error: { statusCode?: number }) => {
          if (error.statusCode === 404) return false;
          throw error;
        });
      // A well-formed reference to an image that is not there is a fact about the engine, not bad input.
      if (!found)
        throw new HttpError(
          409,
          "image_not_found",
          `image: ${body.image} is not on the engine (build one with npm run image:repo)`,
          { field: "image", image: body.image },
        );
    }
    const change = settingsChange(body);
    const queued = change ? await requestSettingsChange(db, id, change).catch(tenantError) : undefined;
    if (body.idle_shutdown !== undefined || body.drift_remediation !== undefined)
      await db.query(
        `update projects set idle_shutdown = coalesce($2, idle_shutdown),
           drift_remediation = case when $3 then $4 else drift_remediation end where id = $1`,
        [
          id,
          body.idle_shutdown ?? null,
          body.drift_remediation !== undefined,
          body.drift_remediation ?? null,
        ],
      );
    return reply
      .status(queued?.operation ? 202 : 200)
      .send(view(await ownProject(db, userId, id), caller(request, userId)));
  });

  for (const kind of ["start", "stop"] as const) {
    app.post(`/projects/:id/${kind}`, async (request, reply) => {
      const userId = await auth.authenticate(request.headers.authorization);
      const { id } = parseInput(ProjectParams, request.params, "params");
      parseInput(EmptyBody, request.body, "body");
      await ownProject(db, userId, id);
      await requestOperation(db, id, kind).catch(tenantError);
      return reply.status(202).send(view(await ownProject(db, userId, id), caller(request, userId)));
    });
  }

  app.post("/projects/:id/snapshot", async (request, reply) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    const body = parseInput(SnapshotBody, request.body, "body");
    const { backend } = await ownProject(db, userId, id);
    // Refused before it is queued, naming why: its operation could only fail.
    if (!options.backends.traits(backend).snapshots)
      throw new HttpError(
        409,
        "snapshots_unsupported",
        `project ${id} runs on ${backend}, which keeps no snapshots; its home is kept across a stop and a start`,
        { backend },
      );
    await requestOperation(db, id, "snapshot", undefined, body.stop ? { running: false } : {}).catch(
      tenantError,
    );
    return reply.status(202).send(view(await ownProject(db, userId, id), caller(request, userId)));
  });

  app.post("/projects/:id/restore", async (request, reply) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    const body = parseInput(RestoreBody, request.body, "body");
    await ownProject(db, userId, id);
    const snapshots = await listSnapshots(db, id);
    const chosen = body.snapshot ? snapshots.find((s) => s.tag === body.snapshot) : snapshots[0];
    if (body.snapshot && !chosen)
      // The project is there; the snapshot its body names is not (a 404 would say the project is gone).
      throw new HttpError(409, "snapshot_not_found", `project has no snapshot ${body.snapshot}`, {
        snapshot: body.snapshot,
      });
    // Without any snapshot, a restore starts the base image; an empty home is filled from the backup.
    const image = chosen?.image ?? options.defaults.image;
    await requestOperation(db, id, "restore", undefined, { image, running: true }).catch(tenantError);
    return reply.status(202).send(view(await ownProject(db, userId, id), caller(request, userId)));
  });

  app.get("/projects/:id/drift", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    await ownProject(db, userId, id);
    const drift = await getDrift(db, id);
    return {
      project_id: id,
      status: drift?.status ?? "never-checked",
      checked_at: drift?.checked_at.toISOString() ?? null,
      resources: drift?.resources ?? [],
      error: drift?.error ?? null,
      stalled: drift?.stalled ?? false,
    };
  });

  app.get("/projects/:id/snapshots", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    await ownProject(db, userId, id);
    return {
      snapshots: (await listSnapshots(db, id)).map((s) => ({
        tag: s.tag,
        image: s.image,
        digest: s.digest,
        created_at: s.created_at.toISOString(),
      })),
    };
  });

  app.get("/projects/:id/backup-status", async (request): Promise<BackupStatusBody> => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    await ownProject(db, userId, id);
    const { rows: recorded } = await db.query<{
      last_backup: BackupStatus | null;
      backend: BackendKind | null;
    }>("select last_backup, spec->>'backend' as backend from tenants where project_id = $1", [id]);
    let status: BackupStatus | null = recorded[0]?.last_backup ?? null;
    let source: "sandbox" | "recorded" = "recorded";
    try {
      // A sandbox backed up from outside (a Pod's): the runtime's record is the answer, and what the sandbox
      // would say is its agent's to write.
      if (options.backends.traits(recorded[0]?.backend).backupDaemonInside) {
        status = await readBackupStatus(await options.sandboxes(id), id);
        source = "sandbox";
      }
    } catch (error) {
      // A stopped sandbox cannot be asked, and one that answers no status (the tenant's to break) is not
      // believed: what it said last is the answer, never a 500.
      if (!(error instanceof SandboxNotRunningError))
        request.log.warn({ err: error, project: id }, "backup status unreadable; answering the recorded one");
    }
    if (source === "sandbox" && status) await recordBackupStatus(db, id, status);
    // The sandbox wrote these: a field of another type than documented is left out, not passed on.
    const text = (value: unknown) => (typeof value === "string" ? value : null);
    return {
      project_id: id,
      source,
      last_backup_at: text(status?.last_success_at),
      last_attempt_at: text(status?.last_attempt_at),
      last_result: text(status?.last_result),
      last_error: text(status?.last_error),
      state: text(status?.state) ?? "never-run",
      interval_seconds: Number.isFinite(status?.interval_seconds) ? status!.interval_seconds! : null,
      after_change_seconds: Number.isFinite(status?.after_change_seconds)
        ? status!.after_change_seconds!
        : null,
      last_trigger: text(status?.last_trigger),
      usage: status?.usage ?? null,
    };
  });

  app.delete("/projects/:id", async (request, reply) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    parseInput(EmptyBody, request.body, "body");
    await ownProject(db, userId, id);
    await requestOperation(db, id, "delete").catch(tenantError);
    return reply.status(202).send(view(await ownProject(db, userId, id), caller(request, userId)));
  });
}
