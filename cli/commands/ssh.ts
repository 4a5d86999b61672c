// `sbx ssh` and `sbx ssh-config`: the sandbox's SSH with the project's own key and pinned host key.
import { spawn } from "node:child_process";
import type { Command } from "commander";
import { projectTarget } from "../context.js";
import { EXIT } from "../errors.js";
import { emit } from "../output.js";
import { shellQuote, sshConfigBlock, sshOptions } from "../ssh.js";

export function registerSsh(program: Command): void {
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
      const block = sshConfigBlock(alias, target);
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
}
