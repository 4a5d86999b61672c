// The agent-config routes' declarations: one per endpoint, what registers, validates and documents it.
import { z } from "zod";
import { notFound } from "../answers.js";
import { EmptyBody } from "../projects/schemas.js";
import { route } from "../route.js";
import { chars } from "../validation.js";
import {
  AGENT_NAMES,
  AGENTS,
  CONFIG_FILES,
  CONFIG_PATH_PATTERN,
  CONFIG_TREES,
  configPathProblem,
  MAX_CONFIG_FILE_BYTES,
  MAX_CONFIG_FILE_CHARS,
  MAX_CONFIG_FILES,
  MAX_LOGIN_CHARS,
} from "../../../lib/agent-config-paths.js";

const Agent = z.enum(AGENT_NAMES, {
  error: (issue) =>
    `unknown agent ${JSON.stringify(issue.input)}: one of ${AGENT_NAMES.join(", ")} (${AGENT_NAMES.map((a) => AGENTS[a].name).join(", ")})`,
});
export const AgentParams = z.object({ agent: Agent }).strict();
export const ProjectAgentParams = z
  .object({ id: z.uuid({ message: "must be a project id (UUID)" }), agent: Agent })
  .strict();

/** A path the config may hold: the document states it as a pattern; a refusal names the path and why. */
const ConfigPath = z
  .string()
  .superRefine((path, context) => {
    const problem = configPathProblem(path);
    if (problem) context.addIssue({ code: "custom", message: problem, input: path });
  })
  .meta({
    pattern: CONFIG_PATH_PATTERN,
    description: `relative to the agent's home: ${CONFIG_FILES.join(", ")}, or a file under ${CONFIG_TREES.map((dir) => `${dir}/`).join(", ")}`,
    examples: [".claude/settings.json", ".codex/config.toml", ".claude/commands/review.md"],
  });

const ConfigFile = z
  .object({
    path: ConfigPath,
    // No NUL (a text column takes none), spelt \u0000 as every regex dialect reads it.
    content: chars(0, MAX_CONFIG_FILE_CHARS).regex(/^[^\u0000]*$/, {
      message: "must not contain NUL characters",
    }),
  })
  .strict();

export const PutAgentConfigBody = z
  .object({
    files: z
      .array(ConfigFile)
      .max(MAX_CONFIG_FILES)
      .meta({
        description: `at most ${MAX_CONFIG_FILES} files, each at most ${MAX_CONFIG_FILE_CHARS} characters (${MAX_CONFIG_FILE_BYTES / 1024} KiB in UTF-8); each path once and .claude.json holding mcpServers alone (409 otherwise)`,
      }),
  })
  .strict();

const Stamp = z.iso.datetime().nullable();
export const AgentConfigBody = z
  .object({
    files: z.array(z.object({ path: z.string(), content: z.string() }).strict()),
    bytes: z.int(),
    updated_at: Stamp.meta({ description: "when it was pushed; null: the user has none" }),
  })
  .strict();
export const AgentConfigSummaryBody = z
  .object({
    files: z.array(z.object({ path: z.string(), bytes: z.int() }).strict()),
    bytes: z.int(),
    updated_at: Stamp,
  })
  .strict();

export const PutLoginBody = z
  .object({
    content: chars(2, MAX_LOGIN_CHARS)
      .regex(/^[^\u0000]*$/, { message: "must not contain NUL characters" })
      .meta({
        description: `the content of the agent's login file (${AGENT_NAMES.map((a) => AGENTS[a].login).join(", ")}), a JSON object; never answered back`,
      }),
  })
  .strict();

const OperationRef = z.object({ id: z.string(), kind: z.string(), state: z.string() }).strict();
const Removal = z.enum(["removed", "absent", "at_next_start"]).meta({
  description:
    "removed: the file was in the running sandbox and is gone; absent: the running sandbox had none; at_next_start: the sandbox is not running, the file goes when it starts",
});

export const LoginListBody = z
  .object({
    logins: z.array(
      z
        .object({
          agent: Agent,
          path: z.string().meta({ description: "where the file goes, relative to the agent's home" }),
          secret: z.string().meta({ description: "the project secret (kind file) that delivers it" }),
          updated_at: z.iso.datetime(),
          projects: z.array(z.string()).meta({ description: "the projects that opted in" }),
        })
        .strict(),
    ),
  })
  .strict();

export const PutLoginAnswer = z
  .object({
    agent: Agent,
    updated_at: z.iso.datetime(),
    /** Projects that had opted in: their secret holds the new login, and their home gets it. */
    projects: z.array(z.object({ project_id: z.string(), operation: OperationRef.nullable() }).strict()),
  })
  .strict();

