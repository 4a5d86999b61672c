// `sbx env push`: the repository's .env* files into the sandbox (0600, never committed), loaded by direnv.
import * as fs from "node:fs/promises";
import * as path from "node:path";
import type { Command } from "commander";
import { projectTarget } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit } from "../output.js";
import { envFiles } from "../repo.js";
import { ENV_PUSH, runScript } from "../sandbox-scripts.js";
import { parseWorktreeName } from "../worktree-name.js";

export function registerEnv(program: Command): void {
  const env = program.command("env").description("the repository's environment files");
  env
    .command("push")
    .description(
      "copy the repository's .env* files into the sandbox (0600, never committed); direnv loads them in the sandbox's shells",
    )
    .option(
      "-w, --worktree <branch>",
      "into the worktree (its branch, or its directory's name) instead of /workspace/<repo>",
    )
    .addHelpText(
      "after",
      "\nExample:\n  $ sbx env push && sbx ssh -- bash -lc 'cd /workspace/app && echo $DATABASE_URL'",
    )
    .action(async (options: { worktree?: string }, command: Command) => {
      const dir = options.worktree === undefined ? undefined : parseWorktreeName(options.worktree).dir;
      const { target, link, root } = await projectTarget(command);
      if (!link || !root)
        throw new CliError(
          EXIT.notFound,
          "run sbx env push inside the repository you started the project from",
        );
      const files = await envFiles(root);
      if (files.length === 0)
        throw new CliError(EXIT.badInput, `no .env files at ${root} (.env, .env.local, ...)`);
      const args = [link.repo, dir ?? ""];
      for (const file of files)
        args.push(file, (await fs.readFile(path.join(root, file))).toString("base64"));
      await runScript(target, "env push", ENV_PUSH, args);
      const where = `/workspace/${link.repo}${dir ? `/.worktrees/${dir}` : ""}`;
      emit(
        { files, to: where },
        `pushed ${files.join(", ")} to ${where}; direnv loads them there (.envrc allowed)`,
      );
    });
}
