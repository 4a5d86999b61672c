// `sbx stop|rm|snapshot|restore`: a request and the wait for its operation, its progress shown.
import type { Command } from "commander";
import type { ProjectView } from "../../sdk/src/client.js";
import type { CliClient } from "../client.js";
import { context, follow, globalsOf, requireLogin, resolveProject, settled } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit } from "../output.js";

interface Lifecycle {
  readonly name: string;
  readonly description: string;
  readonly configure: (command: Command) => Command;
  /** Refuses options that do not allow it (rm without --yes) before anything is asked. */
  readonly check?: (options: Record<string, unknown>) => void;
  readonly send: (api: CliClient, id: string, options: Record<string, unknown>) => Promise<unknown>;
  readonly done: (project: ProjectView | undefined) => boolean;
}

const LIFECYCLES: readonly Lifecycle[] = [
  {
    name: "stop",
    description:
      "stop the sandbox (a final backup first); /home/agent is kept, and a microVM's memory (its processes resume at the next start) unless --drop-memory",
    configure: (c) =>
      c.option("--drop-memory", "drop the sandbox's memory: the next start boots instead of resuming"),
    send: (api, id, o) =>
      api.call("POST", "/projects/{id}/stop", {
        params: { id },
        body: { keep_memory: o.dropMemory !== true },
      }),
    done: (p) => p?.status === "stopped",
  },
  {
    name: "rm",
    description: "delete the project: sandbox, home volume, snapshots (asks for --yes)",
    configure: (c) => c.option("-y, --yes", "yes, delete it"),
    check: (o) => {
      if (o.yes !== true)
        throw new CliError(EXIT.usage, "sbx rm deletes the project, its home and its snapshots: pass --yes");
    },
    send: (api, id) => api.call("DELETE", "/projects/{id}", { params: { id } }),
    done: (p) => p === undefined,
  },
  {
    name: "snapshot",
    description: "snapshot the sandbox's system state (and --stop it)",
    configure: (c) => c.option("--stop", "stop the sandbox once the snapshot is pushed"),
    send: (api, id, o) =>
      api.call("POST", "/projects/{id}/snapshot", { params: { id }, body: { stop: o.stop === true } }),
    done: (p) => settled(p),
  },
  {
    name: "restore",
    description: "run a snapshot (the newest unless --snapshot names one) on the project's own home",
    configure: (c) => c.option("--snapshot <tag>", "the snapshot's tag (GET /projects/{id}/snapshots)"),
    send: (api, id, o) =>
      api.call("POST", "/projects/{id}/restore", {
        params: { id },
        body: typeof o.snapshot === "string" ? { snapshot: o.snapshot } : {},
      }),
    done: (p) => settled(p),
  },
];

/** How a stopped sandbox sleeps, in words: "its memory kept, 512 MiB" or "its files alone". */
function sleep(pause: NonNullable<ProjectView["pause"]>): string {
  return pause.kind === "memory" && pause.memory_bytes !== null
    ? `its memory kept, ${Math.round(pause.memory_bytes / 2 ** 20)} MiB: processes resume at the next start`
    : "its files alone: the next start boots";
}

export function registerLifecycle(program: Command): void {
  for (const lifecycle of LIFECYCLES)
    lifecycle
      .configure(
        program
          .command(lifecycle.name)
          .description(lifecycle.description)
          .option("--no-wait", "return once the runtime has accepted it"),
      )
      .action(async (options: Record<string, unknown>, command: Command) => {
        const globals = globalsOf(command);
        const { api, store, config } = await context(globals);
        await requireLogin(config);
        lifecycle.check?.(options);
        const { id } = await resolveProject(globals, config);
        await lifecycle.send(api, id, options);
        const deleting = lifecycle.name === "rm";
        const project =
          options.wait === false
            ? await api.project(id).catch(() => undefined)
            : await follow(api, id, lifecycle.done, 900_000, !deleting);
        if (deleting) await store.forget(id);
        const pause = project?.pause;
        emit(
          {
            project_id: id,
            status: project?.status ?? "deleted",
            operation: project?.operation ?? null,
            ...(pause ? { pause } : {}),
          },
          `${lifecycle.name}: project ${id} is ${project?.status ?? "deleted"}${pause ? ` (${sleep(pause)})` : ""}`,
        );
      });
}
