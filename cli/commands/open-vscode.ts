// `sbx open-vscode`: VS Code's Remote-SSH on the sandbox. The project's `sbx ssh-config` block goes into
// ~/.ssh/config (between markers of its own, replaced on each run), then `code --remote ssh-remote+<alias>`
// opens /workspace/<repo> (or a worktree). Without `code` on PATH, nothing is written: the two steps are printed.
import { spawn } from "node:child_process";
import { constants, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { Command } from "commander";
import { projectTarget } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit, note } from "../output.js";
import { shellQuote, sshConfigBlock } from "../ssh.js";
import { parseWorktreeName } from "../worktree-name.js";

/** `config` with the block for `alias` between sbx's markers: replaced where it was, else prepended (ssh takes the first match). */
export function withSshConfigBlock(config: string, alias: string, block: string): string {
  const begin = `# >>> sbx ${alias} (written by sbx open-vscode)`;
  const end = `# <<< sbx ${alias}`;
  const marked = `${begin}\n${block}\n${end}\n`;
  const from = config.indexOf(`${begin}\n`);
  const to = from < 0 ? -1 : config.indexOf(`${end}\n`, from);
  if (from >= 0 && to >= 0) return config.slice(0, from) + marked + config.slice(to + end.length + 1);
  return config ? `${marked}\n${config}` : marked;
}

/** The command that opens `folder` of the sandbox in VS Code through the ssh alias. */
export function vscodeCommand(alias: string, folder: string): string[] {
  return ["code", "--remote", `ssh-remote+${alias}`, folder];
}

/** A word as a shell takes it, quoted only where it needs to be. */
const shellWord = (word: string) => (/^[A-Za-z0-9_./:+=@-]+$/.test(word) ? word : shellQuote(word));

/** `name`'s path on PATH when it is an executable file there. */
async function onPath(name: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter).filter(Boolean)) {
    const file = path.join(dir, name);
    if (
      await fs.access(file, constants.X_OK).then(
        () => true,
        () => false,
      )
    )
      return file;
  }
  return undefined;
}

export function registerOpenVscode(program: Command): void {
  program
    .command("open-vscode")
    .description(
      "open the repository (or a worktree) in VS Code's Remote-SSH; without `code` on PATH, print the commands",
    )
    .option("-w, --worktree <branch>", "open the worktree (its branch, or its directory's name)")
    .option("--host <alias>", "the Host alias in ~/.ssh/config (default sbx-<name>)")
    .option("--ssh-config <file>", "the ssh config VS Code reads", path.join(os.homedir(), ".ssh", "config"))
    .addHelpText("after", "\nExamples:\n  $ sbx open-vscode\n  $ sbx open-vscode --worktree feature-x")
    .action(async (options: { worktree?: string; host?: string; sshConfig: string }, command: Command) => {
      const dir = options.worktree === undefined ? undefined : parseWorktreeName(options.worktree).dir;
      const { target, project, link } = await projectTarget(command);
      if (!link)
        throw new CliError(
          EXIT.notFound,
          "run sbx open-vscode inside the repository you started the project from",
        );
      const alias = options.host ?? `sbx-${project.name.replace(/[^A-Za-z0-9_-]/g, "-")}`;
      if (!/^[A-Za-z0-9_.-]+$/.test(alias))
        throw new CliError(
          EXIT.usage,
          `--host ${JSON.stringify(alias)}: letters, digits, '.', '_' and '-' only`,
        );
      const folder = `/workspace/${link.repo}${dir ? `/.worktrees/${dir}` : ""}`;
      const open = vscodeCommand(alias, folder);
      const code = await onPath("code");
      if (!code) {
        const steps = [
          `sbx ssh-config --host ${alias} >> ${shellWord(options.sshConfig)}`,
          open.map(shellWord).join(" "),
        ];
        emit(
          { opened: false, host: alias, folder, commands: steps },
          `VS Code's \`code\` is not on PATH; with VS Code and its Remote-SSH extension installed, run:\n${steps.map((s) => `  ${s}`).join("\n")}`,
        );
        return;
      }
      const current = await fs.readFile(options.sshConfig, "utf8").catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") return "";
        throw error;
      });
      await fs.mkdir(path.dirname(options.sshConfig), { recursive: true, mode: 0o700 });
      await fs.writeFile(
        options.sshConfig,
        withSshConfigBlock(current, alias, sshConfigBlock(alias, target)),
        {
          mode: 0o600,
        },
      );
      note(`Host ${alias} written to ${options.sshConfig}`);
      const exit = await new Promise<number>((resolve) =>
        spawn(code, open.slice(1), { stdio: "inherit" })
          .once("error", () => resolve(1))
          .once("close", (c) => resolve(c ?? 1)),
      );
      if (exit !== 0) throw new CliError(EXIT.failure, `${open.join(" ")} exited ${exit}`);
      emit(
        { opened: true, host: alias, folder, commands: [open.map(shellWord).join(" ")] },
        `opened ${folder} in VS Code`,
      );
    });
}
