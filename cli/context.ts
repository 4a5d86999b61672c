// What most `sbx` commands begin with: the config and the API client, the login, the project the command is
// about (--project, or the one `sbx start` linked to the repository here), its SSH target, and the wait for
// an operation with its progress shown.
import type { Command } from "commander";
import type { ProjectView } from "../sdk/src/client.js";
import { API_KEY_VARIABLE, CliClient, DEFAULT_API } from "./client.js";
import { ConfigStore, type CliConfig, type RepoLink } from "./config.js";
import { CliError, EXIT } from "./errors.js";
import { note } from "./output.js";
import { progressLine } from "./progress.js";
import { capture, checkSshAddress, sandboxHostKey, type SshTarget } from "./ssh.js";

/** The options every command takes (sbx --help). */
export interface Globals {
  json?: boolean;
  api?: string;
  project?: string;
}

export const SYNC_MODES = ["manual", "auto-commit", "auto-idle"] as const;

export const globalsOf = (command: Command): Globals => command.optsWithGlobals();

/** The API key in $SBX_API_KEY, when one is set (it then stands for the login). */
const apiKey = () => process.env[API_KEY_VARIABLE] || undefined;

/**
 * The config, and the API client for --api, $SBX_API, the address logged in to, or the default; it sends the
 * API key in $SBX_API_KEY when one is set, else the login's tokens.
 */
export async function context(globals: Globals) {
  const store = new ConfigStore();
  const config = await store.load();
  const base = (globals.api ?? process.env.SBX_API ?? config.api ?? DEFAULT_API).replace(/\/+$/, "");
  return { store, config, api: new CliClient(base, store, apiKey()) };
}

export async function requireLogin(config: CliConfig): Promise<void> {
  if (!config.access_token && !config.refresh_token && !apiKey())
    throw new CliError(
      EXIT.auth,
      `not logged in: run \`sbx login\` first (or set $${API_KEY_VARIABLE} to an API key)`,
    );
}

/** The repository root `dir` is in, or undefined outside one. */
export async function repoRootOf(dir: string): Promise<string | undefined> {
  const top = await capture("git", ["-C", dir, "rev-parse", "--show-toplevel"]).catch(() => undefined);
  return top?.code === 0 ? top.stdout.trim() : undefined;
}

/** The project a command is about: --project, or the one `sbx start` linked to the repository here. */
export async function resolveProject(
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

export async function sshTarget(
  api: CliClient,
  store: ConfigStore,
  project: ProjectView,
): Promise<SshTarget> {
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
export async function follow(
  api: CliClient,
  id: string,
  done: (p: ProjectView | undefined) => boolean,
  timeoutMs = 900_000,
  /** A delete waits through the `error` status its project may be in. */
  failOnError = true,
): Promise<ProjectView | undefined> {
  const deadline = Date.now() + timeoutMs;
  let shown = "";
  for (;;) {
    const project = await api.project(id).catch((error: unknown) => {
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

export const running = (p: ProjectView | undefined) => p?.status === "running";
export const settled = (p: ProjectView | undefined) =>
  p !== undefined &&
  ["running", "stopped", "error"].includes(p.status) &&
  (!p.operation || ["succeeded", "failed", "cancelled"].includes(p.operation.state));

/** The running project a command works in over SSH, and its SSH target. */
export async function projectTarget(command: Command) {
  const globals = globalsOf(command);
  const { api, store, config } = await context(globals);
  await requireLogin(config);
  const resolved = await resolveProject(globals, config);
  const project = await api.project(resolved.id);
  if (project.status !== "running")
    throw new CliError(EXIT.conflict, `the sandbox is ${project.status}: sbx start first`);
  return { ...resolved, api, store, config, project, target: await sshTarget(api, store, project) };
}
