// A user's agent configuration and logins (docs/api.md, "Agent configuration and logins"): one store per user
// that the user's new sandboxes get, and subscription logins a project opts into as project secrets of kind
// file, written at the agent's login path and removed from every running sandbox by a logout.
import { HttpError } from "../../errors.js";
import type { Database } from "../../store/db.js";
import {
  configFiles,
  deleteLogin,
  forgetDelivery,
  liveProjectsOf,
  logins,
  projectsWithSecret,
  replaceConfigFiles,
  upsertLogin,
} from "../../store/agent-config.js";
import { deleteSecret } from "../../store/secrets.js";
import type { SecretBox } from "../../secrets.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import { putSecret } from "../../tenants/project-secrets.js";
import { requestOperation, TenantRequestError } from "../../tenants/service.js";
import type { Routes } from "../route.js";
import type { AgentDelivery } from "./delivery.js";
import { AGENTS, configProblem, loginProblem, type AgentName } from "../../../lib/agent-config-paths.js";
import {
  deleteAgentConfigRoute,
  getAgentConfigRoute,
  listLoginsRoute,
  logoutRoute,
  optInRoute,
  optOutRoute,
  putAgentConfigRoute,
  putLoginRoute,
} from "./schemas.js";

export interface AgentConfigRoutesOptions {
  readonly db: Database;
  readonly secrets: SecretBox;
  readonly delivery: AgentDelivery;
}

const iso = (at: Date | string) => new Date(at).toISOString();
const bytes = (text: string) => Buffer.byteLength(text, "utf8");

export function registerAgentConfigRoutes(routes: Routes, options: AgentConfigRoutesOptions): void {
  const { db, secrets: box, delivery } = options;

  /** The update of the project's stack that writes (or takes away) its /run/secrets; none for a project going away. */
  const update = async (projectId: string) => {
    try {
      const { operation } = await requestOperation(db, projectId, "update");
      return { id: operation.id, kind: operation.kind, state: operation.state };
    } catch (error) {
      if (error instanceof TenantRequestError) return null;
      throw error;
    }
  };

  /** Writes the project's login now when its sandbox runs; false when it does not (the delivery does, at its start). */
  const deliverNow = async (projectId: string, agent: AgentName) => {
    try {
      return await delivery.deliverLogin(projectId, AGENTS[agent].secret);
    } catch (error) {
      // Not running (or not reachable now): the delivery writes it when it sees the sandbox running.
      if (!(error instanceof SandboxNotRunningError))
        routes.app.log.warn({ err: error, projectId }, "agent login not written");
      return false;
    }
  };

  const summary = async (userId: string) => {
    const files = await configFiles(db, userId);
    return {
      files,
      bytes: files.reduce((sum, file) => sum + bytes(file.content), 0),
      updated_at:
        files.length === 0
          ? null
          : iso(
              files
                .map((f) => new Date(f.updated_at))
                .sort()
                .at(-1)!,
            ),
    };
  };

  routes.handle(getAgentConfigRoute, async ({ userId }) => {
    const { files, ...rest } = await summary(userId);
    return { files: files.map(({ path, content }) => ({ path, content })), ...rest };
  });

  routes.handle(putAgentConfigRoute, async ({ userId, body }) => {
    const problem = configProblem(body.files);
    if (problem) throw new HttpError(problem.status, "conflict", problem.message, { path: problem.path });
    await db.transaction((tx) => replaceConfigFiles(tx, userId, body.files));
    const { files, ...rest } = await summary(userId);
    return { files: files.map(({ path, content }) => ({ path, bytes: bytes(content) })), ...rest };
  });

  routes.handle(deleteAgentConfigRoute, async ({ reply, userId }) => {
    await replaceConfigFiles(db, userId, []);
    return reply.status(204).send();
  });

  routes.handle(listLoginsRoute, async ({ userId }) => ({
    logins: await Promise.all(
      (await logins(db, userId)).map(async (login) => {
        const agent = login.agent as AgentName;
        return {
          agent,
          path: AGENTS[agent].login,
          secret: AGENTS[agent].secret,
          updated_at: iso(login.updated_at),
          projects: await projectsWithSecret(db, userId, AGENTS[agent].secret),
        };
      }),
    ),
  }));

  routes.handle(putLoginRoute, async ({ userId, params: { agent }, body }) => {
    const problem = loginProblem(agent, body.content);
    if (problem) throw new HttpError(409, "not_a_login", problem, { agent });
    const updatedAt = await upsertLogin(db, userId, agent, box.seal(body.content));
    // Projects that opted in hold the login as their secret: the new one replaces it there and in the home.
    const projects = [];
    for (const projectId of await projectsWithSecret(db, userId, AGENTS[agent].secret)) {
      await putSecret(db, box, projectId, AGENTS[agent].secret, body.content, "file");
      await deliverNow(projectId, agent);
      projects.push({ project_id: projectId, operation: await update(projectId) });
    }
    return { agent, updated_at: iso(updatedAt), projects };
  });

  routes.handle(logoutRoute, async ({ userId, params: { agent } }) => {
    const { secret } = AGENTS[agent];
    const loginDeleted = await deleteLogin(db, userId, agent);
    const projects = [];
    // Every live project of the caller's, opted in or not: a fork's home, or a file put there by hand, holds
    // one as well.
    for (const project of await liveProjectsOf(db, userId)) {
      const secretDeleted = await deleteSecret(db, project.id, secret);
      const operation = secretDeleted ? await update(project.id) : null;
      const removal = await delivery.removeLogin(project.id, secret);
      projects.push({
        project_id: project.id,
        name: project.name,
        secret_deleted: secretDeleted,
        operation,
        removal,
      });
    }
    return { agent, login_deleted: loginDeleted, projects };
  });

  routes.handle(optInRoute, async ({ reply, userId, params: { id, agent } }) => {
    const login = (await logins(db, userId)).find((row) => row.agent === agent);
    if (!login)
      throw new HttpError(
        409,
        "no_login",
        `you have no stored login of ${AGENTS[agent].name}: store it first (PUT /auth/agent-logins/${agent}, \`sbx agent-config login ${agent}\`)`,
        { agent },
      );
    try {
      await putSecret(db, box, id, AGENTS[agent].secret, box.open(login.sealed), "file");
    } catch (error) {
      if (error instanceof RangeError) throw new HttpError(409, "conflict", error.message);
      throw error;
    }
    // Delivered anew, even where an earlier file was written: this is the login as stored now.
    await forgetDelivery(db, id, AGENTS[agent].secret);
    const delivered = await deliverNow(id, agent);
    return reply.status(202).send({
      agent,
      secret: AGENTS[agent].secret,
      operation: await update(id),
      delivered,
    });
  });

  routes.handle(optOutRoute, async ({ reply, params: { id, agent } }) => {
    const { secret } = AGENTS[agent];
    if (!(await deleteSecret(db, id, secret)))
      throw new HttpError(404, "not_found", `project ${id} has not opted into ${AGENTS[agent].name}'s login`);
    const operation = await update(id);
    const removal = await delivery.removeLogin(id, secret);
    return reply.status(202).send({ agent, secret, operation, removal });
  });
}
