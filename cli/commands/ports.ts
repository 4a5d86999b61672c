// `sbx ports`: the dev servers listening in the sandbox now, found without being declared, with their
// front-door URLs (docs/front-door.md, "Found by themselves"); `sbx open` opens one.
import type { Command } from "commander";
import { context, globalsOf, requireLogin, resolveProject } from "../context.js";
import { emit } from "../output.js";

export function registerPorts(program: Command): void {
  program
    .command("ports")
    .description("the dev servers listening in the sandbox now, with their front-door URLs")
    .addHelpText(
      "after",
      "\nA port answers at its URL as soon as it listens (nothing to declare); `sbx open <port>` or\n`sbx open --worktree <branch>` gives you the one-time URL that lets you through. Keep a port private:\nPATCH /projects/{id} with private_ports.",
    )
    .action(async (_options: unknown, command: Command) => {
      const globals = globalsOf(command);
      const { api, config } = await context(globals);
      await requireLogin(config);
      const { id } = await resolveProject(globals, config);
      const { data } = await api.call("GET", "/projects/{id}/dev-servers", { params: { id } });
      emit({ project_id: id, ...data }, () => {
        const rows = data.dev_servers.map((server) => [
          String(server.port),
          server.address,
          server.worktree ?? "-",
          server.reachable
            ? (server.url ?? "-")
            : `${server.url ?? "-"} (listens on ${server.address} alone: start it on 0.0.0.0)`,
        ]);
        const lines =
          rows.length === 0
            ? ["nothing listens in the sandbox (as its agent) now"]
            : table([["PORT", "ADDRESS", "WORKTREE", "URL"], ...rows]);
        if (data.private_ports.length > 0)
          lines.push(`private (not routed): ${data.private_ports.join(", ")}`);
        return lines.join("\n");
      });
    });
}

/** Columns padded to their widest cell, the last one as it is. */
function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  return rows.map((row) =>
    row.map((cell, c) => (c === row.length - 1 ? cell : cell.padEnd(widths[c]!))).join("  "),
  );
}
