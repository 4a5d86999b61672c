// `sbx exec -- cmd args`: runs a command in the project's sandbox through the API (POST /exec/stream) with the
// SDK (sdk/, docs/sdk.md), streams its output here and exits with its exit code. Same login as every sbx
// command: the tokens in the config file, refreshed (and the new ones saved) on a 401.
import * as path from "node:path";
import type { Command } from "commander";
import { Sandbox } from "../../sdk/src/index.js";
import { toCliError } from "../client.js";
import { context, globalsOf, requireLogin, resolveProject } from "../context.js";
import { CliError, EXIT } from "../errors.js";

export function registerExec(program: Command): void {
  program
    .command("exec")
    .description(
      "run a command in the sandbox (no shell unless --shell), stream its output, exit with its code",
    )
    .argument("<command...>", "the program and its arguments (put them after --)")
    .option("--path <dir>", "the repository whose linked project to use (default: the current directory)")
    .option("--cwd <dir>", "working directory in the sandbox")
    .option("--shell", "run the words joined with spaces by bash -c")
    .option("--timeout <seconds>", "kill the whole process tree after this many seconds")
    .addHelpText("after", "\nExamples:\n  $ sbx exec -- npm test\n  $ sbx exec --shell -- 'ls | wc -l'")
    .action(
      async (
        words: string[],
        options: { path?: string; cwd?: string; shell?: boolean; timeout?: string },
        command: Command,
      ) => {
        const globals = globalsOf(command);
        const { config, api } = await context(globals);
        await requireLogin(config);
        const { id } = await resolveProject(globals, config, path.resolve(options.path ?? "."));
        if (options.timeout !== undefined && !/^\d{1,9}$/.test(options.timeout))
          throw new CliError(
            EXIT.usage,
            `--timeout: ${JSON.stringify(options.timeout)} is not a number of seconds`,
          );
        try {
          const sandbox = await Sandbox.get(api, id);
          const result = await sandbox.run(
            options.shell ? words.join(" ") : words,
            { onStdout: (d) => process.stdout.write(d), onStderr: (d) => process.stderr.write(d) },
            {
              ...(options.cwd ? { cwd: options.cwd } : {}),
              ...(options.timeout ? { timeout_s: Number(options.timeout) } : {}),
            },
          );
          if (result.timed_out)
            process.stderr.write(`sbx exec: timed out after ${options.timeout ?? 300} s\n`);
          process.exitCode = result.exit_code;
        } catch (error) {
          // The stream's own failures (an `error` line) are the SDK's; the requests' are mapped already.
          throw toCliError(error);
        }
      },
    );
}
