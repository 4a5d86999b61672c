// What a raw MCP client sends over the streamable-HTTP transport (for tests that speak to /mcp without the
// SDK's client).

/** The Accept the transport requires of a POST: both a JSON answer and an event stream. */
export const MCP_ACCEPT = { accept: "application/json, text/event-stream" } as const;

/** An initialize request, as a client opens a session with it. */
export const mcpInitialize = (client: string) => ({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: client, version: "1" } },
});
