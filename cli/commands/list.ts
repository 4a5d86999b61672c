// `sbx list`: the user's projects, with the repository each one was started from.
import type { Command } from "commander";
import { context, globalsOf, requireLogin } from "../context.js";
import { emit } from "../output.js";

export function registerList(program: Command): void {
  program
    .command("list")
    .description("your projects, with the repository each one was started from")
    .action(async (_options: unknown, command: Command) => {
      const { api, config } = await context(globalsOf(command));
      await requireLogin(config);
      const { data } = await api.call("GET", "/projects");
      const repoOf = (id: string) =>
        Object.entries(config.repos ?? {}).find(([, l]) => l.project_id === id)?.[0] ?? null;
      const projects = data.projects.map((p) => ({
        project_id: p.project_id,
        name: p.name,
        status: p.status,
        repository: repoOf(p.project_id),
      }));
      emit({ projects }, () =>
        projects.length === 0
          ? "no projects (sbx start in a git repository makes one)"
          : projects
              .map(
                (p) =>
                  `${p.project_id}  ${p.status.padEnd(12)} ${p.name}${p.repository ? `  ${p.repository}` : ""}`,
              )
              .join("\n"),
      );
    });
}
