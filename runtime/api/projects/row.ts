import type { Queryable } from "../../db.js";
import type { BackendKind } from "../../backends/backend.js";
import { HttpError } from "../../errors.js";
import type { Operation } from "../../operations.js";
import type { DriftStatus } from "../../tenants/drift.js";
import type { TenantState } from "../../tenants/service.js";

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
