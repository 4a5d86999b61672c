import { randomUUID } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { SquidTenantInputs } from "../../provider/resources/squid-tenant.js";
import { generateSshKeyPair } from "../../provider/ssh-keygen.js";
import type { Database, Queryable } from "../db.js";
import { HttpError } from "../errors.js";
import { type Operation } from "../reconciler/operations.js";
import type { SecretBox } from "../secrets.js";
import {
  requestCreateIn,
  requestOperation,
  TenantRequestError,
  type TenantDefaults,
  type TenantState,
} from "../tenants/service.js";
import type { TenantSpec } from "../../stacks/tenant/spec.js";
import type { Auth } from "./auth.js";
import { parseInput } from "./validation.js";

export interface ProjectRoutesOptions {
  readonly db: Database;
  readonly auth: Auth;
  readonly defaults: TenantDefaults;
  readonly secrets: SecretBox;
  /** The address clients use for SSH (the host's public name or IP). */
  readonly publicHost: string;
}

const ProjectName = z
  .string()
  .trim()
  .min(1, { message: "must not be empty" })
  .max(100, { message: "must be at most 100 characters" })
  .refine((name) => !/[\p{Cc}]/u.test(name), { message: "must not contain control characters" });

export const CreateProjectBody = z
  .object({
    name: ProjectName,
    // The same rules the tenant's Squid allowlist applies, checked before anything is recorded.
    allowlist: SquidTenantInputs.shape.domains.max(200).optional(),
  })
  .strict();
export const ProjectParams = z.object({ id: z.uuid({ message: "must be a project id (UUID)" }) }).strict();
const IdempotencyKey = z
  .string()
  .regex(/^[A-Za-z0-9_.:-]{1,200}$/, { message: "must be 1-200 characters of [A-Za-z0-9_.:-]" })
  .optional();

/** Seed 000's project states; a tenant being reconfigured shows the state it is heading for. */
export type ProjectStatus = "creating" | "running" | "stopped" | "deleting" | "error";

export function projectStatus(state: TenantState, spec: Pick<TenantSpec, "running">): ProjectStatus {
  switch (state) {
    case "creating":
    case "running":
    case "stopped":
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
  ssh_private_key: string;
  created_at: Date;
  state: TenantState;
  spec: TenantSpec;
  ssh_port: number | null;
  last_error: string | null;
}

const PROJECT_COLUMNS = `p.id, p.name, p.ssh_private_key, p.created_at, t.state, t.spec, t.ssh_port, t.last_error
  from projects p join tenants t on t.project_id = p.id`;

/** One of the caller's live projects; another user's project is indistinguishable from none (404). */
async function ownProject(db: Queryable, userId: string, id: string): Promise<ProjectRow> {
  const { rows } = await db.query<ProjectRow>(
    `select ${PROJECT_COLUMNS} where p.id = $1 and p.user_id = $2 and t.state <> 'deleted'`,
    [id, userId],
  );
  if (!rows[0]) throw new HttpError(404, "not_found", "project not found");
  return rows[0];
}

async function currentOperation(db: Queryable, projectId: string) {
  const { rows } = await db.query<Operation & { events: number; last_event: Record<string, unknown> | null }>(
    `select o.*, (select count(*)::int from operation_events e where e.operation_id = o.id) as events,
            (select e.event from operation_events e where e.operation_id = o.id order by e.seq desc limit 1) as last_event
       from operations o where o.project_id = $1 order by o.seq desc limit 1`,
    [projectId],
  );
  const op = rows[0];
  return op
    ? {
        id: op.id,
        kind: op.kind,
        state: op.state,
        error: op.error,
        progress: { events: op.events, last: op.last_event },
      }
    : null;
}

export function registerProjectRoutes(app: FastifyInstance, options: ProjectRoutesOptions): void {
  const { db, auth, secrets } = options;

  const view = async (row: ProjectRow, privateKey?: string) => ({
    project_id: row.id,
    name: row.name,
    status: projectStatus(row.state, row.spec),
    error: row.state === "error" ? row.last_error : null,
    created_at: row.created_at,
    ssh: {
      host: options.publicHost,
      port: row.ssh_port,
      user: "agent",
      ...(privateKey === undefined ? {} : { private_key: privateKey }),
    },
    // The terminal proxy (its own issue) issues single-use tickets for this URL.
    terminal_url: null,
    operation: await currentOperation(db, row.id),
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
      `select ${PROJECT_COLUMNS} where p.user_id = $1 and t.state <> 'deleted' order by p.created_at, p.id`,
      [userId],
    );
    return { projects: await Promise.all(rows.map((row) => view(row))) };
  });

  app.post("/projects", async (request, reply) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const body = parseInput(CreateProjectBody, request.body, "body");
    const key = parseInput(IdempotencyKey, request.headers["idempotency-key"], "headers");
    const scopedKey = key ? `${userId}:create:${key}` : undefined;
    if (scopedKey) {
      const { rows } = await db.query<{ project_id: string }>(
        "select project_id from operations where idempotency_key = $1",
        [scopedKey],
      );
      if (rows[0]) {
        const existing = await ownProject(db, userId, rows[0].project_id);
        return reply.status(200).send(await view(existing, secrets.open(existing.ssh_private_key)));
      }
    }
    const projectId = randomUUID();
    const keys = await generateSshKeyPair(`agent@${projectId}`);
    await db
      .transaction(async (tx) => {
        await requestCreateIn(tx, options.defaults, {
          projectId,
          ownerId: userId,
          allowlist: body.allowlist,
          sshPublicKey: keys.publicKey,
          idempotencyKey: scopedKey,
        });
        await tx.query("insert into projects (id, user_id, name, ssh_private_key) values ($1, $2, $3, $4)", [
          projectId,
          userId,
          body.name,
          secrets.seal(keys.privateKey),
        ]);
      })
      .catch(tenantError);
    return reply.status(202).send(await view(await ownProject(db, userId, projectId), keys.privateKey));
  });

  app.get("/projects/:id", async (request) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    return view(await ownProject(db, userId, id));
  });

  for (const kind of ["start", "stop"] as const) {
    app.post(`/projects/:id/${kind}`, async (request, reply) => {
      const userId = await auth.authenticate(request.headers.authorization);
      const { id } = parseInput(ProjectParams, request.params, "params");
      await ownProject(db, userId, id);
      await requestOperation(db, id, kind).catch(tenantError);
      return reply.status(202).send(await view(await ownProject(db, userId, id)));
    });
  }

  app.delete("/projects/:id", async (request, reply) => {
    const userId = await auth.authenticate(request.headers.authorization);
    const { id } = parseInput(ProjectParams, request.params, "params");
    await ownProject(db, userId, id);
    await requestOperation(db, id, "delete").catch(tenantError);
    return reply.status(202).send(await view(await ownProject(db, userId, id)));
  });
}
