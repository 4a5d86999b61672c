// The platform's sandboxes as MCP tools (docs/mcp.md), defined once over the SDK's client (sdk/src/): `sbx mcp`
// serves them on stdio with the CLI's client, the runtime's /mcp on streamable HTTP with a client that
// carries the caller's API key. Every tool is an API request made as the caller, so the API's own checks
// (ownership, input, limits) decide; a refusal is a tool result with `isError` and the API's message, never
// a protocol error. Each description says what the tool costs and what it cannot do, for the model to weigh.
import { randomBytes } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import type { CallToolResult, ServerNotification, ServerRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { Files, Sandbox, type Client } from "../sdk/src/index.js";
import { answer, execText, failure, listingText, sandboxLine } from "./format.js";

/** The longest a run_command may ask for (its default: DEFAULT_TIMEOUT_S). */
export const MAX_TIMEOUT_S = 600;
export const DEFAULT_TIMEOUT_S = 120;
/** How long create_sandbox waits for the sandbox to run before it answers that it is still starting. */
export const CREATE_WAIT_S = 300;
/** The largest file read_file returns, and the most content write_file takes (characters). */
export const MAX_READ_BYTES = 1024 * 1024;
export const MAX_WRITE_CHARS = 1024 * 1024;
/** How often a long call tells a client that asked for progress that it is still at work. */
const PROGRESS_EVERY_MS = 5_000;

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** A required argument's message when it is missing, else the type's. */
const required = (what: string) => ({
  error: (issue: { input: unknown }) =>
    issue.input === undefined ? `is missing: give ${what}` : `must be ${what}`,
});

const SandboxId = z
  .string(required("a sandbox id"))
  .pipe(z.uuid({ message: "must be a sandbox id (a UUID, as create_sandbox and list_sandboxes give it)" }))
  .describe("the sandbox's id (create_sandbox and list_sandboxes give it)");
const SandboxPath = z
  .string(required("a path (a string)"))
  .min(1, { message: "must name a path" })
  .max(4096)
  .describe(
    "absolute, or relative to /workspace (else /home/agent); must stay inside /workspace or /home/agent",
  );

const LIMITS =
  "It runs as the unprivileged user `agent` (no root, no sudo); network egress reaches only the hosts on the " +
  "project's allowlist (its owner sets it), everything else is refused.";

/**
 * While `work` runs, a progress notification every few seconds when the client asked for progress (its
 * request's progressToken): a client that resets its timeout on progress then waits through a long call.
 */
async function withProgress<T>(extra: Extra, what: string, work: Promise<T>): Promise<T> {
  const token = extra._meta?.progressToken;
  if (token === undefined) return work;
  const started = Date.now();
  const timer = setInterval(() => {
    const seconds = Math.round((Date.now() - started) / 1000);
    void extra
      .sendNotification({
        method: "notifications/progress",
        params: { progressToken: token, progress: seconds, message: `${what}: ${seconds} s` },
      })
      .catch(() => undefined);
  }, PROGRESS_EVERY_MS);
  try {
    return await work;
  } finally {
    clearInterval(timer);
  }
}

/** A tool's work, its every failure an `isError` result with the message the API gave. */
async function attempt(work: () => Promise<CallToolResult>): Promise<CallToolResult> {
  try {
    return await work();
  } catch (error) {
    return failure(error);
  }
}

/** The text of `bytes`, or undefined when they are not UTF-8. */
function utf8(bytes: Uint8Array): string | undefined {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

/** An MCP server whose tools act on the sandboxes of `client`'s caller. */
export function sandboxMcpServer(client: Client, version: string): McpServer {
  const server = new McpServer(
    { name: "agent-sandbox", version },
    {
      instructions:
        "Sandboxes of the Agent Sandbox Platform: isolated Linux machines to run commands and edit files in. " +
        "list_sandboxes first (reuse one: creating a sandbox is slow), create_sandbox only when none fits, " +
        "destroy_sandbox only when asked to.",
    },
  );

  server.registerTool(
    "list_sandboxes",
    {
      title: "List sandboxes",
      description:
        "The caller's sandboxes: id, status (running, stopped, creating...) and name. Costs nothing.",
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async () =>
      attempt(async () => {
        const sandboxes = await Sandbox.list(client);
        const views = sandboxes.map((s) => s.view);
        return answer(
          views.length === 0 ? "no sandboxes (create_sandbox makes one)" : views.map(sandboxLine).join("\n"),
          {
            sandboxes: views.map((v) => ({ id: v.project_id, name: v.name, status: v.status })),
          },
        );
      }),
  );

  server.registerTool(
    "create_sandbox",
    {
      title: "Create a sandbox",
      description:
        "Creates a new sandbox (a project of the caller's: its own isolated machine, network and tenant " +
        "stack) and waits until it runs. Expensive: it takes seconds to a minute or more, and counts against the " +
        `caller's project quota; reuse a sandbox from list_sandboxes where one fits. Waits at most ${CREATE_WAIT_S} s, ` +
        `then answers with the id of a sandbox still starting. ${LIMITS}`,
      inputSchema: {
        name: z
          .string()
          .min(1)
          .max(100)
          .optional()
          .describe("a name to tell it apart (default: mcp- and a random suffix)"),
      },
      annotations: {
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: false,
        openWorldHint: false,
      },
    },
    async ({ name }, extra) =>
      attempt(async () => {
        const created = await Sandbox.create(
          client,
          { name: name ?? `mcp-${randomBytes(3).toString("hex")}` },
          { wait: false },
        );
        const running = await withProgress(
          extra,
          "creating the sandbox",
          created.waitFor("running", CREATE_WAIT_S * 1000).then(
            () => true,
            (error: unknown) => {
              if ((error as Error).name === "TimeoutError") return false;
              throw error;
            },
          ),
        );
        const view = created.view;
        const text = running
          ? `sandbox ${view.project_id} ("${view.name}") is running`
          : `sandbox ${view.project_id} ("${view.name}") is still ${view.status} after ${CREATE_WAIT_S} s: list_sandboxes shows when it runs`;
        return answer(text, { id: view.project_id, name: view.name, status: view.status });
      }),
  );

  server.registerTool(
    "run_command",
    {
      title: "Run a command",
      description:
        "Runs a command in a sandbox and answers its exit code, stdout and stderr. `command` is a shell line " +
        "(run by bash -c) or an argv array (no shell). It is killed with its whole process tree after " +
        `timeout_s (default ${DEFAULT_TIMEOUT_S}, at most ${MAX_TIMEOUT_S}); start long jobs in the background ` +
        "(nohup ... &) and poll them. Each stream's output is shown up to 20,000 characters (its head and tail, " +
        `the cut said). ${LIMITS} Every command is recorded in the project's audit.`,
      inputSchema: {
        sandbox_id: SandboxId,
        command: z
          .union([
            z.string().min(1, { message: "must not be empty" }),
            z.array(z.string()).min(1, { message: "must name a program" }),
          ])
          .describe("a shell line (bash -c), or an argv array run without a shell"),
        cwd: z
          .string()
          .max(4096)
          .optional()
          .describe("working directory (default /workspace, else /home/agent)"),
        env: z.record(z.string(), z.string()).optional().describe("extra environment variables"),
        timeout_s: z
          .number()
          .int({ message: "must be a whole number of seconds" })
          .min(1, { message: "must be at least 1 second" })
          .max(MAX_TIMEOUT_S, {
            message: `must be at most ${MAX_TIMEOUT_S} seconds (run longer jobs in the background)`,
          })
          .optional()
          .describe(
            `seconds until the command is killed (default ${DEFAULT_TIMEOUT_S}, at most ${MAX_TIMEOUT_S})`,
          ),
      },
      annotations: {
        readOnlyHint: false,
        destructiveHint: true,
        idempotentHint: false,
        openWorldHint: false,
      },
    },
    async ({ sandbox_id, command, cwd, env, timeout_s }, extra) =>
      attempt(async () => {
        const timeout = timeout_s ?? DEFAULT_TIMEOUT_S;
        const sandbox = await Sandbox.get(client, sandbox_id);
        const result = await withProgress(
          extra,
          "running",
          sandbox.exec(command, {
            timeout_s: timeout,
            ...(cwd === undefined ? {} : { cwd }),
            ...(env === undefined ? {} : { env }),
          }),
        );
        return answer(execText(result, timeout), {
          exit_code: result.exit_code,
          timed_out: result.timed_out,
          duration_ms: result.duration_ms,
          stdout_bytes: result.stdout_bytes,
          stderr_bytes: result.stderr_bytes,
        });
      }),
  );

  server.registerTool(
    "read_file",
    {
      title: "Read a file",
      description:
        `Reads a file of a sandbox, up to ${MAX_READ_BYTES / 1024 / 1024} MiB (a larger one is refused: read parts of it with ` +
        "run_command, e.g. sed -n or head -c). Text is answered as it is; a file that is not UTF-8 needs " +
        "encoding base64. Only paths inside /workspace and /home/agent can be read.",
      inputSchema: {
        sandbox_id: SandboxId,
        path: SandboxPath,
        encoding: z.enum(["utf8", "base64"]).default("utf8").describe("utf8 (text) or base64 (any bytes)"),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ sandbox_id, path, encoding }) =>
      attempt(async () => {
        const files = new Files(client, sandbox_id);
        const { entries, type, path: resolved } = await files.list(path, { limit: 1 });
        if (type !== "file") return failure(new Error(`${resolved} is a directory: list_directory lists it`));
        const size = entries[0]?.size ?? 0;
        if (size > MAX_READ_BYTES)
          return failure(
            new Error(
              `${resolved} is ${size} bytes, over read_file's ${MAX_READ_BYTES}: read parts of it with run_command (sed -n, head -c, tail -c)`,
            ),
          );
        const bytes = await files.read(path);
        if (encoding === "base64")
          return answer(bytes.toString("base64"), { path: resolved, size: bytes.length });
        const text = utf8(bytes);
        if (text === undefined)
          return failure(new Error(`${resolved} is not UTF-8 text: read it with encoding base64`));
        return answer(text, { path: resolved, size: bytes.length });
      }),
  );

  server.registerTool(
    "write_file",
    {
      title: "Write a file",
      description:
        "Writes a file in a sandbox, replacing it if it exists and making its parent directories. Content is " +
        `at most ${MAX_WRITE_CHARS} characters (text, or base64 for bytes); larger files: write parts and join ` +
        "them with run_command. Only paths inside /workspace and /home/agent can be written, as the user agent.",
      inputSchema: {
        sandbox_id: SandboxId,
        path: SandboxPath,
        content: z
          .string()
          .max(MAX_WRITE_CHARS, { message: `must be at most ${MAX_WRITE_CHARS} characters` })
          .describe("the file's content"),
        encoding: z
          .enum(["utf8", "base64"])
          .default("utf8")
          .describe("how content is given: utf8 text or base64 bytes"),
        mode: z
          .string()
          .regex(/^[0-7]{3,4}$/, { message: "must be octal permission bits such as 644 or 0755" })
          .optional()
          .describe("permission bits, e.g. 755 for a script (default 644)"),
      },
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    },
    async ({ sandbox_id, path, content, encoding, mode }) =>
      attempt(async () => {
        if (encoding === "base64" && !/^[A-Za-z0-9+/]*={0,2}$/.test(content))
          return failure(new Error("content is not base64 (A-Z, a-z, 0-9, +, / and = padding)"));
        const bytes = encoding === "base64" ? Buffer.from(content, "base64") : Buffer.from(content, "utf8");
        const written = await new Files(client, sandbox_id).write(path, bytes, mode);
        return answer(`wrote ${written.size} bytes to ${written.path} (mode ${written.mode})`, written);
      }),
  );

  server.registerTool(
    "list_directory",
    {
      title: "List a directory",
      description:
        "Lists a directory of a sandbox: one entry per line (type, size, mode, modified time, name), up to " +
        "`limit` entries with a cursor for the rest. Only paths inside /workspace and /home/agent can be listed.",
      inputSchema: {
        sandbox_id: SandboxId,
        path: SandboxPath.optional(),
        limit: z.number().int().min(1).max(1000).default(200).describe("entries at most (default 200)"),
        cursor: z
          .string()
          .max(400)
          .optional()
          .describe("the cursor a longer listing's answer gave, to go on"),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ sandbox_id, path, limit, cursor }) =>
      attempt(async () => {
        const listing = await new Files(client, sandbox_id).list(path, {
          limit,
          ...(cursor ? { cursor } : {}),
        });
        return answer(`${listing.path}:\n${listingText(listing)}`, {
          path: listing.path,
          entries: listing.entries,
          next_cursor: listing.next_cursor,
        });
      }),
  );

  server.registerTool(
    "destroy_sandbox",
    {
      title: "Destroy a sandbox",
      description:
        "Destroys a sandbox: its machine, its files, its snapshots and its tenant stack are deleted. Final: nothing of it can " +
        "be recovered, and any work not copied out is lost. Only when the user asked for it.",
      inputSchema: { sandbox_id: SandboxId },
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    },
    async ({ sandbox_id }) =>
      attempt(async () => {
        const sandbox = await Sandbox.get(client, sandbox_id);
        await sandbox.delete();
        return answer(`sandbox ${sandbox_id} ("${sandbox.view.name}") is being destroyed`, {
          id: sandbox_id,
          status: "deleting",
        });
      }),
  );

  return server;
}
