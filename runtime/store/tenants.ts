// The `tenants` table: each project's desired state (its spec), where its stack stands, its network and port
// allocations and the record of its backups. Every write to the table is here.
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { Queryable } from "./db.js";
import { asleepSql } from "./operations.js";

export type TenantState =
  | "creating"
  | "running"
  | "stopped"
  | "updating"
  | "snapshotting"
  | "restoring"
  | "deleting"
  | "deleted"
  | "error";

export interface TenantRow {
  readonly project_id: string;
  readonly owner_id: string;
  readonly spec: TenantSpec;
  readonly subnet: string | null;
  readonly ssh_port: number | null;
  readonly state: TenantState;
  readonly last_error: string | null;
}

/** A tenant with the spec it runs, as the background jobs go over them. */
export interface TenantSpecRow {
  readonly project_id: string;
  readonly spec: TenantSpec;
}

// Allocation of subnets and ports is serialised across processes by this advisory lock.
const ALLOCATION_LOCK = 727275;
/** The class of the per-owner advisory locks (two-key form: this, and a hash of the owner's id). */
const OWNER_LOCK_CLASS = 727276;

/**
 * Serialises, until the transaction ends, everything that gives `ownerId` a project: a warm-pool claim and
 * a cold create alike. Under READ COMMITTED two such transactions would each count the owner's projects
 * without the other's uncommitted one, and both pass a quota of one more; holding this first, the second
 * counts after the first has committed. Taken before the allocation lock, always in this order.
 */
export async function lockOwnerProjects(tx: Queryable, ownerId: string): Promise<void> {
  await tx.query("select pg_advisory_xact_lock($1, hashtext($2))", [OWNER_LOCK_CLASS, ownerId]);
}

/** Serialises subnet and port allocation until the transaction ends (after the owner's lock). */
export async function lockTenantAllocations(tx: Queryable): Promise<void> {
  await tx.query("select pg_advisory_xact_lock($1)", [ALLOCATION_LOCK]);
}

export async function getTenant(db: Queryable, projectId: string): Promise<TenantRow | undefined> {
  return (await db.query<TenantRow>("select * from tenants where project_id = $1", [projectId])).rows[0];
}

/** Every subnet and SSH port held by a tenant (a deleted one's are released). */
export async function allocatedSubnetsAndPorts(
  db: Queryable,
): Promise<{ subnet: string | null; ssh_port: number | null }[]> {
  return (
    await db.query<{ subnet: string | null; ssh_port: number | null }>(
      "select subnet, ssh_port from tenants where subnet is not null or ssh_port is not null",
    )
  ).rows;
}

/** A new tenant (or a deleted one's id made anew), state `creating`, with its allocations. */
export async function recordCreatingTenant(
  tx: Queryable,
  tenant: { projectId: string; ownerId: string; spec: TenantSpec; subnet: string; sshPort: number },
): Promise<void> {
  await tx.query(
    `insert into tenants (project_id, owner_id, spec, subnet, ssh_port, state) values ($1, $2, $3, $4, $5, 'creating')
     on conflict (project_id) do update set owner_id = excluded.owner_id, spec = excluded.spec, subnet = excluded.subnet,
       ssh_port = excluded.ssh_port, state = 'creating', last_error = null, updated_at = now()`,
    [tenant.projectId, tenant.ownerId, JSON.stringify(tenant.spec), tenant.subnet, tenant.sshPort],
  );
}

/**
 * A settings change: the new spec, and the image waiting for the next start (`pendingImage`, set; or
 * cleared when `imageNow` put an image in the spec; else kept).
 */
export async function recordTenantSettings(
  tx: Queryable,
  projectId: string,
  spec: TenantSpec,
  pendingImage: string | null,
  imageNow: boolean,
): Promise<void> {
  await tx.query(
    `update tenants set spec = $2, pending_image = case when $3::text is not null then $3
       when $4 then null else pending_image end, updated_at = now() where project_id = $1`,
    [projectId, JSON.stringify(spec), pendingImage, imageNow],
  );
}