export const LogoutAnswer = z
  .object({
    agent: Agent,
    login_deleted: z.boolean().meta({ description: "false: the user had no stored login of the agent" }),
    projects: z.array(
      z
        .object({
          project_id: z.string(),
          name: z.string(),
          secret_deleted: z.boolean(),
          /** The update of the stack that takes /run/secrets/<secret> away, when the project held it. */
          operation: OperationRef.nullable(),
          removal: Removal,
        })
        .strict(),
    ),
  })
  .strict();

export const OptInAnswer = z
  .object({
    agent: Agent,
    secret: z.string(),
    operation: OperationRef.nullable(),
    delivered: z
      .boolean()
      .meta({ description: "written into the running sandbox's home now; false: at its next start" }),
  })
  .strict();

export const OptOutAnswer = z
  .object({ agent: Agent, secret: z.string(), operation: OperationRef.nullable(), removal: Removal })
  .strict();

export const getAgentConfigRoute = route({
  method: "get",
  path: "/auth/agent-config",
  summary: "The caller's agent configuration: the files new sandboxes get in the agent's home",
  access: "user",
  responses: { 200: { description: "the config (no files when none was pushed)", body: AgentConfigBody } },
});

export const putAgentConfigRoute = route({
  method: "put",
  path: "/auth/agent-config",
  summary:
    "Replace the caller's agent configuration (Claude Code, Codex, Gemini CLI settings, instructions, commands, MCP servers); never a login",
  body: PutAgentConfigBody,
  // The largest config the document allows with every character escaped in JSON (\uXXXX: six bytes for
  // one), its paths and the syntax around them: a valid body is never refused for its size.
  bodyLimit: MAX_CONFIG_FILES * (MAX_CONFIG_FILE_CHARS * 6 + 4096) + 4096,
  access: "user",
  responses: {
    200: { description: "stored", body: AgentConfigSummaryBody },
    409: "a path given twice, or .claude.json holding more than mcpServers (or no JSON object)",
  },
});

export const deleteAgentConfigRoute = route({
  method: "delete",
  path: "/auth/agent-config",
  summary: "Forget the caller's agent configuration (sandboxes that got it keep their files)",
  body: EmptyBody,
  bodyOptional: true,
  access: "user",
  responses: { 204: { description: "forgotten" } },
});

export const listLoginsRoute = route({
  method: "get",
  path: "/auth/agent-logins",
  summary: "The caller's stored agent logins and the projects that opted in (never a login's content)",
  access: "user",
  responses: { 200: { description: "the logins", body: LoginListBody } },
});

export const putLoginRoute = route({
  method: "put",
  path: "/auth/agent-logins/{agent}",
  summary:
    "Store (or replace) the caller's login of an agent, sealed; projects that opted in get the new one",
  params: AgentParams,
  body: PutLoginBody,
  access: "user",
  responses: {
    200: { description: "stored", body: PutLoginAnswer },
    409: "the content is no JSON object",
  },
});

export const logoutRoute = route({
  method: "delete",
  path: "/auth/agent-logins/{agent}",
  summary:
    "Log an agent out everywhere: the stored login and every project's login secret deleted, its file removed from every running sandbox of the caller now (the others at their next start)",
  params: AgentParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "user",
  responses: { 200: { description: "what happened in each project", body: LogoutAnswer } },
});

export const optInRoute = route({
  method: "put",
  path: "/projects/{id}/agent-logins/{agent}",
  summary:
    "Give the project the caller's stored login of an agent: a project secret of kind file, written at the agent's login path in the home (0600, the agent's)",
  params: ProjectAgentParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "owner",
  responses: {
    202: {
      description: "opted in; the update in `operation` writes /run/secrets/<secret>",
      body: OptInAnswer,
    },
    404: notFound,
    409: "the caller has no stored login of the agent, or the project holds as many secrets as it may",
  },
});

export const optOutRoute = route({
  method: "delete",
  path: "/projects/{id}/agent-logins/{agent}",
  summary: "Take an agent's login out of the project: its secret deleted, its file removed from the home",
  params: ProjectAgentParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "owner",
  responses: {
    202: { description: "taken out", body: OptOutAnswer },
    404: "no such project, or it has not opted in",
  },
});

/** The routes above, in the document's order. */
export const agentConfigRoutes = [
  getAgentConfigRoute,
  putAgentConfigRoute,
  deleteAgentConfigRoute,
  listLoginsRoute,
  putLoginRoute,
  logoutRoute,
  optInRoute,
  optOutRoute,
] as const;
