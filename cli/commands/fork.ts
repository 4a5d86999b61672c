// `sbx fork`: new projects from one point of this project's home, each with its own key (saved here) and
// its own sandbox; waits for them to run unless --no-wait.
import type { Command } from "commander";
import { context, follow, globalsOf, requireLogin, resolveProject } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit } from "../output.js";

const MAX_FORKS = 10;

/** `--count`'s value: a whole number of forks, 1 to 10. */
export function forkCount(value: string): number {
  const count = Number(value);
  if (!/^\d+$/.test(value) || count < 1 || count > MAX_FORKS)
    throw new CliError(EXIT.usage, `--count must be a whole number from 1 to ${MAX_FORKS}, not ${value}`);
  return count;
}

export function registerFork(program: Command): void {
  program
    .command("fork")
    .description(
      "fork the project: --count new projects (1-10), each with a copy of its home taken at one point, and its own sandbox and key",
    )
    .option("-n, --count <n>", "how many forks (1-10; the number of --name when absent, else 1)", forkCount)
    .option(
      "--name <name>",
      "a fork's name, once per fork (default <project>-fork-<n>)",
      (value: string, names: string[] = []) => [...names, value],
    )
    .option("--no-wait", "return once the runtime has accepted them")
    .action(
      async (
        options: { count?: number; name?: string[]; wait?: boolean },
        command: Command,
      ): Promise<void> => {
        const globals = globalsOf(command);
        const { api, store, config } = await context(globals);
        await requireLogin(config);
        const { id } = await resolveProject(globals, config);
        const { data } = await api.call("POST", "/projects/{id}/fork", {
          params: { id },
          body: {
            ...(options.count !== undefined ? { count: options.count } : {}),
            ...(options.name ? { names: options.name } : {}),
          },
        });
        // Each fork's SSH key is answered this once: kept beside the others', as sbx start keeps its own.
        for (const fork of data.projects)
          if (fork.ssh.private_key) await store.saveKey(fork.project_id, fork.ssh.private_key);
        // One after another: each wait shows its progress.
        const statuses = new Map<string, string>();
        for (const fork of data.projects) {
          const now =
            options.wait === false
              ? fork
              : await follow(api, fork.project_id, (p) => p?.status === "running", 900_000);
          statuses.set(fork.project_id, now?.status ?? "deleting");
        }
        const forks = data.projects.map((fork) => ({
          project_id: fork.project_id,
          name: fork.name,
          status: statuses.get(fork.project_id)!,
        }));
        emit({ source: data.source, forks, copy: data.copy }, () =>
          [
            `forked ${id} at ${data.source.forked_at} (its writes held ${data.copy.frozen_ms} ms):`,
            ...forks.map((f) => `${f.project_id}  ${f.status.padEnd(12)} ${f.name}`),
            "each is a project of its own: sbx --project <id> attach",
          ].join("\n"),
        );
      },
    );
}
