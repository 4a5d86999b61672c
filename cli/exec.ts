// `sbx exec -- cmd args`: runs a command in the project's sandbox through the API (POST /exec/stream) with the
// SDK (sdk/, docs/sdk.md), streams its output here and exits with its exit code. Same login as every sbx
// command: the tokens in the config file, refreshed (and the new ones saved) on a 401.
import * as path from "node:path";
import { Command } from "commander";
import { ApiError, AuthError, Client, Sandbox, type TokenStore } from "../sdk/src/index.js";
import type { CliConfig, ConfigStore } from "./config.js";
import { CliError, EXIT } from "./errors.js";

export interface ExecDeps<G> {
  readonly globalsOf: (command: Command) => G;
  readonly context: (globals: G) => Promise<{ store: ConfigStore; config: CliConfig; api: { base: string } }>;
  readonly requireLogin: (config: CliConfig) => Promise<void>;
  readonly resolveProject: (globals: G, config: CliConfig, dir?: string) => Promise<{ id: string }>;
}

/** The CLI's config file as the SDK's token store. */
export function configTokens(store: ConfigStore): TokenStore {
  return {
    load: async () => {
      const { access_token, refresh_token } = await store.load();
      return { access_token, refresh_token };
    },
    save: async (tokens) => {
      await store.update((config) => {
        config.access_token = tokens.access_token;
        if (tokens.refresh_token) config.refresh_token = tokens.refresh_token;
      });
    },
  };
}

function cliError(error: unknown): unknown {
  if (error instanceof AuthError)
    return new CliError(EXIT.auth, "your login has expired or was revoked: run `sbx login` again");
  if (error instanceof ApiError) {
    const code =
      error.status === 404
        ? EXIT.notFound
        : error.status === 409
          ? EXIT.conflict
          : error.status === 400
            ? EXIT.badInput
            : EXIT.failure;
    return new CliError(code, error.message, error.details);
  }
  return error;
}

export function registerExec<G>(program: Command, deps: ExecDeps<G>): void {
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
        const globals = deps.globalsOf(command);
        const { store, config, api } = await deps.context(globals);
        await deps.requireLogin(config);
        const { id } = await deps.resolveProject(globals, config, path.resolve(options.path ?? "."));
        if (options.timeout !== undefined && !/^\d{1,9}$/.test(options.timeout))
          throw new CliError(
            EXIT.usage,
            `--timeout: ${JSON.stringify(options.timeout)} is not a number of seconds`,
          );
        const client = new Client({ api: api.base, tokens: configTokens(store) });
        try {
          const sandbox = await Sandbox.get(client, id);
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
          throw cliError(error);
        }
      },
    );
}
