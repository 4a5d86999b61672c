// What the API answers, as zod schemas: the OpenAPI document's response bodies are generated from these,
// and the routes' views are typed by them, so a field added to a view without its schema does not compile.
import { z } from "zod";
import { OPERATION_KINDS } from "../store/operations.js";
import { IDLE_ACTIONS } from "../store/projects.js";

/** A timestamp as JSON carries a Date (`Date.prototype.toJSON`). */
const Timestamp = z.iso.datetime();

/** Every error: a stable code, a message for people, and for some codes details (fields, retry_after). */
export const ErrorBody = z
  .object({
    error: z.string(),
    message: z.string(),
    details: z.unknown().optional(),
    /** On a 500: the id to find the logged error by. */
    request_id: z.string().optional(),
  })
  .strict();

export const UserIdBody = z.object({ user_id: z.uuid() }).strict();

export const TokenPairBody = z
  .object({
    access_token: z.string(),
    refresh_token: z.string(),
    token_type: z.literal("Bearer"),
    expires_in: z.number().int(),
  })
  .strict();

export const PROJECT_STATUSES = [
  "creating",
  "running",
  "stopped",
  "snapshotting",
  "restoring",
  "deleting",
  "error",
] as const;

export const ProjectBody = z
  .object({
    project_id: z.uuid(),
    name: z.string(),
    status: z.enum(PROJECT_STATUSES),
    error: z.string().nullable(),
    created_at: Timestamp,
    /**
     * Where the sandbox runs: `container`, `microvm` (its own kernel), `kubernetes` (a Pod on the platform's
     * cluster), or a backend the runtime registered.
     */
    backend: z.string(),
    /** A microVM's accelerator: `kvm`, or `tcg` (emulation) where KVM is missing or hangs; null otherwise. */
    accelerator: z.enum(["kvm", "tcg"]).nullable(),
    /** A container's isolation: `runc` (the engine's default runtime) or `gvisor`; null for other backends. */
    isolation: z.enum(["runc", "gvisor"]).nullable(),
    /** Its bandwidth caps in kbit/s (`download_kbps`, `upload_kbps`; null: not capped); null without any. */
    bandwidth: z
      .object({ download_kbps: z.number().int().nullable(), upload_kbps: z.number().int().nullable() })
      .nullable(),
    ssh: z
      .object({
        host: z.string(),
        port: z.number().int().nullable(),
        user: z.literal("agent"),
        /** Only on create (and its idempotent repeat). */
        private_key: z.string().optional(),
        /**
         * A kubernetes project's: the host key its SSH gateway answers with (`ssh-ed25519 ...`), to pin; absent
         * until the gateway first listens for it (a few seconds after the create). Other backends' sandboxes make
         * their own at each start.
         */
        host_key: z.string().optional(),
      })
      .strict(),
    /** A running project's terminal, with a single-use ticket. */
    terminal_url: z.string().nullable(),
    operation: z
      .object({
        id: z.string(),
        kind: z.enum(OPERATION_KINDS),
        state: z.enum(["pending", "running", "succeeded", "failed", "cancelled"]),
        error: z.string().nullable(),
        progress: z
          .object({ events: z.number().int(), last: z.record(z.string(), z.unknown()).nullable() })
          .strict(),
      })
      .strict()
      .nullable(),
    last_snapshot: z.object({ tag: z.string(), created_at: Timestamp }).strict().nullable(),
    last_backup_at: z.string().nullable(),
    /**
     * What happens to the sandbox when nobody has used it for `tenants.idleMinutes`: `pause` (a snapshot and a
     * stop that keeps its memory where the backend can), `stop` (memory dropped) or `none`.
     */
    idle: z.enum(IDLE_ACTIONS),
    /** Whether `idle` does anything (the older switch: `idle` is not `none`). */
    idle_shutdown: z.boolean(),
    /**
     * How a stopped sandbox sleeps: `memory` (a microVM's memory image, `memory_bytes` of it, saved at
     * `saved_at`: the next start resumes its processes) or `files` (its disks alone: the next start boots);
     * null while it runs, and before the first stop of a project made before pauses were recorded.
     */
    pause: z
      .object({
        kind: z.enum(["memory", "files"]),
        memory_bytes: z.number().int().nullable(),
        saved_at: Timestamp.nullable(),
      })
      .strict()
      .nullable(),
    /**
     * How the sandbox's latest start went, where its backend says (a microVM's): `from` its kept `memory`
     * (its processes resumed) or its `disks` (a boot), with `cold_reason` when a memory image was there and
     * could not be used (a changed machine, a cut or missing file, a restore that failed); null otherwise.
     */
    last_start: z
      .object({ from: z.enum(["memory", "disks"]), cold_reason: z.string().nullable(), at: Timestamp })
      .strict()
      .nullable(),
    /** The last drift check of the project's stack (details: `GET /projects/{id}/drift`); null before one. */
    drift: z
      .object({
        status: z.enum(["clean", "drifted", "failed"]),
        checked_at: Timestamp,
        resources: z.number().int(),
        stalled: z.boolean(),
      })
      .strict()
      .nullable(),
    /**
     * The declared dev-server ports and their front-door URLs (open one as its owner after
     * `POST /projects/{id}/front-door/session`); empty when none are declared.
     */
    front_door: z.array(
      z.object({ name: z.string().nullable(), port: z.number().int(), url: z.string() }).strict(),
    ),
    /**
     * A fork's source (`POST /projects/{id}/fork`): the project its home was copied from and the point the
     * copy was taken at; null for a project that is no fork. Its own forks: `GET /projects/{id}/forks`.
     */
    forked_from: z.object({ project_id: z.uuid(), at: Timestamp }).strict().nullable(),
    /**
     * A kubernetes project's Pod as the cluster has it now (`GET /projects/{id}` only): `running` once it is
     * scheduled and Ready, `starting` with why not yet (`Unschedulable`, `ImagePullBackOff`, ...), `failed` with
     * the cluster's message (a quota's refusal), `unknown` when the cluster does not answer in time.
     */
    sandbox: z
      .object({
        phase: z.enum([
          "absent",
          "deleting",
          "stopped",
          "stopping",
          "starting",
          "running",
          "failed",
          "unknown",
        ]),
        reason: z.string().optional(),
        message: z.string().optional(),
        node: z.string().optional(),
        restarts: z.number().int().optional(),
        /** A running sandbox's egress proxy: `ready`, or `not-ready` (nothing outside can be reached). */
        egress: z.enum(["ready", "not-ready"]).optional(),
      })
      .strict()
      .optional(),
  })
  .strict();
