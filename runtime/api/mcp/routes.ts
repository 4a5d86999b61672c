// POST, GET and DELETE /mcp: the platform's MCP server (mcp/tools.ts, the same tools `sbx mcp` serves) on
// the MCP streamable-HTTP transport. The route layer authenticates every request (an API key only: a
// revoked key's next request is refused) and validates its JSON-RPC body and headers; the handler then finds
// the caller's session and hands the request to the SDK's transport, which answers it (an event stream of
// JSON-RPC messages). A session belongs to the key that opened it: another key's requests do not find it.
// Its tools call this API in-process as that key (./in-process.ts).
import { createHash, randomUUID } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  isInitializeRequest,
  JSONRPCMessageSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
} from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { platformVersion } from "../../../lib/toolchain.js";
import { sandboxMcpServer } from "../../../mcp/tools.js";
import { Client } from "../../../sdk/src/client.js";
import { HttpError } from "../../errors.js";
import { credentialsOf } from "../auth.js";
import { route, type RouteInput, type Routes } from "../route.js";
import { inProcessFetch } from "./in-process.js";
import { DEFAULT_SESSION_LIMITS, McpSessions, type McpSession, type McpSessionLimits } from "./sessions.js";

/** A POST's body limit: a write_file's content (1 Mi characters, each up to 6 bytes escaped) and room. */
export const MCP_BODY_LIMIT = 8 * 1024 * 1024;
/** The transport's own limit on the messages of one batch. */
const MAX_BATCH = 100;

const SessionId = z
  .string()
  .regex(/^[\x21-\x7e]{1,128}$/, { message: "must be the Mcp-Session-Id an initialize answered with" });
const ProtocolVersion = z
  .enum(SUPPORTED_PROTOCOL_VERSIONS as [string, ...string[]], {
    message: `must be one of ${SUPPORTED_PROTOCOL_VERSIONS.join(", ")}`,
  })
  .optional();
const McpBody = z.union([JSONRPCMessageSchema, z.array(JSONRPCMessageSchema).min(1).max(MAX_BATCH)]);
const KEY_ONLY = { access: "user", sessions: false } as const;
const notFound =
  "no MCP session by that id of this API key's (it ended: DELETE, 30 minutes idle, the runtime restarted; or another key opened it): initialize a new one";

export const mcpPostRoute = route({
  method: "post",
  path: "/mcp",
  summary:
    "MCP (Model Context Protocol) over streamable HTTP: JSON-RPC messages to the platform's MCP server (docs/mcp.md); an initialize without Mcp-Session-Id opens a session. Takes an API key only",
  ...KEY_ONLY,
  body: McpBody,
  bodyLimit: MCP_BODY_LIMIT,
  headers: { "Mcp-Session-Id": SessionId.optional(), "MCP-Protocol-Version": ProtocolVersion },
  responses: {
    200: {
      description:
        "the answer to the request(s): an event stream of JSON-RPC messages (progress notifications, then the result); an initialize's has the Mcp-Session-Id header",
      body: z.string(),
      contentType: "text/event-stream",
    },
    202: { description: "notifications or responses only: accepted" },
    404: notFound,
    406: "Accept does not list both application/json and text/event-stream",
  },
});

export const mcpGetRoute = route({
  method: "get",
  path: "/mcp",
  summary:
    "MCP: the session's event stream of server-initiated messages (one per session). Takes an API key only",
  ...KEY_ONLY,
  headers: { "Mcp-Session-Id": SessionId, "MCP-Protocol-Version": ProtocolVersion },
  responses: {
    200: { description: "the event stream", body: z.string(), contentType: "text/event-stream" },
    404: notFound,
    406: "Accept does not list text/event-stream",
    409: "the session has an event stream open already",
  },
});

export const mcpDeleteRoute = route({
  method: "delete",
  path: "/mcp",
  summary: "MCP: ends the session. Takes an API key only",
  ...KEY_ONLY,
  headers: { "Mcp-Session-Id": SessionId, "MCP-Protocol-Version": ProtocolVersion },
  responses: { 200: { description: "ended" }, 404: notFound },
});

export const mcpRoutes = [mcpPostRoute, mcpGetRoute, mcpDeleteRoute];

