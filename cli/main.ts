// `sbx`: the developer's command line for agent sandboxes (docs/cli.md). It talks to the runtime
// only over its REST API, the terminal WebSocket and the project's SSH; the repository goes in and comes
// out by git over that SSH, started from this machine: nothing of this machine's credentials goes in.
import { spawn } from "node:child_process";
import * as fs from "node:fs/promises";
import * as path from "node:path";
import { Command, CommanderError, Option } from "commander";
import { ApiClient, DEFAULT_API, type ProjectView } from "./api.js";
import { ConfigStore, type CliConfig, type RepoLink } from "./config.js";
import { readDevContainer, renderEnvFile, type DevContainer } from "./devcontainer.js";
import { artifactPath, ArchiveRefused, extractArtifact, type Extracted } from "./artifacts.js";
import { CliError, EXIT } from "./errors.js";
import { checkWorktreeName, envFiles, fetchSandbox, inspectRepo, pushRepo, sandboxRepoName } from "./repo.js";
import {
  CONTAINER_ENV,
  ENV_PUSH,
  POST_CREATE,
  PREPARE_REPO,
  PROTECTED_IN_REPO,
  REMOVE_REPO,
  runScript,
  WORKTREE_ADD,
  WORKTREE_LIST,
  WORKTREE_RM,
} from "./sandbox-scripts.js";
import {
  capture,
  checkSshAddress,
  remote,
  sandboxHostKey,
  shellQuote,
  sshOptions,
  waitForSsh,
  type SshTarget,
} from "./ssh.js";
import { printable } from "./printable.js";
import { progressLine } from "./progress.js";
import { attachTerminal, explainClose } from "./terminal.js";
import { registerOpen } from "./open.js";
import { registerExec } from "./exec.js";

interface Globals {
  json?: boolean;
  api?: string;
  project?: string;
}

const SYNC_MODES = ["manual", "auto-commit", "auto-idle"] as const;
/** GET/PUT /projects/{id}/sync. */
interface SyncSetting {
  readonly mode: (typeof SYNC_MODES)[number];
  readonly interval_seconds: number;
}
/** Largest repository (objects on disk) `sbx start` brings in unless --max-size says otherwise. */
const DEFAULT_MAX_MB = Number(process.env.SBX_MAX_REPO_MB ?? 1024);

let jsonMode = false;
/** Progress and notes: stderr, and nothing at all with --json. */
const note = (line: string) => {
  if (!jsonMode) process.stderr.write(`${printable(line)}\n`);
};
/** The command's result: JSON with --json, else the text. */
function emit(result: unknown, text: string | (() => string)): void {
  if (jsonMode) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  else {
    // Text in the result may come from the sandbox (a worktree's path, a branch): shown without its escapes.
    const shown = printable(typeof text === "function" ? text() : text);
    if (shown) process.stdout.write(shown.endsWith("\n") ? shown : `${shown}\n`);
  }
}

async function context(globals: Globals) {
  const store = new ConfigStore();
  const config = await store.load();
  const base = (globals.api ?? process.env.SBX_API ?? config.api ?? DEFAULT_API).replace(/\/+$/, "");
  return { store, config, api: new ApiClient(base, store) };
}

async function requireLogin(config: CliConfig): Promise<void> {
  if (!config.access_token && !config.refresh_token)
    throw new CliError(EXIT.auth, "not logged in: run `sbx login` first");
}

/** The repository root `dir` is in, or undefined outside one. */
async function repoRootOf(dir: string): Promise<string | undefined> {
  const top = await capture("git", ["-C", dir, "rev-parse", "--show-toplevel"]).catch(() => undefined);
  return top?.code === 0 ? top.stdout.trim() : undefined;
}

/** The project a command is about: --project, or the one `sbx start` linked to the repository here. */
async function resolveProject(
  globals: Globals,
  config: CliConfig,
  dir = process.cwd(),
): Promise<{ id: string; link?: RepoLink; root?: string }> {
  const root = await repoRootOf(dir);
  const links = config.repos ?? {};
  if (globals.project) {
    const entry = Object.entries(links).find(([, link]) => link.project_id === globals.project);
    return { id: globals.project, ...(entry ? { root: entry[0], link: entry[1] } : {}) };
  }
  const link = root ? links[root] : undefined;
  if (!link)
    throw new CliError(
      EXIT.notFound,
      root
        ? `no project for ${root} yet: run \`sbx start\` here (or pass --project ID)`
        : `${dir} is not in a git repository: cd into one, or pass --project ID`,
    );
  return { id: link.project_id, link, root: root! };
}

async function sshTarget(api: ApiClient, store: ConfigStore, project: ProjectView): Promise<SshTarget> {
  const id = project.project_id;
  if (!(await store.hasKey(id)))
    throw new CliError(
      EXIT.notFound,
      `no SSH key for project ${id} on this machine: the key comes with the create, so only the machine that ran \`sbx start\` for it has one`,
    );
  const hostKeyAlias = `sbx-${id}`;
  await store.saveKnownHosts(id, `${hostKeyAlias} ${await sandboxHostKey(api, project)}\n`);
  return {
    ...checkSshAddress(project.ssh),
    keyFile: store.keyFile(id),
    knownHostsFile: store.knownHostsFile(id),
    hostKeyAlias,
  };
}