export type ProjectBody = z.output<typeof ProjectBody>;
export type SandboxView = NonNullable<ProjectBody["sandbox"]>;

export const ProjectListBody = z.object({ projects: z.array(ProjectBody) }).strict();

export const DriftBody = z
  .object({
    project_id: z.uuid(),
    /** `never-checked` until the first check; `failed`: the stack could not be checked (see `error`). */
    status: z.enum(["never-checked", "clean", "drifted", "failed"]),
    checked_at: Timestamp.nullable(),
    /** Each resource found changed or deleted behind the stack's back, with the properties that differ. */
    resources: z.array(
      z
        .object({
          type: z.string(),
          urn: z.string(),
          change: z.enum(["deleted", "changed"]),
          properties: z.array(z.string()),
        })
        .strict(),
    ),
    error: z.string().nullable(),
    /** Checks failed too often in a row: the sweep leaves the project alone until an operator acts. */
    stalled: z.boolean(),
  })
  .strict();

export const SnapshotListBody = z
  .object({
    snapshots: z.array(
      z.object({ tag: z.string(), image: z.string(), digest: z.string(), created_at: Timestamp }).strict(),
    ),
  })
  .strict();

export const BackupStatusBody = z
  .object({
    project_id: z.uuid(),
    /** Asked of the sandbox just now, or what it said last (a stopped sandbox). */
    source: z.enum(["sandbox", "recorded"]),
    last_backup_at: z.string().nullable(),
    last_attempt_at: z.string().nullable(),
    last_result: z.string().nullable(),
    last_error: z.string().nullable(),
    state: z.string(),
    interval_seconds: z.number().nullable(),
    /** A backup also runs this long after the home changed; null: the interval alone. */
    after_change_seconds: z.number().nullable(),
    /** What started the last attempt: `interval`, `change` or `once` (a stop's or snapshot's final backup). */
    last_trigger: z.string().nullable(),
    usage: z.object({ bytes: z.number().int(), objects: z.number().int() }).strict().nullable(),
  })
  .strict();
export type BackupStatusBody = z.output<typeof BackupStatusBody>;

