// The `projects` table: what a user owns and their settings for it (idle action, drift remediation), beside
// the tenant that carries it out.
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Queryable } from "./db.js";
import type { TenantState } from "./tenants.js";

/** What the project's owner chose to do about drift (null: the platform's default). */
export async function driftRemediationOf(db: Queryable, projectId: string): Promise<string | null> {
  const { rows } = await db.query<{ drift_remediation: string | null }>(
    "select drift_remediation from projects where id = $1",
    [projectId],
  );
  return rows[0]?.drift_remediation ?? null;
}

/** Someone used the project's sandbox now (a terminal, an SSH session): its idle clock starts again. */
export async function recordProjectConnection(db: Queryable, projectId: string): Promise<void> {
  await db.query("update projects set last_connection_at = now() where id = $1", [projectId]);
}

/**
 * What the idle handling does to a project nobody uses: pause it (a stop that keeps its memory where the
 * backend can), stop it (its memory dropped: the next start boots), or nothing.
 */
export const IDLE_ACTIONS = ["pause", "stop", "none"] as const;
export type IdleAction = (typeof IDLE_ACTIONS)[number];

/** A running project the idle shutdown may stop, with when it was last used. */
export interface IdleCandidate {
  readonly id: string;
  readonly idle_action: Exclude<IdleAction, "none">;
  readonly last_active: Date | string;
  readonly spec: TenantSpec;
}

/**
 * Projects with an idle action (not `none`) whose sandbox runs with no operation pending or running, each with its last
 * activity: its creation, its tenant's last change, its last connection, its terminal's last audit entry.
 */
export async function idleShutdownCandidates(db: Queryable): Promise<IdleCandidate[]> {
  return (
    await db.query<IdleCandidate>(
      `select p.id, p.idle_action, greatest(p.created_at, t.updated_at, p.last_connection_at,
                (select max(a.at) from terminal_audit a where a.project_id = p.id)) as last_active, t.spec
         from projects p join tenants t on t.project_id = p.id
        where t.state = 'running' and (t.spec->>'running')::boolean and p.idle_action <> 'none'
          and not exists (select 1 from operations o where o.project_id = p.id
                           and o.state in ('pending', 'running'))`,
    )
  ).rows;
}

/**
 * Whether `userId` is still a user and owns the project, and the project's tenant state (null: no tenant):
 * what a terminal checks again while it stays open.
 */
export async function projectAccess(
  db: Queryable,
  userId: string,
  projectId: string,
): Promise<{ user_ok: boolean; owned: boolean; state: string | null }> {
  const { rows } = await db.query<{ user_ok: boolean; owned: boolean; state: string | null }>(
    `select exists (select 1 from users where id = $1 and deleted_at is null) as user_ok,
            exists (select 1 from projects where id = $2 and user_id = $1) as owned,
            (select state from tenants where project_id = $2) as state`,
    [userId, projectId],
  );
  return rows[0]!;
}

/** A new project of `userId`'s; `sealedPrivateKey` is its SSH private key, sealed by the secret box. */
export async function recordProject(
  tx: Queryable,
  project: { id: string; userId: string; name: string; sealedPrivateKey: string; idle: IdleAction },
): Promise<void> {
  await tx.query(
    "insert into projects (id, user_id, name, ssh_private_key, idle_action) values ($1, $2, $3, $4, $5)",
    [project.id, project.userId, project.name, project.sealedPrivateKey, project.idle],
  );
}

/** The project's SSH private key as stored (sealed); undefined when there is no such project. */
export async function sealedProjectKey(db: Queryable, projectId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ ssh_private_key: string }>(
    "select ssh_private_key from projects where id = $1",
    [projectId],
  );
  return rows[0]?.ssh_private_key;
}

/**
 * The owner's settings of the project: the idle action when `idle` is given, drift remediation when
 * `driftRemediation` is given (null: back to the platform's default); what is not given is kept.
 */
export async function recordProjectSettings(
  db: Queryable,
  projectId: string,
  settings: {
    idle?: IdleAction | undefined;
    driftRemediation?: string | null | undefined;
    privatePorts?: readonly number[] | undefined;
  },
): Promise<void> {
  await db.query(
    `update projects set idle_action = coalesce($2, idle_action),
     drift_remediation = case when $3 then $4 else drift_remediation end,
     private_ports = case when $5 then $6::jsonb else private_ports end where id = $1`,
    [
      projectId,
      settings.idle ?? null,
      settings.driftRemediation !== undefined,
      settings.driftRemediation ?? null,
      settings.privatePorts !== undefined,
      JSON.stringify([...new Set(settings.privatePorts ?? [])].sort((a, b) => a - b)),
    ],
  );
}

/** The ports the owner keeps private: the front door does not route them when it finds them. */
export async function privatePorts(db: Queryable, projectId: string): Promise<number[]> {
  const { rows } = await db.query<{ private_ports: number[] | null }>(
    "select private_ports from projects where id = $1",
    [projectId],
  );
  return rows[0]?.private_ports ?? [];
}

/** Whether a project with this id exists (deleted or not). */
export async function projectExists(db: Queryable, projectId: string): Promise<boolean> {
  const { rows } = await db.query("select 1 from projects where id = $1", [projectId]);
  return rows.length > 0;
}

/** The live projects whose front-door label (the first 12 hex digits of the id) is `label`. */
export async function projectsByFrontDoorLabel(db: Queryable, label: string): Promise<string[]> {
  if (!/^[0-9a-f]{12}$/.test(label)) return [];
  const { rows } = await db.query<{ id: string }>(
    `select p.id from projects p join tenants t on t.project_id = p.id
      where t.state <> 'deleted' and replace(p.id, '-', '') like $1`,
    [`${label}%`],
  );
  return rows.map((row) => row.id);
}

/** Every live project's id, name and creation time: what its dev servers' host names are made from. */
export async function devServerProjects(
  db: Queryable,
): Promise<{ id: string; name: string; createdAt: Date }[]> {
  const { rows } = await db.query<{ id: string; name: string; created_at: Date }>(
    `select p.id, p.name, p.created_at from projects p join tenants t on t.project_id = p.id
      where t.state <> 'deleted'`,
  );
  return rows.map((row) => ({ id: row.id, name: row.name, createdAt: row.created_at }));
}

/**
 * A live project's owner, name, tenant state and subnet (its sandbox's bridge address), as its front door
 * checks them on every request.
 */
export async function frontDoorProject(
  db: Queryable,
  projectId: string,
): Promise<
  { user_id: string; name: string; state: TenantState; running: boolean; subnet: string | null } | undefined
> {
  const { rows } = await db.query<{
    user_id: string;
    name: string;
    state: TenantState;
    running: boolean;
    subnet: string | null;
  }>(
    `select p.user_id, p.name, t.state, (t.spec->>'running')::boolean as running, t.subnet
       from projects p join tenants t on t.project_id = p.id
      where p.id = $1 and t.state <> 'deleted'`,
    [projectId],
  );
  return rows[0];
}