/**
 * Merges `change` into the spec; `replacesPendingImage` (an image in it) drops one waiting for the next start.
 * `keepMemory` is a microVM's (`microvm.keepMemory`: whether its stop keeps its memory); other specs have
 * none and are left as they are.
 */
export async function recordDesiredChange(
  tx: Queryable,
  projectId: string,
  change: { readonly running?: boolean; readonly image?: string; readonly keepMemory?: boolean },
  replacesPendingImage: boolean,
): Promise<void> {
  const { keepMemory, ...merged } = change;
  await tx.query(
    `update tenants set spec = case when $4::boolean is not null and jsonb_typeof(spec->'microvm') = 'object'
                                    then jsonb_set(spec || $2::jsonb, '{microvm,keepMemory}', to_jsonb($4::boolean))
                                    else spec || $2::jsonb end,
       updated_at = now(),
       pending_image = case when $3 then null else pending_image end where project_id = $1`,
    [projectId, JSON.stringify(merged), replacesPendingImage, keepMemory ?? null],
  );
}

/**
 * How a stopped sandbox sleeps: its memory kept beside its disks (a microVM's, `bytes` of it, saved at
 * `saved_at`), or its files alone (every other stop: the next start boots).
 */
export type PauseRecord =
  { readonly kind: "memory"; readonly bytes: number; readonly saved_at: string } | { readonly kind: "files" };

/** What the operation that stopped the sandbox left (null: it runs, or nobody has stopped it). */
export async function recordPause(
  db: Queryable,
  projectId: string,
  pause: PauseRecord | null,
): Promise<void> {
  await db.query("update tenants set pause = $2 where project_id = $1", [
    projectId,
    pause ? JSON.stringify(pause) : null,
  ]);
}

/** How a sandbox's latest start went: from its kept memory, or from its disks (why, when an image was there). */
export interface StartRecord {
  readonly from: "memory" | "disks";
  readonly cold_reason: string | null;
  readonly at: string;
}

/** The start an operation just made, as its backend told it. */
export async function recordLastStart(db: Queryable, projectId: string, start: StartRecord): Promise<void> {
  await db.query("update tenants set last_start = $2 where project_id = $1", [
    projectId,
    JSON.stringify(start),
  ]);
}

/**
 * Sleeping projects whose memory image is older than `retentionHours` and on which nothing is pending or
 * running: each one's image is dropped by an update (its spec's `keepMemory` false), the disks kept.
 */
export async function staleMemoryImages(
  db: Queryable,
  retentionHours: number,
): Promise<{ project_id: string; saved_at: string }[]> {
  const { rows } = await db.query<{ project_id: string; saved_at: string }>(
    `select t.project_id, t.pause->>'saved_at' as saved_at from tenants t
      where t.state = 'stopped' and not (t.spec->>'running')::boolean and t.pause->>'kind' = 'memory'
        and (t.pause->>'saved_at')::timestamptz < now() - make_interval(secs => $1::double precision * 3600)
        and not exists (select 1 from operations o where o.project_id = t.project_id
                         and o.state in ('pending', 'running'))
      order by t.project_id`,
    [retentionHours],
  );
  return rows;
}

/** The image set while the sandbox ran (no restart) becomes the spec's, for the start being queued. */
export async function applyPendingImage(tx: Queryable, projectId: string): Promise<void> {
  await tx.query(
    `update tenants set spec = jsonb_set(spec, '{image}', to_jsonb(pending_image)), pending_image = null
      where project_id = $1 and pending_image is not null`,
    [projectId],
  );
}

/** A warm-pool member handed to its owner: the owner and the spec made theirs. */
export async function assignTenantOwner(
  tx: Queryable,
  projectId: string,
  ownerId: string,
  spec: TenantSpec,
): Promise<void> {
  await tx.query("update tenants set owner_id = $2, spec = $3, updated_at = now() where project_id = $1", [
    projectId,
    ownerId,
    JSON.stringify(spec),
  ]);
}

