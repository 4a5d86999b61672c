// A project as the API and the operators' console show it: the `projects` row joined with its tenant, newest
// operation, newest snapshot, drift and SSH host key, read in one statement.
import type { Queryable } from "./db.js";
import type { DriftStatus } from "./drift.js";
import { asleepSql, type Operation } from "./operations.js";
import type { IdleAction } from "./projects.js";
import type { PauseRecord, StartRecord, TenantState } from "./tenants.js";

/** A project as the API shows it: its tenant's state, newest operation, snapshot and drift, in one row. */
export interface ProjectRow {
  id: string;
  name: string;
  created_at: Date;
  state: TenantState;
  /** The desired state's `running` (the whole spec is not read: a listing reads only what it shows). */
  running: boolean;
  /** The desired state's front-door ports (absent in specs recorded before them). */
  ports: { port: number; name?: string }[] | null;
  ssh_port: number | null;
  /** The spec's backend (`container` for specs recorded before there was a choice). */
  backend: string;
  /** A microVM's accelerator (kvm or tcg), as the host's probe decided at its create. */
  accelerator: "kvm" | "tcg" | null;
  /** A container's isolation (runc where its spec names none); null for other backends. */
  isolation: "runc" | "gvisor" | null;
  /** Its spec's bandwidth caps (kbit/s), if any. */
  bandwidth: { downloadKbps?: number; uploadKbps?: number } | null;
  last_error: string | null;
  last_backup_at: string | null;
  idle: IdleAction;
  /** How a stopped sandbox sleeps (its memory kept, or its files alone); null while it runs. */
  pause: PauseRecord | null;
  /** How its latest start went, where the backend says (a microVM's: from its memory or its disks). */
  last_start: StartRecord | null;
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
  /** Stopped by the platform (the idle shutdown, an E2B pause): a request that needs it wakes it. */
  asleep: boolean;
  /** A fork's source and the point its home was copied at (null: no fork). */
  forked_from: string | null;
  forked_at: Date | null;
}

// One query per request whatever the number of projects: each one's newest operation (its progress) and
// newest snapshot come from lateral joins, on indexes (operations_project_newest, snapshots_newest).
const PROJECT_QUERY = `
  select p.id, p.name, p.created_at, p.idle_action as idle, t.pause, t.last_start, p.forked_from, p.forked_at, t.state,
         d.status as drift_status, d.checked_at as drift_checked_at, d.stalled as drift_stalled,
         jsonb_array_length(d.resources) as drift_resources, (t.spec->>'running')::boolean as running,
         coalesce(t.spec->>'backend', 'container') as backend, t.spec->'microvm'->>'accelerator' as accelerator,
         t.spec->'bandwidth' as bandwidth,
         coalesce(t.spec->>'isolation', case when coalesce(t.spec->>'backend', 'container') = 'container' then 'runc' end) as isolation,
         t.spec->'ports' as ports, t.ssh_port, t.last_error,
         t.last_backup->>'last_success_at' as last_backup_at,
         o.id as op_id, o.kind as op_kind, o.state as op_state, o.error as op_error,
         (select count(*)::int from operation_events e where e.operation_id = o.id) as op_events,
         (select e.event from operation_events e where e.operation_id = o.id order by e.seq desc limit 1) as op_last,
         s.tag as snapshot_tag, s.created_at as snapshot_at, k.public_key as ssh_host_key,
         (t.state = 'stopped' and ${asleepSql("p.id")}) as asleep
    from projects p join tenants t on t.project_id = p.id
    left join project_drift d on d.project_id = p.id
    left join ssh_gateway_host_keys k on k.project_id = p.id
    left join lateral (select * from operations o where o.project_id = p.id order by o.seq desc limit 1) o on true
    left join lateral (select tag, created_at from snapshots s where s.project_id = p.id
                        order by created_at desc, tag desc limit 1) s on true`;

/** One of the user's live projects; undefined for a deleted one, another user's, or none. */
export async function ownProject(db: Queryable, userId: string, id: string): Promise<ProjectRow | undefined> {
  const { rows } = await db.query<ProjectRow>(
    `${PROJECT_QUERY} where p.id = $1 and p.user_id = $2 and t.state <> 'deleted'`,
    [id, userId],
  );
  return rows[0];
}

/** How many of the user's projects hold a subnet and an SSH port: every one not yet deleted. */
export async function liveProjects(db: Queryable, userId: string): Promise<number> {
  const { rows } = await db.query<{ count: number }>(
    `select count(*)::int as count from projects p join tenants t on t.project_id = p.id
      where p.user_id = $1 and t.state <> 'deleted'`,
    [userId],
  );
  return rows[0]?.count ?? 0;
}

/** The user's live projects, oldest first. */
export async function listProjects(db: Queryable, userId: string): Promise<ProjectRow[]> {
  const { rows } = await db.query<ProjectRow>(
    `${PROJECT_QUERY} where p.user_id = $1 and t.state <> 'deleted' order by p.created_at, p.id`,
    [userId],
  );
  return rows;
}

/** A live project as the operators' list shows it: its owner's email, program version, drift, last operation. */
export interface AdminProjectRow {
  readonly id: string;
  readonly name: string;
  readonly owner: string;
  readonly created_at: Date;
  readonly program_version: string | null;
  readonly state: TenantState;
  readonly running: boolean;
  readonly drift_status: string | null;
  readonly drift_checked_at: Date | null;
  readonly drift_stalled: boolean | null;
  readonly op_id: string | null;
  readonly op_kind: string | null;
  readonly op_state: string | null;
  readonly op_error: string | null;
}

/** Every user's live projects, oldest first. */
export async function allLiveProjects(db: Queryable): Promise<AdminProjectRow[]> {
  const { rows } = await db.query<AdminProjectRow>(
    `select p.id, p.name, u.email as owner, p.created_at, t.program_version, t.state,
            (t.spec->>'running')::boolean as running,
            d.status as drift_status, d.checked_at as drift_checked_at, d.stalled as drift_stalled,
            o.id as op_id, o.kind as op_kind, o.state as op_state, o.error as op_error
       from projects p join tenants t on t.project_id = p.id join users u on u.id = p.user_id
       left join project_drift d on d.project_id = p.id
       left join lateral (select * from operations o where o.project_id = p.id order by o.seq desc limit 1) o on true
      where t.state <> 'deleted' order by p.created_at`,
  );
  return rows;
}
