// `sbx status`: the project's status, its current operation, its SSH address and its sync mode.
import * as path from "node:path";
import type { Command } from "commander";
import { context, globalsOf, requireLogin, resolveProject, sshTarget } from "../context.js";
import { emit } from "../output.js";

export function registerStatus(program: Command): void {
  program
    .command("status")
    .description("the project's status, current operation and SSH address")
    .argument("[path]", "a directory in the repository", ".")
    .action(async (dir: string, _options: unknown, command: Command) => {
      const globals = globalsOf(command);
      const { api, store, config } = await context(globals);
      await requireLogin(config);
      const { id, link, root } = await resolveProject(globals, config, path.resolve(dir));
      const project = await api.project(id);
      // Where this machine holds the key, the project's known_hosts is written anew from the API (the
      // sandbox makes new host keys at every start).
      if (project.status === "running" && (await store.hasKey(id)))
        await sshTarget(api, store, project).catch(() => undefined);
      // The sync mode lives in the sandbox's home; the API reads it there while the sandbox runs.
      const sync =
        project.status === "running"
          ? await api
              .call("GET", "/projects/{id}/sync", { params: { id } })
              .then(({ data }) => data)
              .catch(() => null)
          : null;
      // The terminal URL carries a single-use ticket: not something to print.
      const result = {
        ...project,
        sync,
        terminal_url: undefined,
        repository: root ?? null,
        workspace: link ? `/workspace/${link.repo}` : null,
      };
      emit(result, () =>
        [
          `${project.name} (${project.project_id}): ${project.status}${project.error ? ` — ${project.error}` : ""}`,
          project.operation
            ? `operation: ${project.operation.kind} ${project.operation.state} (${project.operation.progress.events} events)`
            : "",
          `ssh: ${project.ssh.user}@${project.ssh.host} -p ${project.ssh.port}`,
          link ? `repository: ${root} → /workspace/${link.repo}` : "",
          sync ? `sync mode: ${sync.mode} (every ${sync.interval_seconds} s)` : "",
        ]
          .filter(Boolean)
          .join("\n"),
      );
    });
}
