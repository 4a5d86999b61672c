// The tables of users' agent configurations and logins (runtime/api/agent-config/): `agent_config_files`
// (each user's config files, plain text), `agent_logins` (each user's login files, sealed with the platform's
// key: the store never sees one) and `agent_deliveries` (what the runtime wrote into, or has still to remove
// from, each project's home).
import type { Queryable } from "./db.js";

export interface ConfigFileRow {
  readonly path: string;
  readonly content: string;
  readonly updated_at: Date | string;
}

/** Replaces the user's whole config with `files` (none: the config is gone). */
export async function replaceConfigFiles(
  db: Queryable,
  userId: string,
  files: readonly { path: string; content: string }[],
): Promise<void> {
  await db.query("delete from agent_config_files where user_id = $1", [userId]);
  for (const file of files)
    await db.query("insert into agent_config_files (user_id, path, content) values ($1, $2, $3)", [
      userId,
      file.path,
      file.content,
    ]);
}

/** The user's config files, by path. */
export async function configFiles(db: Queryable, userId: string): Promise<ConfigFileRow[]> {
  return (
    await db.query<ConfigFileRow>(
      "select path, content, updated_at from agent_config_files where user_id = $1 order by path",
      [userId],
    )
  ).rows;
}

/** Sets (or replaces) the user's login of `agent`, sealed; when it was written. */
export async function upsertLogin(
  db: Queryable,
  userId: string,
  agent: string,
  sealed: string,
): Promise<Date | string> {
  const { rows } = await db.query<{ updated_at: Date | string }>(
    `insert into agent_logins (user_id, agent, sealed) values ($1, $2, $3)
     on conflict (user_id, agent) do update set sealed = excluded.sealed, updated_at = now()
     returning updated_at`,
    [userId, agent, sealed],
  );
  return rows[0]!.updated_at;
}

export interface LoginRow {
  readonly agent: string;
  readonly sealed: string;
  readonly updated_at: Date | string;
}

/** The user's logins (sealed), by agent. */
export async function logins(db: Queryable, userId: string): Promise<LoginRow[]> {
  return (
    await db.query<LoginRow>(
      "select agent, sealed, updated_at from agent_logins where user_id = $1 order by agent",
      [userId],
    )
  ).rows;
}

/** Deletes the user's login of `agent`; false when there was none. */
export async function deleteLogin(db: Queryable, userId: string, agent: string): Promise<boolean> {
  const { rows } = await db.query(
    "delete from agent_logins where user_id = $1 and agent = $2 returning agent",
    [userId, agent],
  );
  return rows.length > 0;
}

/** The user's live projects (id, name, tenant state): where a login may be, and what logout reports on. */
export async function liveProjectsOf(
  db: Queryable,
  userId: string,
): Promise<{ id: string; name: string; state: string }[]> {
  return (
    await db.query<{ id: string; name: string; state: string }>(
      `select p.id, p.name, t.state from projects p join tenants t on t.project_id = p.id
        where p.user_id = $1 and t.state <> 'deleted' order by p.created_at`,
      [userId],
    )
  ).rows;
}

/** The user's live projects holding the project secret `name` (a login's). */
export async function projectsWithSecret(db: Queryable, userId: string, name: string): Promise<string[]> {
  return (
    await db.query<{ id: string }>(
      `select p.id from projects p join tenants t on t.project_id = p.id
         join project_secrets s on s.project_id = p.id and s.name = $2
        where p.user_id = $1 and t.state <> 'deleted' order by p.created_at`,
      [userId, name],
    )
  ).rows.map((row) => row.id);
}

/** `item`: `config`, or an agent's name for its login. `remove`: the login's file is to go at the next chance. */
export type DeliveryState = "delivered" | "remove";

/** Records what the runtime wrote into (or has to remove from) a project's home. */
export async function recordDelivery(
  db: Queryable,
  projectId: string,
  item: string,
  state: DeliveryState,
): Promise<void> {
  await db.query(
    `insert into agent_deliveries (project_id, item, state) values ($1, $2, $3)
     on conflict (project_id, item) do update set state = excluded.state, at = now()`,
    [projectId, item, state],
  );
}

/** Forgets a delivery (a login's file removed, or a config's delivery to be tried again). */
export async function forgetDelivery(db: Queryable, projectId: string, item: string): Promise<void> {
  await db.query("delete from agent_deliveries where project_id = $1 and item = $2", [projectId, item]);
}

/**
 * Claims the config's delivery to a project: true for the one caller that may write it (a row made now),
 * false when it was delivered (or is being) already.
 */
export async function claimConfigDelivery(db: Queryable, projectId: string): Promise<boolean> {
  const { rows } = await db.query(
    `insert into agent_deliveries (project_id, item, state) values ($1, 'config', 'delivered')
     on conflict (project_id, item) do nothing returning item`,
    [projectId],
  );
  return rows.length > 0;
}

/** Running projects whose owner has a config that none was written into yet, with the owner. */
export async function projectsAwaitingConfig(db: Queryable): Promise<{ id: string; user_id: string }[]> {
  return (
    await db.query<{ id: string; user_id: string }>(
      `select p.id, p.user_id from projects p join tenants t on t.project_id = p.id
        where t.state = 'running'
          and exists (select 1 from agent_config_files f where f.user_id = p.user_id)
          and not exists (select 1 from agent_deliveries d where d.project_id = p.id and d.item = 'config')`,
    )
  ).rows;
}

/**
 * Running projects holding a login secret (`file` delivery, one of `names`) not written into the home since
 * it last changed: the secret's name.
 */
export async function loginsAwaitingDelivery(
  db: Queryable,
  names: readonly string[],
): Promise<{ project_id: string; name: string }[]> {
  return (
    await db.query<{ project_id: string; name: string }>(
      `select s.project_id, s.name from project_secrets s join tenants t on t.project_id = s.project_id
        where t.state = 'running' and s.delivery = 'file' and s.name = any($1::text[])
          and not exists (select 1 from agent_deliveries d where d.project_id = s.project_id
                          and d.item = s.name and d.state = 'delivered' and d.at >= s.updated_at)`,
      [names],
    )
  ).rows;
}

/**
 * Running projects with a login file to remove: marked `remove` (a logout that found the sandbox stopped),
 * or delivered and its secret gone since (deleted through the secrets API).
 */
export async function loginsAwaitingRemoval(
  db: Queryable,
  names: readonly string[],
): Promise<{ project_id: string; name: string }[]> {
  return (
    await db.query<{ project_id: string; name: string }>(
      `select d.project_id, d.item as name from agent_deliveries d join tenants t on t.project_id = d.project_id
        where t.state = 'running' and d.item = any($1::text[])
          and (d.state = 'remove' or not exists (
                 select 1 from project_secrets s where s.project_id = d.project_id and s.name = d.item))`,
      [names],
    )
  ).rows;
}