/** Where the tenant's stack stands, and why it failed (null clears it). */
export async function setTenantState(
  db: Queryable,
  projectId: string,
  state: TenantState,
  error: string | null,
): Promise<void> {
  await db.query("update tenants set state = $2, last_error = $3, updated_at = now() where project_id = $1", [
    projectId,
    state,
    error,
  ]);
}

/** After a failed snapshot: back to what the spec says the sandbox is (running or stopped). */
export async function settleFailedSnapshot(db: Queryable, projectId: string): Promise<void> {
  await db.query(
    `update tenants set state = case when (spec->>'running')::boolean then 'running' else 'stopped' end,
       updated_at = now() where project_id = $1 and state = 'snapshotting'`,
    [projectId],
  );
}

/** A delete that has finished: only now are its subnet and SSH port released to someone else. */
export async function markTenantDeleted(db: Queryable, projectId: string): Promise<void> {
  await db.query(
    "update tenants set state = 'deleted', subnet = null, ssh_port = null, updated_at = now() where project_id = $1",
    [projectId],
  );
}

/** The tenant program version an `up` of the tenant's stack applied. */
export async function recordProgramVersion(db: Queryable, projectId: string, version: string): Promise<void> {
  await db.query("update tenants set program_version = $2 where project_id = $1", [projectId, version]);
}

/** The record of the project's backups (`last_backup`), replaced by `record`. */
export async function recordBackup(db: Queryable, projectId: string, record: object): Promise<void> {
  await db.query("update tenants set last_backup = $2 where project_id = $1", [
    projectId,
    JSON.stringify(record),
  ]);
}

/** `fields` merged over the record of the project's backups (what they do not name is kept). */
export async function mergeBackupRecord(db: Queryable, projectId: string, fields: object): Promise<void> {
  await db.query(
    "update tenants set last_backup = coalesce(last_backup, '{}'::jsonb) || $2::jsonb where project_id = $1",
    [projectId, JSON.stringify(fields)],
  );
}

/** The record of the project's backups; undefined when there is none (or no such project). */
export async function readBackupRecord<BackupRecord>(
  db: Queryable,
  projectId: string,
): Promise<BackupRecord | undefined> {
  const { rows } = await db.query<{ last_backup: BackupRecord | null }>(
    "select last_backup from tenants where project_id = $1",
    [projectId],
  );
  return rows[0]?.last_backup ?? undefined;
}

/** The project's allowlist as its spec says it (null when it has none). */
export async function tenantAllowlist(db: Queryable, projectId: string): Promise<string[] | null> {
  const { rows } = await db.query<{ allowlist: string[] | null }>(
    "select spec->'allowlist' as allowlist from tenants where project_id = $1",
    [projectId],
  );
  return rows[0]?.allowlist ?? null;
}

/** Live tenants, oldest first, with the tenant program version each is on. */
export async function liveTenantVersions(
  db: Queryable,
): Promise<{ project_id: string; program_version: string | null; state: TenantState }[]> {
  return (
    await db.query<{ project_id: string; program_version: string | null; state: TenantState }>(
      `select project_id, program_version, state from tenants where state <> 'deleted'
       order by created_at, project_id`,
    )
  ).rows;
}

/** Live tenants' subnets (the credential gateway listens on each one's gateway address). */
export async function liveTenantSubnets(db: Queryable): Promise<{ project_id: string; subnet: string }[]> {
  return (
    await db.query<{ project_id: string; subnet: string }>(
      "select project_id, subnet from tenants where subnet is not null and state <> 'deleted'",
    )
  ).rows;
}

