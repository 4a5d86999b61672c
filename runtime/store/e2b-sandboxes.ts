// The `e2b_sandboxes` table: the projects made through the E2B-compatible API (api/e2b/), with what the SDK
// asked for (template, metadata, environment) and when each one's timeout ends.
import type { Queryable } from "./db.js";

/** An E2B sandbox whose project is not deleted, with its owner and its tenant's state. */
export interface E2bSandboxRow {
  readonly project_id: string;
  readonly owner_id: string;
  readonly template: string;
  readonly metadata: Record<string, string>;
  readonly env_vars: Record<string, string>;
  readonly timeout_at: Date;
  readonly on_timeout: "kill" | "pause";
  readonly created_at: Date;
  readonly state: string;
}

const SANDBOX_QUERY = `
  select e.project_id, p.user_id as owner_id, e.template, e.metadata, e.env_vars, e.timeout_at, e.on_timeout,
         e.created_at, t.state
    from e2b_sandboxes e join projects p on p.id = e.project_id join tenants t on t.project_id = e.project_id`;

/** The live E2B sandbox with this id (any owner's: the caller checks whose it is); undefined for none. */
export async function liveE2bSandbox(db: Queryable, id: string): Promise<E2bSandboxRow | undefined> {
  const { rows } = await db.query<E2bSandboxRow>(
    `${SANDBOX_QUERY} where e.project_id = $1 and t.state <> 'deleted'`,
    [id],
  );
  return rows[0];
}