/** Polls the project until `done`, showing the operation's progress; an `error` status fails. */
async function follow(
  api: ApiClient,
  id: string,
  done: (p: ProjectView | undefined) => boolean,
  timeoutMs = 900_000,
  /** A delete waits through the `error` status its project may be in. */
  failOnError = true,
): Promise<ProjectView | undefined> {
  const deadline = Date.now() + timeoutMs;
  let shown = "";
  for (;;) {
    const project = await api.getProject(id).catch((error: unknown) => {
      if (error instanceof CliError && error.code === EXIT.notFound) return undefined;
      throw error;
    });
    if (project) {
      const op = project.operation;
      const line = progressLine(project);
      if (line !== shown) note(line);
      shown = line;
      if (failOnError && project.status === "error" && !done(project))
        throw new CliError(
          EXIT.failure,
          `the project failed: ${project.error ?? op?.error ?? "unknown error"}`,
        );
    }
    if (done(project)) return project;
    if (Date.now() > deadline)
      throw new CliError(EXIT.failure, `gave up waiting after ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

const running = (p: ProjectView | undefined) => p?.status === "running";
const settled = (p: ProjectView | undefined) =>
  p !== undefined &&
  ["running", "stopped", "error"].includes(p.status) &&
  (!p.operation || ["succeeded", "failed", "cancelled"].includes(p.operation.state));

async function readPassword(fromStdin: boolean): Promise<string> {
  if (process.env.SBX_PASSWORD) return process.env.SBX_PASSWORD;
  if (fromStdin || !process.stdin.isTTY) {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks)
      .toString("utf8")
      .replace(/\r?\n$/, "");
  }
  process.stderr.write("password: ");
  process.stdin.setRawMode(true);
  let typed = "";
  for await (const chunk of process.stdin) {
    const text = (chunk as Buffer).toString("utf8");
    if (text === "\u0003") throw new CliError(EXIT.usage, "cancelled");
    if (text === "\r" || text === "\n") break;
    typed = text === "\u007f" ? typed.slice(0, -1) : typed + text;
  }
  process.stdin.setRawMode(false);
  process.stdin.pause();
  process.stderr.write("\n");
  return typed;
}

const program = new Command("sbx")
  .description(
    "Run coding agents in your own sandbox: bring a repository in, attach, and get the work back out.",
  )
  .option("--json", "print the result as JSON (errors too: {error, message, exit_code, details?})")
  .option(
    "--api <url>",
    `the runtime's API (default: the one you logged in to, else $SBX_API, else ${DEFAULT_API})`,
  )
  .option("-p, --project <id>", "the project (default: the one `sbx start` linked to the repository here)")
  .showHelpAfterError("(sbx --help shows the commands and examples)")
  .addHelpText(
    "after",
    `
Examples:
  $ sbx login --api http://127.0.0.1:8000 --email me@example.com
  $ cd ~/src/app && sbx start            # create the sandbox, push every branch into /workspace/app
  $ sbx attach                           # the terminal; Ctrl-] detaches, the session keeps running
  $ sbx worktree add feature-x && sbx attach --worktree feature-x
  $ sbx sync                             # the sandbox's branches → refs/remotes/sandbox/*
  $ sbx sync --artifacts dist --to ./out # and copy /workspace/app/dist back
  $ sbx env push                         # .env* files in, loaded by direnv, never committed
  $ sbx list --json | jq '.projects[].status'

Exit codes: 0 ok, 1 failure, 2 usage, 3 not logged in / login expired, 4 project or path not found,
5 bad input (not a repository, dirty tree, too large, bad name, bad devcontainer.json), 6 wrong state
(stopped, already exists), 7 SSH/git in the sandbox failed, 8 the terminal closed abnormally.
Configuration: $XDG_CONFIG_HOME/agent-sandbox (or ~/.config/agent-sandbox), files mode 0600.`,
  );

const globalsOf = (command: Command): Globals => command.optsWithGlobals();

program
  .command("login")
  .description("log in to the runtime; the tokens are kept (0600) and refreshed as they expire")
  .option("--email <email>", "your account's email")
  .option("--password-stdin", "read the password from stdin (also: $SBX_PASSWORD)")
  .addHelpText(
    "after",
    '\nExample:\n  $ echo "$PW" | sbx login --api http://127.0.0.1:8000 --email me@example.com --password-stdin',
  )
  .action(async (options: { email?: string; passwordStdin?: boolean }, command: Command) => {
    const { api, config } = await context(globalsOf(command));
    const email = options.email ?? config.email;
    if (!email) throw new CliError(EXIT.usage, "--email is required the first time");
    await api.login(email, await readPassword(options.passwordStdin === true));
    emit({ email, api: api.base }, `logged in to ${api.base} as ${email}`);
  });

program
  .command("logout")
  .description("end the session and forget the tokens")
  .action(async (_options: unknown, command: Command) => {
    const { api, store, config } = await context(globalsOf(command));
    if (config.refresh_token)
      await api
        .request("POST", "/auth/logout", { refresh_token: config.refresh_token })
        .catch(() => undefined);
    await store.update((c) => {
      delete c.access_token;
      delete c.refresh_token;
    });
    emit({ logged_out: true }, "logged out");
  });

program
  .command("list")
  .description("your projects, with the repository each one was started from")
  .action(async (_options: unknown, command: Command) => {
    const { api, config } = await context(globalsOf(command));
    await requireLogin(config);
    const { body } = await api.request<{ projects: ProjectView[] }>("GET", "/projects");
    const repoOf = (id: string) =>
      Object.entries(config.repos ?? {}).find(([, l]) => l.project_id === id)?.[0] ?? null;
    const projects = body.projects.map((p) => ({
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

program
  .command("status")
  .description("the project's status, current operation and SSH address")
  .argument("[path]", "a directory in the repository", ".")
  .action(async (dir: string, _options: unknown, command: Command) => {
    const globals = globalsOf(command);
    const { api, store, config } = await context(globals);
    await requireLogin(config);
    const { id, link, root } = await resolveProject(globals, config, path.resolve(dir));
    const project = await api.getProject(id);
    // Where this machine holds the key, the project's known_hosts is written anew from the API (the
    // sandbox makes new host keys at every start).
    if (project.status === "running" && (await store.hasKey(id)))
      await sshTarget(api, store, project).catch(() => undefined);
    // The sync mode lives in the sandbox's home; the API reads it there while the sandbox runs.
    const sync =
      project.status === "running"
        ? await api
            .request<SyncSetting>("GET", `/projects/${id}/sync`)
            .then(({ body }) => body)
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
  .option("--no-protect", "do not make .git/hooks, .husky and .agent-sandbox read-only inside")
  .option("--name <name>", "the project's name (default: the repository's directory name)")
  .addOption(
    new Option("--sync-mode <mode>", "commit inside automatically (see sbx sync --mode)").choices(SYNC_MODES),
  )
  .addHelpText(
    "after",
    "\nExamples:\n  $ sbx start\n  $ sbx start ../other-repo --current-branch\n  $ sbx start --fresh --json",
  )
  .action(async (dir: string, options: StartOptions, command: Command) => {
    const globals = globalsOf(command);
    const result = await start(globals, path.resolve(dir), options);
    emit(result, () =>
      [
        `${result.status === "created" ? "created" : "using"} project ${result.name} (${result.project_id})`,
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

interface StartOptions {
  currentBranch?: boolean;
  allowDirty?: boolean;
  maxSize?: string;
  fresh?: boolean;
  protect: boolean;
  name?: string;
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
    await api.request("DELETE", `/projects/${link.project_id}`).catch((error: unknown) => {
      if (!(error instanceof CliError && error.code === EXIT.notFound)) throw error;
    });
    await follow(api, link.project_id, (p) => p === undefined, 900_000, false);
    await store.forget(link.project_id);
    link = undefined;
  }
  let project: ProjectView | undefined;
  let status: "created" | "existing" = "existing";
  if (link) {
    project = await api.getProject(link.project_id).catch((error: unknown) => {
      if (error instanceof CliError && error.code === EXIT.notFound) return undefined;
      throw error;
    });
    if (!project) {
      note(`project ${link.project_id} no longer exists; creating a new one`);
      await store.forget(link.project_id);
      link = undefined;
    }
  }
  if (!project) {
    note(`creating project ${name}`);
    const created = await api.request<ProjectView>(
      "POST",
      "/projects",
      { name },
      { prefer: "respond-async" },
    );
    project = created.body;
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
      await api.request("POST", `/projects/${id}/start`);
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
    const patch: Record<string, unknown> = {};
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
      await api.request("PATCH", `/projects/${id}`, patch);
      project = (await follow(api, id, (p) => running(p) && settled(p)))!;
      target = await sshTarget(api, store, project);
      await waitForSsh(target);
      const appliedProtected = (patch.protected_paths as string[] | undefined) ?? [...already];
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
      await api.request("PUT", `/projects/${id}/sync`, { mode: options.syncMode, interval_seconds: 60 });
    return {
      project_id: id,
      name: project.name,
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
async function undoCreate(api: ApiClient, store: ConfigStore, id: string): Promise<void> {
  note(`deleting project ${id}, which this start created`);
  await api.request("DELETE", `/projects/${id}`);
  await follow(api, id, (p) => p === undefined, 300_000, false);
  await store.forget(id);
}

/** A devcontainer's image: `image` as named (it must be on the engine), or `build.dockerfile` built FROM the sandbox image. */
async function devcontainerImage(
  dc: DevContainer,
  root: string,
  repoName: string,
): Promise<string | undefined> {
  if (dc.image) return dc.image;
  if (!dc.build) return undefined;
  const { createHash } = await import("node:crypto");
  const digest = createHash("sha256")
    .update(await fs.readFile(dc.build.dockerfile))
    .digest("hex")
    .slice(0, 12);
  const tag = `agent-sandbox/repo-${repoName.toLowerCase().replace(/[^a-z0-9-]/g, "-")}:${digest}`;
  note(`building ${path.relative(root, dc.build.dockerfile)} FROM the sandbox image as ${tag}`);
  // As `npm run image:repo` does: the Dockerfile's BASE_IMAGE argument is the sandbox image.
  const built = await capture(
    "docker",
    [
      "build",
      "-q",
      // A failed step's container goes too (the classic builder keeps it otherwise): nothing half-made.
      "--force-rm",
      "--build-arg",
      "BASE_IMAGE=agent-sandbox/sandbox:latest",
      "-f",
      dc.build.dockerfile,
      "-t",
      tag,
      dc.build.context,
    ],
    {
      env: { ...process.env, DOCKER_BUILDKIT: "0" },
    },
  ).catch((error: Error) => ({ code: 1, stdout: "", stderr: error.message }));
  if (built.code !== 0)
    throw new CliError(
      EXIT.badInput,
      `${dc.file}: build.dockerfile failed: ${built.stderr.trim().split("\n").slice(-3).join(" ")}; nothing was created`,
    );
  return tag;
}

/** Applies a devcontainer's containerEnv, forwardPorts and postCreateCommand; the target may be new. */
async function applyDevcontainer(
  api: ApiClient,
  store: ConfigStore,
  target: SshTarget,
  id: string,
  repoName: string,
  dc: DevContainer,
): Promise<{ notes: string[]; target: SshTarget }> {
  const notes: string[] = [];
  if (Object.keys(dc.containerEnv).length > 0) {
    await runScript(target, "containerEnv", CONTAINER_ENV, [renderEnvFile(dc.containerEnv)]);
    notes.push(`containerEnv ${Object.keys(dc.containerEnv).join(", ")} in the agent's login shells`);
  }
  if (dc.forwardPorts.length > 0) {
    // The front door's routes come from the project's declared ports (devcontainer forwardPorts).
    const ports = dc.forwardPorts.map((port) => ({ port }));
    const applied = await api.request<ProjectView>("PATCH", `/projects/${id}`, { ports }).then(
      ({ body }) => body,
      (error: unknown) => {
        if (error instanceof CliError && error.code === EXIT.badInput) return error.message;
        throw error;
      },
    );
    // The routes are the stack's: wait for the operation, and read the host key again in case the
    // container was replaced.
    if (typeof applied !== "string" && !settled(applied)) {
      const project = (await follow(api, id, (p) => running(p) && settled(p)))!;
      target = await sshTarget(api, store, project);
      await waitForSsh(target);
    }
    notes.push(
      typeof applied !== "string"
        ? `forwardPorts ${dc.forwardPorts.join(", ")} declared (front-door routes)`
        : `forwardPorts NOT applied: ${applied}`,
    );
  }
  if (dc.postCreateCommand) {
    note(`running postCreateCommand in /workspace/${repoName}`);
    const out = await runScript(target, "postCreateCommand", POST_CREATE, [repoName, dc.postCreateCommand]);
    notes.push(
      out.trim() === "already run"
        ? "postCreateCommand already run for this repository"
        : "postCreateCommand ran",
    );
  }
  return { notes, target };
}

program
  .command("attach")
  .description("the project's terminal (tmux session main, or a worktree's) in this terminal")
  .option("-w, --worktree <name>", "attach the worktree's own tmux session")
  .option("--detach-key <key>", "the key that detaches, as ^X (default ^])", "^]")
  .addHelpText("after", "\nExamples:\n  $ sbx attach\n  $ sbx attach --worktree feature-x --detach-key ^Q")
  .action(async (options: { worktree?: string; detachKey: string }, command: Command) => {
    const globals = globalsOf(command);
    const { api, store, config } = await context(globals);
    await requireLogin(config);
    const key = /^\^([@A-Z[\\\]^_])$/i.exec(options.detachKey);
    if (!key)
      throw new CliError(
        EXIT.usage,
        `--detach-key must be a control key written ^X, not ${options.detachKey}`,
      );
    const detachByte = key[1]!.toUpperCase().charCodeAt(0) - 64;
    if (options.worktree) checkWorktreeName(options.worktree);
    const { id } = await resolveProject(globals, config);
    let project = await api.getProject(id);
    if (project.status !== "running" || !project.terminal_url)
      throw new CliError(EXIT.conflict, `the sandbox is ${project.status}: sbx start first`);
    if (options.worktree) {
      const target = await sshTarget(api, store, project);
      const has = await remote(target, `tmux has-session -t ${shellQuote(`=${options.worktree}`)}`);
      if (has.code !== 0)
        throw new CliError(
          EXIT.notFound,
          `no session for worktree ${options.worktree}: sbx worktree add ${options.worktree}`,
        );
      project = await api.getProject(id); // a fresh ticket
    }
    const url = `${project.terminal_url!}${options.worktree ? `&session=${encodeURIComponent(options.worktree)}` : ""}`;
    note(`[sbx] attached to ${options.worktree ?? "main"}; ${options.detachKey} detaches`);
    const closed = await attachTerminal(url, detachByte);
    const explained = closed.detached
      ? "detached; the session keeps running (sbx attach to return)"
      : explainClose(closed.code, closed.reason);
    if (jsonMode)
      emit(
        { code: closed.code, reason: closed.reason, detached: closed.detached, explanation: explained },
        "",
      );
    else process.stderr.write(`\r\n[sbx] ${printable(explained)}\r\n`);
    if (!closed.detached && closed.code !== 1000) process.exitCode = EXIT.terminal;
  });

async function projectTarget(command: Command) {
  const globals = globalsOf(command);
  const { api, store, config } = await context(globals);
  await requireLogin(config);
  const resolved = await resolveProject(globals, config);
  const project = await api.getProject(resolved.id);
  if (project.status !== "running")
    throw new CliError(EXIT.conflict, `the sandbox is ${project.status}: sbx start first`);
  return { ...resolved, api, store, config, project, target: await sshTarget(api, store, project) };
}

program
  .command("ssh")
  .description("an SSH shell in the sandbox (or run a command there), with the project's own key")
  .argument("[command...]", "a command to run instead of a shell")
  .addHelpText("after", "\nExamples:\n  $ sbx ssh\n  $ sbx ssh -- git -C /workspace/app log --oneline -3")
  .action(async (words: string[], _options: unknown, command: Command) => {
    const { target } = await projectTarget(command);
    const args = [
      ...sshOptions(target),
      "-p",
      String(target.port),
      ...(words.length === 0 && process.stdin.isTTY ? ["-t"] : []),
      `${target.user}@${target.host}`,
      ...words.map(shellQuote),
    ];
    const code = await new Promise<number>((resolve) =>
      spawn("ssh", args, { stdio: "inherit" }).once("close", (c) => resolve(c ?? 1)),
    );
    process.exitCode = code === 255 ? EXIT.remote : code;
  });

program
  .command("ssh-config")
  .description("an ~/.ssh/config block for the project (for editors and plain ssh)")
  .option("--host <alias>", "the Host alias (default sbx-<name>)")
  .addHelpText("after", "\nExample:\n  $ sbx ssh-config >> ~/.ssh/config && ssh sbx-app")
  .action(async (options: { host?: string }, command: Command) => {
    const { target, project } = await projectTarget(command);
    const alias = options.host ?? `sbx-${project.name.replace(/[^A-Za-z0-9_-]/g, "-")}`;
    const block = [
      `Host ${alias}`,
      `  HostName ${target.host}`,
      `  Port ${target.port}`,
      `  User ${target.user}`,
      `  IdentityFile ${target.keyFile}`,
      "  IdentitiesOnly yes",
      "  IdentityAgent none",
      "  ForwardAgent no",
      "  ClearAllForwardings yes",
      // The sandbox gets a new host key at every start; sbx commands (sbx status, for one) rewrite this file.
      `  UserKnownHostsFile ${target.knownHostsFile}`,
      `  HostKeyAlias ${target.hostKeyAlias}`,
      "  StrictHostKeyChecking yes",
      "  CheckHostIP no",
    ].join("\n");
    emit(
      {
        host: alias,
        hostname: target.host,
        port: target.port,
        user: target.user,
        identity_file: target.keyFile,
        config: block,
      },
      block,
    );
  });

program
  .command("sync")
  .description(
    "fetch the sandbox's branches into refs/remotes/sandbox/* (host-initiated), optionally copy artifacts back, or set the sync mode",
  )
  .option("--artifacts <path...>", "paths under /workspace/<repo> to copy back (tar over the project's SSH)")
  .option("--to <dir>", "where artifacts go (default: the same path in this repository)")
  .addOption(
    new Option(
      "--mode <mode>",
      "set the project's sync mode: commits inside on an interval, when idle, or never",
    ).choices(SYNC_MODES),
  )
  .option("--interval <seconds>", "with --mode: the interval (default 60)")
  .addHelpText(
    "after",
    "\nExamples:\n  $ sbx sync && git log sandbox/main\n  $ sbx sync --artifacts dist coverage --to /tmp/out\n  $ sbx sync --mode auto-commit --interval 30",
  )
  .action(
    async (
      options: { artifacts?: string[]; to?: string; mode?: string; interval?: string },
      command: Command,
    ) => {
      if (options.interval !== undefined && !options.mode)
        throw new CliError(EXIT.usage, "--interval goes with --mode");
      if (options.mode) {
        // A project setting, kept in the sandbox's home where its sync daemon reads it (PUT /projects/{id}/sync).
        const interval = options.interval ?? "60";
        if (!/^\d{1,6}$/.test(interval) || Number(interval) < 1)
          throw new CliError(EXIT.usage, `--interval must be a number of seconds, not ${interval}`);
        const globals = globalsOf(command);
        const { api, config } = await context(globals);
        await requireLogin(config);
        const { id } = await resolveProject(globals, config);
        const { body: sync } = await api.request<SyncSetting>("PUT", `/projects/${id}/sync`, {
          mode: options.mode,
          interval_seconds: Number(interval),
        });
        emit({ sync }, `sync mode: ${sync.mode}, every ${sync.interval_seconds} s`);
        return;
      }
      // Every path is checked before anything is fetched or copied.
      const wanted = (options.artifacts ?? []).map(artifactPath);
      const { target, link, root } = await projectTarget(command);
      if (!link || !root)
        throw new CliError(
          EXIT.notFound,
          "this project has no repository linked here: run sbx sync inside the repository you started it from",
        );
      const fetched = await fetchSandbox(target, root, `/home/agent/workspace/${link.repo}`);
      const artifacts: { path: string; to: string }[] = [];
      for (const artifact of wanted) {
        const dest = path.resolve(options.to ?? root);
        await fs.mkdir(dest, { recursive: true });
        await copyBack(target, link.repo, artifact, dest);
        artifacts.push({ path: artifact, to: path.join(dest, artifact) });
      }
      emit({ updated: fetched.updated, artifacts }, () =>
        [
          fetched.updated.length === 0
            ? "already up to date"
            : fetched.updated
                .map((u) => `${u.ref}: ${u.from ? u.from.slice(0, 9) : "(new)"} → ${u.to.slice(0, 9)}`)
                .join("\n"),
          ...artifacts.map((a) => `copied ${a.path} → ${a.to}`),
        ].join("\n"),
      );
    },
  );

/**
 * /workspace/<repo>/<artifact> → dest/<artifact>: tar over the project's SSH (the image has no rsync), read
 * here by cli/artifacts.ts, never by the host's tar: the sandbox makes that stream, so it is checked member
 * by member and nothing is written until all of it was accepted.
 */
async function copyBack(target: SshTarget, repo: string, artifact: string, dest: string): Promise<Extracted> {
  // Files that share an inode go as copies (--hard-dereference): a hard link member is refused here.
  const script = `cd "$HOME/workspace/$1" && [ -e "$2" ] || { echo "no $2 in /workspace/$1" >&2; exit 4; }; tar --hard-dereference -cf - -- "$2"`;
  const ssh = spawn(
    "ssh",
    [
      ...sshOptions(target),
      "-p",
      String(target.port),
      `${target.user}@${target.host}`,
      `bash -c ${shellQuote(`set -- ${shellQuote(repo)} ${shellQuote(artifact)}\n${script}`)}`,
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  // The sandbox's stderr is kept to its last 8 KiB: it is the agent's to make as long as it likes.
  let sshErr = "";
  ssh.stderr.on("data", (c: Buffer) => (sshErr = (sshErr + c.toString()).slice(-8192)));
  const exited = new Promise<number>((resolve) => {
    ssh.once("error", () => resolve(255));
    ssh.once("close", (code) => resolve(code ?? 1));
  });
  const sshFailure = (code: number) =>
    code === 4
      ? new CliError(EXIT.notFound, `--artifacts: ${sshErr.trim()}`)
      : code === 255
        ? new CliError(
            EXIT.remote,
            `copying ${artifact} back: cannot reach the sandbox over SSH: ${sshErr.trim()}`,
          )
        : new CliError(EXIT.remote, `copying ${artifact} back failed: ${sshErr.trim() || `exit ${code}`}`);
  try {
    return await extractArtifact(ssh.stdout, dest, artifact, {
      accepted: async () => {
        const code = await exited;
        if (code !== 0) throw sshFailure(code);
      },
    });
  } catch (error) {
    ssh.kill("SIGKILL");
    const code = await exited;
    // A refusal that names members stands whatever the sandbox's side did; a stream that merely ended early
    // is explained by how that side ended, when it did not end well.
    if (
      error instanceof ArchiveRefused &&
      error.members.length === 0 &&
      ssh.signalCode === null &&
      code !== 0
    )
      throw sshFailure(code);
    throw error;
  }
}

const env = program.command("env").description("the repository's environment files");
env
  .command("push")
  .description(
    "copy the repository's .env* files into the sandbox (0600, never committed); direnv loads them in the sandbox's shells",
  )
  .option("-w, --worktree <name>", "into the worktree instead of /workspace/<repo>")
  .addHelpText(
    "after",
    "\nExample:\n  $ sbx env push && sbx ssh -- bash -lc 'cd /workspace/app && echo $DATABASE_URL'",
  )
  .action(async (options: { worktree?: string }, command: Command) => {
    if (options.worktree) checkWorktreeName(options.worktree);
    const { target, link, root } = await projectTarget(command);
    if (!link || !root)
      throw new CliError(
        EXIT.notFound,
        "run sbx env push inside the repository you started the project from",
      );
    const files = await envFiles(root);
    if (files.length === 0)
      throw new CliError(EXIT.badInput, `no .env files at ${root} (.env, .env.local, ...)`);
    const args = [link.repo, options.worktree ?? ""];
    for (const file of files) args.push(file, (await fs.readFile(path.join(root, file))).toString("base64"));
    await runScript(target, "env push", ENV_PUSH, args);
    const where = `/workspace/${link.repo}${options.worktree ? `/.worktrees/${options.worktree}` : ""}`;
    emit(
      { files, to: where },
      `pushed ${files.join(", ")} to ${where}; direnv loads them there (.envrc allowed)`,
    );
  });

const worktree = program
  .command("worktree")
  .description("worktrees of the repository inside, each with its own branch and tmux session");
worktree
  .command("add")
  .description(
    "make /workspace/<repo>/.worktrees/<name> on branch <name> (made from --from, or HEAD, when new) with tmux session <name>",
  )
  .argument("<name>", "letters, digits, _ and -")
  .option("--from <ref>", "the commit a new branch starts at (default: HEAD inside)")
  .option(
    "--port <port>",
    "the port this worktree's dev server listens on: a front-door route http://<project>-<name>.sandbox.localhost",
  )
  .addHelpText(
    "after",
    "\nExamples:\n  $ sbx worktree add feature-x --from main && sbx attach --worktree feature-x\n  $ sbx worktree add feature-y --port 3001 && sbx open --worktree feature-y",
  )
  .action(async (name: string, options: { from?: string; port?: string }, command: Command) => {
    checkWorktreeName(name);
    if (name === "main")
      throw new CliError(EXIT.badInput, "main is the repository's own session; name the worktree otherwise");
    if (options.from && (options.from.startsWith("-") || /[\s~^:?*[\\]/.test(options.from)))
      throw new CliError(EXIT.badInput, `--from ${JSON.stringify(options.from)} is not a ref name`);
    // Checked before anything is made: a route's name is part of a host name.
    if (options.port !== undefined) {
      if (!/^\d{1,5}$/.test(options.port) || Number(options.port) < 1 || Number(options.port) > 65535)
        throw new CliError(EXIT.usage, `--port: ${JSON.stringify(options.port)} is not a port number`);
      if (!/^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$/.test(name))
        throw new CliError(
          EXIT.badInput,
          `worktree ${name} cannot name a front-door route (a host name's label: a-z, 0-9 and '-', at most 32 characters); nothing was made`,
        );
    }
    const { target, link } = await projectTarget(command);
    if (!link)
      throw new CliError(
        EXIT.notFound,
        "run sbx worktree inside the repository you started the project from",
      );
    const dir = (
      await runScript(target, `worktree add ${name}`, WORKTREE_ADD, [link.repo, name, options.from ?? ""])
    ).trim();
    const route =
      options.port === undefined
        ? undefined
        : await setWorktreeRoute(command, name, Number(options.port)).catch(async (error: unknown) => {
            // Nothing half-made: the worktree goes again when its route cannot be declared.
            await runScript(target, `worktree rm ${name}`, WORKTREE_RM, [link.repo, name, "yes"]).catch(
              () => undefined,
            );
            throw error;
          });
    emit(
      {
        name,
        path: dir.replace(/^\/home\/agent\/workspace/, "/workspace"),
        branch: name,
        session: name,
        ...(route ? { front_door: route } : {}),
      },
      `worktree ${name} at /workspace/${link.repo}/.worktrees/${name} (branch ${name}); sbx attach --worktree ${name}` +
        (route ? `\nits dev server on ${route.port}: ${route.url} (sbx open --worktree ${name})` : ""),
    );
  });
worktree
  .command("list")
  .description("the worktrees inside and their tmux sessions")
  .action(async (_options: unknown, command: Command) => {
    const { target, link } = await projectTarget(command);
    if (!link)
      throw new CliError(
        EXIT.notFound,
        "run sbx worktree inside the repository you started the project from",
      );
    const out = await runScript(target, "worktree list", WORKTREE_LIST, [link.repo]);
    const [trees, sessions = ""] = out.split("--sessions\n");
    const attached = new Map(
      sessions
        .split("\n")
        .filter(Boolean)
        .map((l) => l.split(" ") as [string, string]),
    );
    const list = trees!
      .split("\n\n")
      .filter((b) => b.trim())
      .map((block) => {
        const tree = /^worktree (.*)$/m.exec(block)?.[1] ?? "";
        const branch = /^branch refs\/heads\/(.*)$/m.exec(block)?.[1] ?? null;
        const name = tree.includes("/.worktrees/") ? path.basename(tree) : "main";
        return {
          name,
          path: tree.replace(/^\/home\/agent\/workspace/, "/workspace"),
          branch,
          session: attached.has(name) ? name : null,
          attached_clients: Number(attached.get(name) ?? 0),
        };
      });
    emit({ worktrees: list }, () =>
      list
        .map(
          (w) =>
            `${w.name.padEnd(20)} ${String(w.branch).padEnd(20)} ${w.path}${w.session ? `  (tmux ${w.session}, ${w.attached_clients} attached)` : ""}`,
        )
        .join("\n"),
    );
  });
worktree
  .command("rm")
  .description("remove a worktree and end its tmux session (its branch stays)")
  .argument("<name>")
  .option("--force", "discard the worktree's uncommitted changes")
  .action(async (name: string, options: { force?: boolean }, command: Command) => {
    checkWorktreeName(name);
    const { target, link } = await projectTarget(command);
    if (!link)
      throw new CliError(
        EXIT.notFound,
        "run sbx worktree inside the repository you started the project from",
      );
    await runScript(target, `worktree rm ${name}`, WORKTREE_RM, [
      link.repo,
      name,
      options.force ? "yes" : "no",
    ]);
    const routes = await setWorktreeRoute(command, name, undefined);
    emit(
      { removed: name, routes_removed: routes.removed },
      `removed worktree ${name} (branch ${name} kept)${routes.removed > 0 ? `; its front-door route is gone` : ""}`,
    );
  });

interface FrontDoorView {
  readonly name: string | null;
  readonly port: number;
  readonly url: string;
}

/**
 * Declares the worktree's front-door route (its name, `port`), or with `port` undefined removes every route
 * of that name; the other declared ports stay. Waits for the update of the stack that makes the routes.
 */
async function setWorktreeRoute(
  command: Command,
  name: string,
  port: number | undefined,
): Promise<FrontDoorView & { removed: number }> {
  const globals = globalsOf(command);
  const { api, config } = await context(globals);
  const { id } = await resolveProject(globals, config);
  const { body: project } = await api.request<{ front_door?: FrontDoorView[] }>("GET", `/projects/${id}`);
  const declared = project.front_door ?? [];
  const kept = declared.filter((route) => route.name !== name);
  const removed = declared.length - kept.length;
  const ports = [
    ...kept.map((route) =>
      route.name === null ? { port: route.port } : { port: route.port, name: route.name },
    ),
    ...(port === undefined ? [] : [{ port, name }]),
  ];
  if (port === undefined && removed === 0) return { name, port: 0, url: "", removed };
  const { body: applied } = await api.request<ProjectView>("PATCH", `/projects/${id}`, { ports });
  if (!settled(applied)) await follow(api, id, (p) => running(p) && settled(p));
  const { body: after } = await api.request<{ front_door?: FrontDoorView[] }>("GET", `/projects/${id}`);
  const route = (after.front_door ?? []).find((r) => r.name === name && r.port === port);
  return { name, port: port ?? 0, url: route?.url ?? "", removed };
}

/** stop, rm, snapshot, restore: a request and the wait for its operation. */
function lifecycle(
  name: string,
  description: string,
  configure: (c: Command) => Command,
  request: (o: Record<string, unknown>) => {
    method: string;
    path: (id: string) => string;
    body?: unknown;
    confirm?: boolean;
  },
  done: (p: ProjectView | undefined) => boolean,
) {
  configure(
    program
      .command(name)
      .description(description)
      .option("--no-wait", "return once the runtime has accepted it"),
  ).action(async (options: Record<string, unknown>, command: Command) => {
    const globals = globalsOf(command);
    const { api, store, config } = await context(globals);
    await requireLogin(config);
    const what = request(options);
    if (what.confirm === false)
      throw new CliError(
        EXIT.usage,
        `sbx ${name} deletes the project, its home and its snapshots: pass --yes`,
      );
    const { id } = await resolveProject(globals, config);
    await api.request(what.method, what.path(id), what.body);
    const project =
      options.wait === false
        ? await api.getProject(id).catch(() => undefined)
        : await follow(api, id, done, 900_000, name !== "rm");
    if (name === "rm") await store.forget(id);
    emit(
      { project_id: id, status: project?.status ?? "deleted", operation: project?.operation ?? null },
      `${name}: project ${id} is ${project?.status ?? "deleted"}`,
    );
  });
}
lifecycle(
  "stop",
  "stop the sandbox (a final backup first); /home/agent is kept",
  (c) => c,
  () => ({ method: "POST", path: (id) => `/projects/${id}/stop` }),
  (p) => p?.status === "stopped",
);
lifecycle(
  "rm",
  "delete the project: sandbox, home volume, snapshots (asks for --yes)",
  (c) => c.option("-y, --yes", "yes, delete it"),
  (o) => ({ method: "DELETE", path: (id) => `/projects/${id}`, confirm: o.yes === true }),
  (p) => p === undefined,
);
lifecycle(
  "snapshot",
  "snapshot the sandbox's system state (and --stop it)",
  (c) => c.option("--stop", "stop the sandbox once the snapshot is pushed"),
  (o) => ({ method: "POST", path: (id) => `/projects/${id}/snapshot`, body: { stop: o.stop === true } }),
  (p) => settled(p),
);
lifecycle(
  "restore",
  "run a snapshot (the newest unless --snapshot names one) on the project's own home",
  (c) => c.option("--snapshot <tag>", "the snapshot's tag (GET /projects/{id}/snapshots)"),
  (o) => ({
    method: "POST",
    path: (id) => `/projects/${id}/restore`,
    body: o.snapshot ? { snapshot: o.snapshot } : {},
  }),
  (p) => settled(p),
);

registerOpen(program, { globalsOf, context, requireLogin, resolveProject, emit });
registerExec(program, { globalsOf, context, requireLogin, resolveProject });

async function main(argv: string[]): Promise<void> {
  jsonMode = argv.includes("--json");
  program.exitOverride();
  program.configureOutput({ writeErr: (text) => (jsonMode ? undefined : process.stderr.write(text)) });
  for (const sub of program.commands) {
    sub.exitOverride();
    for (const nested of sub.commands) nested.exitOverride();
  }
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      if (
        error.code === "commander.helpDisplayed" ||
        error.code === "commander.version" ||
        error.code === "commander.help"
      ) {
        process.exitCode = EXIT.ok;
        return;
      }
      if (jsonMode) emit({ error: "usage", message: error.message, exit_code: EXIT.usage }, "");
      process.exitCode = EXIT.usage;
      return;
    }
    const failure = error instanceof CliError ? error : new CliError(EXIT.failure, (error as Error).message);
    if (jsonMode)
      emit(
        {
          error: Object.keys(EXIT).find((k) => EXIT[k as keyof typeof EXIT] === failure.code),
          message: failure.message,
          exit_code: failure.code,
          ...(failure.details === undefined ? {} : { details: failure.details }),
        },
        "",
      );
    // A message may quote what the sandbox printed (a script's stderr): shown without its escapes.
    else process.stderr.write(`sbx: ${printable(failure.message)}\n`);
    process.exitCode = failure.code;
  }
}

await main(process.argv);
