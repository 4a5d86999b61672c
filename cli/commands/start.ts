// `sbx start`: the repository's project made (or started) and every branch pushed into /workspace/<repo>,
// with the paths made read-only, the devcontainer applied and the sync mode set. A start that made the
// project and then fails deletes it again.
import * as path from "node:path";
import { Command, Option } from "commander";
import type { ProjectView, RequestBody } from "../../sdk/src/client.js";
import type { CliClient } from "../client.js";
import type { ConfigStore } from "../config.js";
import {
  context,
  follow,
  requireLogin,
  running,
  settled,
  sshTarget,
  SYNC_MODES,
  type Globals,
  globalsOf,
} from "../context.js";
import { readDevContainer } from "../devcontainer.js";
import { CliError, EXIT } from "../errors.js";
import { emit, note } from "../output.js";
import { inspectRepo, pushRepo, sandboxRepoName } from "../repo.js";
import { PREPARE_REPO, PROTECTED_IN_REPO, REMOVE_REPO, runScript } from "../sandbox-scripts.js";
import { waitForSsh } from "../ssh.js";
import { applyDevcontainer, devcontainerImage } from "./start-devcontainer.js";

/** Largest repository (objects on disk) `sbx start` brings in unless --max-size says otherwise. */
const DEFAULT_MAX_MB = Number(process.env.SBX_MAX_REPO_MB ?? 1024);

export function registerStart(program: Command): void {
  program
    .command("start")
    .description(
      "create (or start) the project for the git repository at path and push the repository into /workspace/<repo>",
    )
    .argument("[path]", "the repository", ".")
    .option("--current-branch", "push only the checked-out branch (default: every local branch)")
    .option(
      "--allow-dirty",
      "start even with uncommitted changes (only commits are pushed; the changes stay here)",
    )
    .option(
      "--max-size <MB>",
      `refuse a repository whose objects take more (default ${DEFAULT_MAX_MB}, $SBX_MAX_REPO_MB)`,
    )
    .option(
      "--fresh",
      "delete the repository's project (its home, snapshots and all) and start a new one (FR-026)",
    )
    .option(
      "--no-protect",
      "do not make .git/hooks, .husky, .agent-sandbox and .agent-precommit read-only inside",
    )
    .option("--name <name>", "the project's name (default: the repository's directory name)")
    .option(
      "--backend <backend>",
      "where a project this start creates runs: container, microvm, kubernetes or another the runtime registered (default: the platform's)",
    )
    .addOption(
      new Option("--sync-mode <mode>", "commit inside automatically (see sbx sync --mode)").choices(
        SYNC_MODES,
      ),
    )
    .addHelpText(
      "after",
      "\nExamples:\n  $ sbx start\n  $ sbx start ../other-repo --current-branch\n  $ sbx start --backend microvm\n  $ sbx start --fresh --json",
    )
    .action(async (dir: string, options: StartOptions, command: Command) => {
      const globals = globalsOf(command);
      const result = await start(globals, path.resolve(dir), options);
      emit(result, () =>
        [
          `${result.status === "created" ? "created" : "using"} project ${result.name} (${result.project_id}) on ${result.backend}`,
          `pushed ${result.pushed.length} branch(es) into ${result.workspace}: ${result.pushed.join(", ")}`,
          result.protected.length ? `read-only inside: ${result.protected.join(", ")}` : "",
          ...result.devcontainer.map((line) => `devcontainer: ${line}`),
          ...result.unsupported.map((line) => `devcontainer.json not supported: ${line}`),
          "next: sbx attach",
        ]
          .filter(Boolean)
          .join("\n"),
      );
    });
}

interface StartOptions {
  currentBranch?: boolean;
  allowDirty?: boolean;
  maxSize?: string;
  fresh?: boolean;
  protect: boolean;
  name?: string;
  backend?: string;
  syncMode?: (typeof SYNC_MODES)[number];
}