/** The API key a request presents (the route layer has checked it is one, and valid). */
function presentedKey(request: FastifyRequest): string {
  const { apiKey, authorization } = credentialsOf(request.headers);
  const key = apiKey ?? /^Bearer (sbx_\S+)$/.exec(authorization ?? "")?.[1];
  if (key === undefined) throw new HttpError(401, "api_key_required", "/mcp takes an API key");
  return key;
}

/** 406 unless Accept lists every one of `types` (as the transport requires, answered in the API's shape). */
function requireAccept(request: FastifyRequest, types: readonly string[]): void {
  const accept = request.headers.accept ?? "";
  const missing = types.filter((type) => !accept.includes(type));
  if (missing.length > 0)
    throw new HttpError(
      406,
      "not_acceptable",
      `Accept must list ${types.join(" and ")} (the MCP streamable-HTTP transport); it lacks ${missing.join(", ")}`,
    );
}

export interface McpRouteOptions {
  readonly limits?: McpSessionLimits;
}

export function registerMcpRoutes(routes: Routes, options: McpRouteOptions = {}): void {
  const sessions = new McpSessions(options.limits ?? DEFAULT_SESSION_LIMITS);
  const { app } = routes;
  // Open event streams would hold the server's close until their clients left.
  app.addHook("preClose", () => sessions.closeAll());
  const version = platformVersion();

  /** A new session for the caller's key, opened by the initialize in `body` (answered by the transport). */
  async function open(request: FastifyRequest, key: string, keyDigest: string) {
    await sessions.makeRoom(keyDigest);
    const client = new Client({ api: "", apiKey: key, fetch: inProcessFetch(app, request.ip) });
    const server = sandboxMcpServer(client, version);
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) =>
        sessions.add(id, { server, transport, keyDigest, lastUsed: Date.now(), streaming: false }),
      onsessionclosed: (id) => sessions.remove(id),
    });
    transport.onclose = () => transport.sessionId && sessions.remove(transport.sessionId);
    await server.connect(transport);
    return { server, transport };
  }

  /** The session `id` of the caller's key; a 404 for none. */
  const found = (id: string, keyDigest: string): McpSession => {
    const session = sessions.find(id, keyDigest);
    if (!session) throw new HttpError(404, "session_not_found", notFound);
    return session;
  };

  const handler = async ({
    request,
    reply,
    body,
    headers,
  }: RouteInput<typeof mcpPostRoute | typeof mcpGetRoute | typeof mcpDeleteRoute>) => {
    const key = presentedKey(request);
    const keyDigest = createHash("sha256").update(key).digest("hex");
    if (request.method === "POST") requireAccept(request, ["application/json", "text/event-stream"]);
    if (request.method === "GET") requireAccept(request, ["text/event-stream"]);
    const messages = [body ?? []].flat();
    const initialize = messages.some((message) => isInitializeRequest(message));
    const sessionId = headers["mcp-session-id"];
    if (initialize && (sessionId !== undefined || messages.length > 1))
      throw new HttpError(
        400,
        "bad_initialize",
        "initialize opens a new session: send it alone, without Mcp-Session-Id",
      );
    if (sessionId === undefined && !initialize)
      throw new HttpError(
        400,
        "no_session",
        "no Mcp-Session-Id: send initialize first, then the Mcp-Session-Id its answer carries with every request",
      );
    const session =
      sessionId === undefined ? await open(request, key, keyDigest) : found(sessionId, keyDigest);
    if (request.method === "GET" && "streaming" in session) {
      if (session.streaming)
        throw new HttpError(
          409,
          "stream_open",
          "this session's event stream is open already (one GET at a time)",
        );
      session.streaming = true;
      reply.raw.once("close", () => (session.streaming = false));
    }
    // From here the transport writes the answer.
    reply.hijack();
    reply.raw.setHeader("x-request-id", request.id);
    await session.transport.handleRequest(request.raw, reply.raw, body);
    // An initialize the transport refused opened nothing.
    if (sessionId === undefined && session.transport.sessionId === undefined) await session.server.close();
  };
  routes.handle(mcpPostRoute, handler);
  routes.handle(mcpGetRoute, handler);
  routes.handle(mcpDeleteRoute, handler);
}