/** Live kubernetes tenants with an SSH port: the SSH gateway's listeners, with each one's authorized key. */
export async function kubernetesSshTenants(
  db: Queryable,
): Promise<{ project_id: string; ssh_port: number; public_key: string | null }[]> {
  return (
    await db.query<{ project_id: string; ssh_port: number; public_key: string | null }>(
      `select project_id, ssh_port, spec->>'sshPublicKey' as public_key from tenants
        where spec->>'backend' = 'kubernetes' and ssh_port is not null and state <> 'deleted'`,
    )
  ).rows;
}

/**
 * The SSH ports of the sandboxes asleep now (runtime/tenants/wake.ts) with no operation pending or running:
 * the ports the SSH waker may hold while nothing else needs them. A Kubernetes tenant's port is its SSH
 * gateway's, always.
 */
export async function sleepingSshPorts(db: Queryable): Promise<{ project_id: string; ssh_port: number }[]> {
  return (
    await db.query<{ project_id: string; ssh_port: number }>(
      `select t.project_id, t.ssh_port from tenants t
        where t.state = 'stopped' and t.ssh_port is not null
          and coalesce(t.spec->>'backend', 'container') <> 'kubernetes'
          and ${asleepSql("t.project_id")}
          and not exists (select 1 from operations o
                           where o.project_id = t.project_id and o.state in ('pending', 'running'))
        order by t.project_id`,
    )
  ).rows;
}

/** Running tenants, by project id. */
export async function runningTenants(db: Queryable): Promise<TenantSpecRow[]> {
  return (
    await db.query<TenantSpecRow>(
      "select project_id, spec from tenants where state = 'running' order by project_id",
    )
  ).rows;
}

/** Running tenants of these backends, by project id, with the record of their backups. */
export async function runningTenantsOfBackends<BackupRecord>(
  db: Queryable,
  backends: readonly string[],
): Promise<(TenantSpecRow & { last_backup: BackupRecord | null })[]> {
  return (
    await db.query<TenantSpecRow & { last_backup: BackupRecord | null }>(
      `select project_id, spec, last_backup from tenants
        where state = 'running' and coalesce(spec->>'backend', 'container') = any($1::text[])
        order by project_id`,
      [backends],
    )
  ).rows;
}

/** Tenants meant to be running, recorded running, with no operation pending or running on them. */
export async function settledRunningTenants(db: Queryable): Promise<TenantSpecRow[]> {
  return (
    await db.query<TenantSpecRow>(
      `select t.project_id, t.spec
         from tenants t
        where t.state = 'running' and (t.spec->>'running')::boolean
          and not exists (select 1 from operations o where o.project_id = t.project_id
                           and o.state in ('pending', 'running'))`,
    )
  ).rows;
}

/** Live tenants by state, those of `exceptOwner` left out (the warm pool's unclaimed members). */
export async function tenantCountsByState(
  db: Queryable,
  exceptOwner: string,
): Promise<{ state: string; n: number }[]> {
  return (
    await db.query<{ state: string; n: number }>(
      "select state, count(*)::int as n from tenants where state <> 'deleted' and owner_id <> $1 group by state",
      [exceptOwner],
    )
  ).rows;
}

/** The front-door ports the project's spec declares: null when it declares none, undefined without a tenant. */
export async function tenantPorts(
  db: Queryable,
  projectId: string,
): Promise<TenantSpec["ports"] | null | undefined> {
  const { rows } = await db.query<{ ports: TenantSpec["ports"] | null }>(
    "select spec->'ports' as ports from tenants where project_id = $1",
    [projectId],
  );
  return rows[0]?.ports;
}

/**
 * The record of the project's backups and the backend its spec names (null when it names none); undefined
 * when there is no such tenant.
 */
export async function backupRecordAndBackend<BackupRecord>(
  db: Queryable,
  projectId: string,
): Promise<{ last_backup: BackupRecord | null; backend: string | null } | undefined> {
  const { rows } = await db.query<{ last_backup: BackupRecord | null; backend: string | null }>(
    "select last_backup, spec->>'backend' as backend from tenants where project_id = $1",
    [projectId],
  );
  return rows[0];
}
