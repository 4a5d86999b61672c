// `sbx mcp`: the platform's sandbox tools (mcp/tools.ts) served to an MCP client on stdin/stdout, as the
// caller of every other sbx command (the API key in $SBX_API_KEY, else the login). stdout carries the
// protocol alone: nothing else of sbx is printed there.
// The MCP SDK and zod load only here (a chunk of the CLI's bundle of their own): loaded at every start they
// were more than half of it (a bundled `sbx --help` 0.24 s with them, 0.11 s without, measured here), and no
// other command needs them.
import type { Command } from "commander";
import { platformVersion } from "../../lib/toolchain.js";
import { API_KEY_VARIABLE } from "../client.js";
import { context, globalsOf, requireLogin } from "../context.js";

export function registerMcp(program: Command): void {
  program
    .command("mcp")
    .description(
      `serve the sandbox tools to an MCP client (an agent) on stdin/stdout, as you or the API key in $${API_KEY_VARIABLE}`,
    )
    .addHelpText(
      "after",
      `
Examples:
  $ claude mcp add sandboxes -- sbx mcp
  $ claude mcp add sandboxes -e ${API_KEY_VARIABLE}=sbx_... -- sbx mcp --api http://127.0.0.1:8000
See docs/mcp.md for the tools and other clients' configuration.`,
    )
    .action(async (_options: unknown, command: Command) => {
      const { api, config } = await context(globalsOf(command));
      await requireLogin(config);
      const [{ sandboxMcpServer }, { StdioServerTransport }] = await Promise.all([
        import("../../mcp/tools.js"),
        import("@modelcontextprotocol/sdk/server/stdio.js"),
      ]);
      const server = sandboxMcpServer(api, platformVersion());
      const transport = new StdioServerTransport();
      // Served until the client closes its end of stdin (or the transport closes).
      const closed = new Promise<void>((resolve) => {
        process.stdin.once("end", resolve);
        server.server.onclose = resolve;
      });
      await server.connect(transport);
      await closed;
      await server.close();
    });
}
