// `sbx api-key`: the user's API keys, long-lived credentials for programs (E2B's SDKs, MCP clients, CI).
// Making one takes the logged-in session; the key is printed once.
import { InvalidArgumentError, type Command } from "commander";
import { context, globalsOf, requireLogin } from "../context.js";
import { emit } from "../output.js";

/** The logged-in client of the command's globals. */
async function signedIn(command: Command) {
  const { api, config } = await context(globalsOf(command));
  await requireLogin(config);
  return api;
}

/** `--expires-in-days`: a whole number of days (the API bounds it: 1 to 3650). */
function wholeDays(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError("must be a whole number of days");
  return Number(value);
}

const day = (iso: string | null) => (iso === null ? "never" : iso.slice(0, 10));

export function registerApiKey(program: Command): void {
  const keys = program
    .command("api-key")
    .description("your API keys: long-lived, revocable credentials for programs (E2B's SDKs, MCP, CI)");

  keys
    .command("create <name>")
    .description("make a key (printed this once: keep it in a secret store)")
    .option(
      "--expires-in-days <days>",
      "the key stops working after this many days (default: never)",
      wholeDays,
    )
    .action(async (name: string, options: { expiresInDays?: number }, command: Command) => {
      const api = await signedIn(command);
      const days = options.expiresInDays;
      const { data } = await api.call("POST", "/auth/api-keys", {
        body: { name, ...(days === undefined ? {} : { expires_in_days: days }) },
      });
      emit(
        data,
        () =>
          `${data.key}\n` +
          `(key ${data.id}, "${data.name}", expires ${day(data.expires_at)}: shown this once; ` +
          `use it as X-API-Key, E2B_API_KEY or SBX_API_KEY)`,
      );
    });

  keys
    .command("list")
    .description("your keys that still work (their first characters, never the keys)")
    .action(async (_options: unknown, command: Command) => {
      const api = await signedIn(command);
      const { data } = await api.call("GET", "/auth/api-keys");
      emit(data, () =>
        data.api_keys.length === 0
          ? "no API keys (sbx api-key create NAME makes one)"
          : data.api_keys
              .map(
                (k) =>
                  `${k.id}  ${k.prefix}…  ${k.name}  created ${day(k.created_at)}, ` +
                  `expires ${day(k.expires_at)}, last used ${day(k.last_used_at)}`,
              )
              .join("\n"),
      );
    });

  keys
    .command("revoke <id>")
    .description("revoke a key: its next request is refused")
    .action(async (id: string, _options: unknown, command: Command) => {
      const api = await signedIn(command);
      await api.call("DELETE", "/auth/api-keys/{keyId}", { params: { keyId: id } });
      emit({ revoked: id }, `revoked ${id}`);
    });
}