export const AuditPageBody = z
  .object({
    entries: z.array(
      z
        .object({
          id: z.number().int(),
          session_id: z.uuid(),
          user_id: z.uuid(),
          at: Timestamp,
          /** `agent_prompt` and `agent_command`: an agent turn's (POST /projects/{id}/agent/turns). */
          kind: z.enum(["input", "resize", "truncated", "agent_prompt", "agent_command"]),
          text: z.string(),
          data_base64: z.string(),
        })
        .strict(),
    ),
    /** Pass as `after` for the next page. */
    next_after: z.number().int(),
  })
  .strict();

export const SessionListBody = z
  .object({
    sessions: z.array(
      z
        .object({
          session_id: z.uuid(),
          /** `agent`: a turn of the console's agent pane, its recording the turn as the terminal showed it. */
          kind: z.enum(["terminal", "agent"]),
          user_id: z.uuid(),
          started_at: Timestamp,
          ended_at: Timestamp.nullable(),
          end_code: z.number().int().nullable(),
          end_reason: z.string().nullable(),
          input_bytes: z.number().int(),
          output_bytes: z.number().int(),
        })
        .strict(),
    ),
  })
  .strict();

export const HealthBody = z
  .object({
    status: z.enum(["ready", "not ready"]),
    /** Each prerequisite, with versions, paths and addresses: only to this host, operators and the metrics token. */
    checks: z
      .array(z.object({ name: z.string(), ready: z.boolean(), detail: z.string() }).strict())
      .optional(),
  })
  .strict();

/** `GET /admin/projects`: every live project, whoever owns it. */
export const AdminProjectsBody = z
  .object({
    projects: z.array(
      z
        .object({
          project_id: z.uuid(),
          name: z.string(),
          owner: z.string(),
          status: z.enum(PROJECT_STATUSES),
          created_at: Timestamp,
          /** The tenant program version its stack was last applied with (npm run rollout). */
          program_version: z.string().nullable(),
          drift: z
            .object({
              status: z.enum(["clean", "drifted", "failed"]),
              checked_at: Timestamp,
              stalled: z.boolean(),
            })
            .strict()
            .nullable(),
          operation: z
            .object({
              id: z.string(),
              kind: z.enum(OPERATION_KINDS),
              state: z.string(),
              error: z.string().nullable(),
            })
            .strict()
            .nullable(),
        })
        .strict(),
    ),
  })
  .strict();

/** `GET /admin/operations`: the queue, waiting and running. */
export const AdminOperationsBody = z
  .object({
    operations: z.array(
      z
        .object({
          id: z.uuid(),
          project_id: z.string(),
          kind: z.enum(OPERATION_KINDS),
          state: z.enum(["pending", "running"]),
          attempt: z.number().int(),
          lease_owner: z.string().nullable(),
          cancel_requested: z.boolean(),
          created_at: Timestamp,
          started_at: Timestamp.nullable(),
        })
        .strict(),
    ),
  })
  .strict();

export const CancelBody = z
  .object({ id: z.uuid(), state: z.enum(["cancelled", "running"]), cancel_requested: z.literal(true) })
  .strict();

export const UnstallBody = z.object({ project_id: z.uuid(), stalled: z.literal(false) }).strict();

/** `GET /admin/jobs`: each background job's last run and its totals. */
export const AdminJobsBody = z
  .object({
    jobs: z.array(
      z
        .object({
          job: z.string(),
          last_started_at: Timestamp.nullable(),
          last_finished_at: Timestamp.nullable(),
          last_duration_ms: z.number().int().nullable(),
          last_outcome: z.enum(["succeeded", "failed"]).nullable(),
          last_detail: z.unknown(),
          runs: z.number().int(),
          failures: z.number().int(),
        })
        .strict(),
    ),
  })
  .strict();

/** `GET /admin/pool`: the warm pool now (runtime/tenants/pool.ts). */
export const AdminPoolBody = z
  .object({
    enabled: z.boolean(),
    /** What its members are made for (the default image and limits), as a digest. */
    class: z.string(),
    target: z.number().int(),
    ready: z.number().int(),
    creating: z.number().int(),
    failed: z.number().int(),
    /** Since this runtime started. */
    claims: z.number().int(),
    misses: z.number().int(),
    /** Why it is empty or short, when it is (a refill that failed, an image that is gone). */
    last_error: z.string().nullable(),
    last_claim_at: Timestamp.nullable(),
  })
  .strict();

export const JobRunBody = z
  .object({
    job: z.string(),
    /** False when a run of it was already going: a job asked twice runs once. */
    ran: z.boolean(),
    outcome: z.enum(["succeeded", "failed"]).nullable(),
    detail: z.unknown(),
  })
  .strict();
