// `sbx`: the developer's command line for agent sandboxes (docs/cli.md). It talks to the runtime
// only over its REST API, the terminal WebSocket and the project's SSH; the repository goes in and comes
// out by git over that SSH, started from this machine: nothing of this machine's credentials goes in.
import { Command, CommanderError } from "commander";
import { platformVersion } from "../lib/toolchain.js";
import { DEFAULT_API } from "./client.js";
import { CliError, EXIT } from "./errors.js";
import { emit, setJsonMode } from "./output.js";
import { printable } from "./printable.js";
import { registerAgentConfig } from "./commands/agent-config.js";
import { registerApiKey } from "./commands/api-key.js";
import { registerAttach } from "./commands/attach.js";
import { registerEnv } from "./commands/env.js";
import { registerExec } from "./commands/exec.js";
import { registerFork } from "./commands/fork.js";
import { registerLifecycle } from "./commands/lifecycle.js";
import { registerList } from "./commands/list.js";
import { registerMcp } from "./commands/mcp.js";
import { registerOpen } from "./commands/open.js";
import { registerOpenVscode } from "./commands/open-vscode.js";
import { registerPorts } from "./commands/ports.js";
import { registerSession } from "./commands/session.js";
import { registerSsh } from "./commands/ssh.js";
import { registerStart } from "./commands/start.js";
import { registerStatus } from "./commands/status.js";
import { registerSync } from "./commands/sync.js";
import { registerWorktree } from "./commands/worktree.js";

const program = new Command("sbx")
  .description(
    "Run coding agents in your own sandbox: bring a repository in, attach, and get the work back out.",
  )
  .version(platformVersion(), "-V, --version", "print sbx's version (the platform's, package.json)")
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
  $ sbx api-key create ci                # a key for programs: X-API-Key, E2B_API_KEY, SBX_API_KEY

Exit codes: 0 ok, 1 failure, 2 usage, 3 not logged in / login expired, 4 project or path not found,
5 bad input (not a repository, dirty tree, too large, bad name, bad devcontainer.json), 6 wrong state
(stopped, already exists), 7 SSH/git in the sandbox failed, 8 the terminal closed abnormally.
Configuration: $XDG_CONFIG_HOME/agent-sandbox (or ~/.config/agent-sandbox), files mode 0600.`,
  );

// The order of `sbx --help`.
registerSession(program);
registerList(program);
registerStatus(program);
registerStart(program);
registerAttach(program);
registerSsh(program);
registerSync(program);
registerEnv(program);
registerWorktree(program);
registerLifecycle(program);
registerFork(program);
registerOpen(program);
registerOpenVscode(program);
registerPorts(program);
registerExec(program);
registerApiKey(program);
registerAgentConfig(program);
registerMcp(program);

async function main(argv: string[]): Promise<void> {
  const jsonMode = argv.includes("--json");
  setJsonMode(jsonMode);
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