async function start(globals: Globals, dir: string, options: StartOptions) {
  const { api, store, config } = await context(globals);
  await requireLogin(config);
  // Every check of the input before anything is made.
  const repo = await inspectRepo(dir);
  if (repo.dirty.length > 0 && !options.allowDirty)
    throw new CliError(
      EXIT.badInput,
      `${repo.root} has ${repo.dirty.length} uncommitted change(s) (${repo.dirty
        .slice(0, 3)
        .map((l) => l.slice(3))
        .join(
          ", ",
        )}${repo.dirty.length > 3 ? ", ..." : ""}): only commits go into the sandbox. Commit or stash them, or pass --allow-dirty to push the commits and leave the changes here`,
    );
  const maxMb = options.maxSize === undefined ? DEFAULT_MAX_MB : Number(options.maxSize);
  if (!Number.isFinite(maxMb) || maxMb <= 0)
    throw new CliError(EXIT.usage, `--max-size must be a number of MB, not ${options.maxSize}`);
  if (repo.sizeBytes > maxMb * 1024 * 1024)
    throw new CliError(
      EXIT.badInput,
      `${repo.root} is too large: its objects take ${(repo.sizeBytes / 1048576).toFixed(0)} MB, over the limit of ${maxMb} MB (--max-size or $SBX_MAX_REPO_MB to raise it); nothing was created`,
    );
  if (options.currentBranch && !repo.current)
    throw new CliError(EXIT.badInput, "--current-branch: HEAD is detached; check out a branch");
  const devcontainer = readDevContainer(repo.root);
  const repoName = config.repos?.[repo.root]?.repo ?? sandboxRepoName(repo.root);
  // Built before anything is made: a Dockerfile that does not build leaves no project behind.
  const image = devcontainer ? await devcontainerImage(devcontainer, repo.root, repoName) : undefined;
  const branches = options.currentBranch ? [repo.current!] : repo.branches;
  const name = options.name ?? path.basename(repo.root);

  let link = config.repos?.[repo.root];
  if (link && options.fresh) {
    note(`deleting project ${link.project_id} (--fresh)`);
    await api
      .call("DELETE", "/projects/{id}", { params: { id: link.project_id } })
      .catch((error: unknown) => {
        if (!(error instanceof CliError && error.code === EXIT.notFound)) throw error;
      });
    await follow(api, link.project_id, (p) => p === undefined, 900_000, false);
    await store.forget(link.project_id);
    link = undefined;
  }
  let project: ProjectView | undefined;
  let status: "created" | "existing" = "existing";
  if (link) {
    project = await api.project(link.project_id).catch((error: unknown) => {
      if (error instanceof CliError && error.code === EXIT.notFound) return undefined;
      throw error;
    });
    if (!project) {
      note(`project ${link.project_id} no longer exists; creating a new one`);
      await store.forget(link.project_id);
      link = undefined;
    }
  }
  // A project's backend is chosen at its create and never changed (PATCH takes none), and it is the sandbox's
  // isolation (a kernel of its own or the host's): working on in a project of another kind than the one asked
  // for would run the developer's code under isolation they did not choose, so the start refuses instead.
  if (project && options.backend !== undefined && project.backend !== options.backend)
    throw new CliError(
      EXIT.conflict,
      `project ${project.name} (${project.project_id}) runs on the ${project.backend} backend, not ${options.backend}: a project's backend is chosen when it is created. sbx start --fresh --backend ${options.backend} deletes it (its home and snapshots too) and creates one there`,
    );
  if (!project) {
    note(`creating project ${name}${options.backend === undefined ? "" : ` on ${options.backend}`}`);
    const body: RequestBody<"/projects", "POST"> = { name };
    // Sent as typed: the runtime's registry decides which backends there are (it may register one of its own
    // beyond the document's list), and a name it does not run comes back as its 400 naming those it does.
    if (options.backend !== undefined)
      body.backend = options.backend as NonNullable<RequestBody<"/projects", "POST">["backend"]>;
    const created = await api.call("POST", "/projects", {
      body,
      headers: { Prefer: "respond-async" },
    });
    project = created.data;
    status = "created";
    if (!project.ssh.private_key) throw new CliError(EXIT.failure, "the create did not answer the SSH key");
    await store.saveKey(project.project_id, project.ssh.private_key);
    link = { project_id: project.project_id, repo: repoName };
    const saved = link;
    await store.update((c) => {
      c.repos = { ...c.repos, [repo.root]: saved };
    });
  }
  const id = project.project_id;
  // A start that made the project and then fails leaves nothing: the project is deleted again.
  try {
    if (project.status === "stopped") {
      note(`starting project ${id}`);
      await api.call("POST", "/projects/{id}/start", { params: { id } });
    }
    project = (await follow(api, id, running))!;
    let target = await sshTarget(api, store, project);
    await waitForSsh(target);

    note(`pushing ${branches.length} branch(es) into /workspace/${repoName}`);
    const made = (
      await runScript(target, "preparing /workspace", PREPARE_REPO, [repoName, repo.current ?? branches[0]!])
    ).includes("created");
    let pushed: Awaited<ReturnType<typeof pushRepo>>;
    try {
      pushed = await pushRepo(target, repo.root, `/home/agent/workspace/${repoName}`, branches);
      if (made && pushed.rejected.length > 0)
        throw new CliError(
          EXIT.remote,
          `the sandbox refused ${pushed.rejected.map((r) => `${r.branch} ${r.why}`).join(", ")}`,
        );
    } catch (error) {
      if (made) await runScript(target, "cleaning up", REMOVE_REPO, [repoName]).catch(() => undefined);
      throw error;
    }
    for (const { branch, why } of pushed.rejected)
      note(
        `kept the sandbox's ${branch} (${why}): it moved on inside, or its checkout there has changes; sbx sync fetches it`,
      );

    // One container replacement for the read-only paths and a devcontainer's image.
    const notes: string[] = [];
    const protectedPaths = options.protect ? PROTECTED_IN_REPO.map((p) => `workspace/${repoName}/${p}`) : [];
    const patch: RequestBody<"/projects/{id}", "PATCH"> = {};
    const already = new Set(link!.protected ?? []);
    if (protectedPaths.some((p) => !already.has(p)))
      patch.protected_paths = [...new Set([...already, ...protectedPaths])].sort();
    if (image && image !== link!.image) {
      patch.image = image;
      patch.restart = true;
      notes.push(`image ${image}`);
    }
    if (Object.keys(patch).length > 0) {
      note(
        `applying ${Object.keys(patch)
          .filter((k) => k !== "restart")
          .join(" and ")} (the sandbox's container is replaced; /home/agent stays)`,
      );
      await api.call("PATCH", "/projects/{id}", { params: { id }, body: patch });
      project = (await follow(api, id, (p) => running(p) && settled(p)))!;
      target = await sshTarget(api, store, project);
      await waitForSsh(target);
      const appliedProtected = patch.protected_paths ?? [...already];
      await store.update((c) => {
        const l = c.repos?.[repo.root];
        if (l) c.repos![repo.root] = { ...l, protected: appliedProtected, ...(image ? { image } : {}) };
      });
    }
    if (devcontainer) {
      const applied = await applyDevcontainer(api, store, target, id, repoName, devcontainer);
      notes.push(...applied.notes);
      target = applied.target;
    }
    if (options.syncMode)
      await api.call("PUT", "/projects/{id}/sync", {
        params: { id },
        body: { mode: options.syncMode, interval_seconds: 60 },
      });
    return {
      project_id: id,
      name: project.name,
      backend: project.backend,
      status,
      repository: repo.root,
      workspace: `/workspace/${repoName}`,
      pushed: pushed.pushed,
      rejected: pushed.rejected,
      dirty: repo.dirty.length,
      protected: [...new Set([...(link!.protected ?? []), ...protectedPaths])].map((p) => `/home/agent/${p}`),
      devcontainer: notes,
      unsupported: devcontainer?.unsupported ?? [],
    };
  } catch (error) {
    if (status !== "created") throw error;
    const failure = error instanceof CliError ? error : new CliError(EXIT.failure, (error as Error).message);
    const undone = await undoCreate(api, store, id).then(
      () => "the project this start created was deleted again",
      (undo: unknown) =>
        `the project this start created (${id}) could not be deleted: ${(undo as Error).message}; sbx rm --yes -p ${id}`,
    );
    throw new CliError(failure.code, `${failure.message}; ${undone}`);
  }
}

/** Deletes a project `sbx start` has just created, waits until it is gone, and forgets it here. */
async function undoCreate(api: CliClient, store: ConfigStore, id: string): Promise<void> {
  note(`deleting project ${id}, which this start created`);
  await api.call("DELETE", "/projects/{id}", { params: { id } });
  await follow(api, id, (p) => p === undefined, 300_000, false);
  await store.forget(id);
}
