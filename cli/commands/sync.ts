// `sbx sync`: the sandbox's branches fetched into refs/remotes/sandbox/* (host-initiated), once or as they move
// (--watch, cli/sync-watch.ts), artifacts copied back through a checked tar stream, or the project's sync mode
// set.
import { spawn } from "node:child_process";
import * as fs from "node:fs/promises";
import * as path from "node:path";
import { Command, Option } from "commander";
import { artifactPath, ArchiveRefused, extractArtifact, type Extracted } from "../artifacts.js";
import { context, globalsOf, projectTarget, requireLogin, resolveProject, SYNC_MODES } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit } from "../output.js";
import { fetchSandbox } from "../repo.js";
import { shellQuote, sshOptions, type SshTarget } from "../ssh.js";
import { runSyncWatch, updateLine, watchConflicts } from "../sync-watch.js";

export function registerSync(program: Command): void {
  program
    .command("sync")
    .description(
      "fetch the sandbox's branches into refs/remotes/sandbox/* (host-initiated), optionally copy artifacts back, or set the sync mode",
    )
    .option(
      "--artifacts <path...>",
      "paths under /workspace/<repo> to copy back (tar over the project's SSH)",
    )
    .option("--to <dir>", "where artifacts go (default: the same path in this repository)")
    .addOption(
      new Option(
        "--mode <mode>",
        "set the project's sync mode: commits inside on an interval, when idle, or never",
      ).choices(SYNC_MODES),
    )
    .option("--interval <seconds>", "with --mode: the interval (default 60)")
    .option(
      "--watch",
      "keep fetching: each commit inside is fetched within seconds, until Ctrl-C (reconnects after a restart or a network drop)",
    )
    .addHelpText(
      "after",
      "\nExamples:\n  $ sbx sync && git log sandbox/main\n  $ sbx sync --artifacts dist coverage --to /tmp/out\n  $ sbx sync --watch &\n  $ sbx sync --mode auto-commit --interval 30",
    )
    .action(
      async (
        options: {
          artifacts?: string[];
          to?: string;
          mode?: (typeof SYNC_MODES)[number];
          interval?: string;
          watch?: boolean;
        },
        command: Command,
      ) => {
        if (options.watch) {
          const conflicts = watchConflicts(options);
          if (conflicts) throw new CliError(EXIT.usage, conflicts);
        }
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
          const { data: sync } = await api.call("PUT", "/projects/{id}/sync", {
            params: { id },
            body: { mode: options.mode, interval_seconds: Number(interval) },
          });
          emit({ sync }, `sync mode: ${sync.mode}, every ${sync.interval_seconds} s`);
          return;
        }
        const noRepository = () =>
          new CliError(
            EXIT.notFound,
            "this project has no repository linked here: run sbx sync inside the repository you started it from",
          );
        if (options.watch) {
          const globals = globalsOf(command);
          const { api, store, config } = await context(globals);
          await requireLogin(config);
          const { id, link, root } = await resolveProject(globals, config);
          if (!link || !root) throw noRepository();
          await runSyncWatch(api, store, id, root, link.repo);
          return;
        }
        // Every path is checked before anything is fetched or copied.
        const wanted = (options.artifacts ?? []).map(artifactPath);
        const { target, link, root } = await projectTarget(command);
        if (!link || !root) throw noRepository();
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
            fetched.updated.length === 0 ? "already up to date" : fetched.updated.map(updateLine).join("\n"),
            ...artifacts.map((a) => `copied ${a.path} → ${a.to}`),
          ].join("\n"),
        );
      },
    );
}

/**
 * /workspace/<repo>/<artifact> → dest/<artifact>: tar over the project's SSH (the image has no rsync), read
 * here by cli/artifacts.ts, never by the host's tar: the sandbox makes that stream, so it is checked member
 * by member and nothing is written until all of it was accepted.
 */
/** How long a stream that ended early waits for ssh to report the sandbox side's exit. */
const EXIT_STATUS_WAIT_MS = 10_000;

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
  let streamEnded = false;
  ssh.stdout.once("end", () => (streamEnded = true));
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
    // A stream that ended early ends before ssh has told how the other side ended (the channel's EOF comes
    // before its exit status): that answer is waited for (a while), not killed before it comes.
    if (error instanceof ArchiveRefused && error.members.length === 0 && streamEnded)
      await Promise.race([
        exited,
        new Promise((resolve) => setTimeout(resolve, EXIT_STATUS_WAIT_MS).unref()),
      ]);
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
