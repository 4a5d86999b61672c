// `sbx attach`: the project's terminal (tmux session main, or a worktree's) in this terminal.
import type { Command } from "commander";
import { context, globalsOf, requireLogin, resolveProject, sshTarget } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit, isJsonMode, note } from "../output.js";
import { printable } from "../printable.js";
import { remote, shellQuote } from "../ssh.js";
import { attachTerminal, explainClose } from "../terminal.js";
import { parseWorktreeName } from "../worktree-name.js";

export function registerAttach(program: Command): void {
  program
    .command("attach")
    .description("the project's terminal (tmux session main, or a worktree's) in this terminal")
    .option(
      "-w, --worktree <branch>",
      "attach the worktree's own tmux session (its branch, or its directory's name)",
    )
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
      // The worktree's tmux session is its directory's name: feat/x's is feat__x.
      const session = options.worktree === undefined ? undefined : parseWorktreeName(options.worktree).dir;
      const { id } = await resolveProject(globals, config);
      let project = await api.project(id);
      // A sandbox the platform put to sleep (idle, paused) has a terminal too: attaching wakes it.
      if (!project.terminal_url)
        throw new CliError(EXIT.conflict, `the sandbox is ${project.status}: sbx start first`);
      if (project.status !== "running") note("[sbx] the sandbox is asleep: waking it");
      if (session) {
        const target = await sshTarget(api, store, project);
        const has = await remote(target, `tmux has-session -t ${shellQuote(`=${session}`)}`);
        if (has.code !== 0)
          throw new CliError(
            EXIT.notFound,
            `no session for worktree ${options.worktree}: sbx worktree add ${options.worktree}`,
          );
        project = await api.project(id); // a fresh ticket
      }
      const url = `${project.terminal_url!}${session ? `&session=${encodeURIComponent(session)}` : ""}`;
      note(`[sbx] attached to ${options.worktree ?? "main"}; ${options.detachKey} detaches`);
      const closed = await attachTerminal(url, detachByte);
      const explained = closed.detached
        ? "detached; the session keeps running (sbx attach to return)"
        : explainClose(closed.code, closed.reason);
      if (isJsonMode())
        emit(
          { code: closed.code, reason: closed.reason, detached: closed.detached, explanation: explained },
          "",
        );
      else process.stderr.write(`\r\n[sbx] ${printable(explained)}\r\n`);
      if (!closed.detached && closed.code !== 1000) process.exitCode = EXIT.terminal;
    });
}
