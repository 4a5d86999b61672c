// `sbx login` and `sbx logout`: the tokens kept in the config file (0600), refreshed as they expire.
import type { Command } from "commander";
import { context, globalsOf } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit } from "../output.js";

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

export function registerSession(program: Command): void {
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
      const { api, store, config } = await context(globalsOf(command));
      const email = options.email ?? config.email;
      if (!email) throw new CliError(EXIT.usage, "--email is required the first time");
      await api.login(email, await readPassword(options.passwordStdin === true));
      await store.update((saved) => {
        saved.api = api.api;
        saved.email = email;
      });
      emit({ email, api: api.api }, `logged in to ${api.api} as ${email}`);
    });

  program
    .command("logout")
    .description("end the session and forget the tokens")
    .action(async (_options: unknown, command: Command) => {
      const { api, store, config } = await context(globalsOf(command));
      if (config.refresh_token)
        await api
          .call("POST", "/auth/logout", { body: { refresh_token: config.refresh_token } })
          .catch(() => undefined);
      await store.update((c) => {
        delete c.access_token;
        delete c.refresh_token;
      });
      emit({ logged_out: true }, "logged out");
    });
}
