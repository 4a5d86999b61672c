// `sbx agent-config`: one configuration of the agents (Claude Code, Codex, Gemini CLI) for all of your
// sandboxes, pushed from your home and written into every new sandbox's; and your agents' subscription logins,
// stored sealed, given to the projects you choose, and taken out of every running sandbox by `logout`. A
// login's content is read from its file and sent, never printed.
import { lstat, mkdir, readdir, readFile, stat, writeFile } from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { InvalidArgumentError, type Command } from "commander";
import {
  AGENT_NAMES,
  AGENTS,
  CLAUDE_STATE_FILE,
  CLAUDE_STATE_KEYS,
  CONFIG_FILES,
  CONFIG_TREES,
  configPathProblem,
  MAX_TREE_DEPTH,
  type AgentName,
} from "../../lib/agent-config-paths.js";
import { context, globalsOf, requireLogin, resolveProject } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit } from "../output.js";
import type { RequestBody } from "../../sdk/src/client.js";

/** The files of a config as `PUT /auth/agent-config` takes them. */
type ConfigFiles = RequestBody<"/auth/agent-config", "PUT">["files"];

async function signedIn(command: Command) {
  const globals = globalsOf(command);
  const { api, config } = await context(globals);
  await requireLogin(config);
  return { api, config, globals };
}

function agentName(value: string): AgentName {
  if (!(AGENT_NAMES as string[]).includes(value))
    throw new InvalidArgumentError(`one of ${AGENT_NAMES.join(", ")}`);
  return value as AgentName;
}

const expandHome = (dir: string) =>
  dir === "~" || dir.startsWith("~/") ? path.join(os.homedir(), dir.slice(1)) : dir;

/** Whether `file` is a regular file (following a link to one: it is yours, on your machine). */
const isFile = async (file: string) => (await stat(file).catch(() => undefined))?.isFile() ?? false;

/**
 * The allowlisted files under `home`: the fixed ones (a link to a file is read through), and the files of
 * each tree, whose links and hidden names are skipped and listed. `.claude.json` is cut to its MCP servers.
 */
export async function collectConfig(home: string): Promise<{ files: ConfigFiles; skipped: string[] }> {
  const files: ConfigFiles = [];
  const skipped: string[] = [];
  for (const rel of CONFIG_FILES) {
    const file = path.join(home, rel);
    if (!(await isFile(file))) continue;
    let content = await readFile(file, "utf8");
    if (rel === CLAUDE_STATE_FILE) {
      const state = JSON.parse(content) as Record<string, unknown>;
      const kept = Object.fromEntries(CLAUDE_STATE_KEYS.filter((k) => k in state).map((k) => [k, state[k]]));
      if (Object.keys(kept).length === 0) continue;
      content = `${JSON.stringify(kept, null, 2)}\n`;
    }
    files.push({ path: rel, content });
  }
  const walk = async (rel: string, depth: number): Promise<void> => {
    const entries = await readdir(path.join(home, rel), { withFileTypes: true }).catch(() => []);
    for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const child = `${rel}/${entry.name}`;
      if (entry.isDirectory() && depth < MAX_TREE_DEPTH) await walk(child, depth + 1);
      else if (entry.isFile() && configPathProblem(child) === undefined)
        files.push({ path: child, content: await readFile(path.join(home, child), "utf8") });
      else skipped.push(child);
    }
  };
  for (const tree of CONFIG_TREES)
    if ((await lstat(path.join(home, tree)).catch(() => undefined))?.isDirectory()) await walk(tree, 1);
  return { files, skipped };
}

export function registerAgentConfig(program: Command): void {
  const agents = program
    .command("agent-config")
    .description(
      "your agents' settings for all your sandboxes (Claude Code, Codex, Gemini CLI), and their logins",
    )
    .addHelpText(
      "after",
      `
Settings are the files ${CONFIG_FILES.join(", ")} and those under ${CONFIG_TREES.join(", ")}
(relative to your home). Logins (${AGENT_NAMES.map((a) => AGENTS[a].login).join(", ")}) never go with them.

Examples:
  $ sbx agent-config push                 # ~/.claude, ~/.codex, ~/.gemini settings → every new sandbox
  $ sbx agent-config pull --to /tmp/cfg   # what is stored, written under /tmp/cfg
  $ sbx agent-config login codex          # store ~/.codex/auth.json (sealed; never printed)
  $ sbx agent-config enable codex         # this project's sandbox gets it (~/.codex/auth.json, 0600)
  $ sbx agent-config logout               # every login deleted and removed from all your running sandboxes
  $ sbx agent-config status`,
    );

  agents
    .command("push")
    .description("store the agents' settings from your home; new sandboxes get them")
    .option("--from <dir>", "the home to read them from", "~")
    .action(async (options: { from: string }, command: Command) => {
      const { api } = await signedIn(command);
      const { files, skipped } = await collectConfig(expandHome(options.from));
      if (files.length === 0)
        throw new CliError(
          EXIT.badInput,
          `no agent settings under ${options.from} (${CONFIG_FILES.join(", ")})`,
        );
      const { data } = await api.call("PUT", "/auth/agent-config", { body: { files } });
      emit({ ...data, skipped }, () =>
        [
          ...data.files.map((f) => `${f.path}  ${f.bytes} bytes`),
          `pushed ${data.files.length} files (${data.bytes} bytes): new sandboxes get them`,
          ...(skipped.length
            ? [`skipped (a link, a hidden or unusual name, or too deep): ${skipped.join(", ")}`]
            : []),
        ].join("\n"),
      );
    });

  agents
    .command("pull")
    .description("write the stored settings under a directory (your home's files are not touched otherwise)")
    .option("--to <dir>", "where to write them", ".")
    .action(async (options: { to: string }, command: Command) => {
      const { api } = await signedIn(command);
      const { data } = await api.call("GET", "/auth/agent-config");
      const root = path.resolve(expandHome(options.to));
      for (const file of data.files) {
        // The runtime takes only allowlisted paths; checked again before anything is written here.
        const problem = configPathProblem(file.path);
        if (problem) throw new CliError(EXIT.refused, `refused ${problem}`);
        const target = path.join(root, file.path);
        await mkdir(path.dirname(target), { recursive: true, mode: 0o700 });
        await writeFile(target, file.content, { mode: 0o644 });
      }
      emit(data, () =>
        data.files.length === 0
          ? "no agent settings stored (sbx agent-config push stores them)"
          : `wrote ${data.files.length} files under ${root}`,
      );
    });

  agents
    .command("login <agent>")
    .description("store your login of an agent (its login file from your home; sealed, never printed)")
    .option("--from <dir>", "the home to read it from", "~")
    .action(async (agent: string, options: { from: string }, command: Command) => {
      const name = agentName(agent);
      const { api } = await signedIn(command);
      const file = path.join(expandHome(options.from), AGENTS[name].login);
      const content = await readFile(file, "utf8").catch(() => {
        throw new CliError(
          EXIT.badInput,
          `no ${file}: log in with ${AGENTS[name].name} on this machine first`,
        );
      });
      const { data } = await api.call("PUT", "/auth/agent-logins/{agent}", {
        params: { agent: name },
        body: { content },
      });
      emit(
        data,
        `stored ${AGENTS[name].name}'s login` +
          (data.projects.length ? `; ${data.projects.length} opted-in projects get the new one` : "") +
          `; \`sbx agent-config enable ${name}\` gives it to a project`,
      );
    });

  agents
    .command("enable <agent>")
    .description("give this project's sandbox your stored login of an agent")
    .action(async (agent: string, _options: unknown, command: Command) => {
      const name = agentName(agent);
      const { api, config, globals } = await signedIn(command);
      const { id } = await resolveProject(globals, config);
      const { data } = await api.call("PUT", "/projects/{id}/agent-logins/{agent}", {
        params: { id, agent: name },
      });
      emit(
        data,
        `${AGENTS[name].name}'s login ${data.delivered ? "is in the sandbox" : "goes into the sandbox at its next start"} (~/${AGENTS[name].login}, 0600)`,
      );
    });

  agents
    .command("disable <agent>")
    .description("take an agent's login out of this project's sandbox")
    .action(async (agent: string, _options: unknown, command: Command) => {
      const name = agentName(agent);
      const { api, config, globals } = await signedIn(command);
      const { id } = await resolveProject(globals, config);
      const { data } = await api.call("DELETE", "/projects/{id}/agent-logins/{agent}", {
        params: { id, agent: name },
      });
      emit(data, `${AGENTS[name].name}'s login: ${data.removal.replaceAll("_", " ")}`);
    });

  agents
    .command("logout")
    .description(
      "delete your stored logins and remove them from every one of your running sandboxes now (the others at their next start)",
    )
    .option("--agent <agent>", "one agent only", agentName)
    .action(async (options: { agent?: AgentName }, command: Command) => {
      const { api } = await signedIn(command);
      const logoutOf = async (agent: AgentName) =>
        (await api.call("DELETE", "/auth/agent-logins/{agent}", { params: { agent } })).data;
      const results: Awaited<ReturnType<typeof logoutOf>>[] = [];
      for (const agent of options.agent ? [options.agent] : AGENT_NAMES) results.push(await logoutOf(agent));
      emit({ logouts: results }, () =>
        results
          .map((r) =>
            [
              `${AGENTS[r.agent].name}: ${r.login_deleted ? "stored login deleted" : "no stored login"}`,
              ...r.projects.map((p) => `  ${p.name} (${p.project_id}): ${p.removal.replaceAll("_", " ")}`),
            ].join("\n"),
          )
          .join("\n"),
      );
    });

  agents
    .command("status")
    .description(
      "what is stored: the settings' files and the logins (never their content), with their projects",
    )
    .action(async (_options: unknown, command: Command) => {
      const { api } = await signedIn(command);
      const [{ data: config }, { data: logins }] = await Promise.all([
        api.call("GET", "/auth/agent-config"),
        api.call("GET", "/auth/agent-logins"),
      ]);
      const files = config.files.map((f) => ({ path: f.path, bytes: Buffer.byteLength(f.content, "utf8") }));
      emit({ files, bytes: config.bytes, updated_at: config.updated_at, logins: logins.logins }, () =>
        [
          files.length === 0
            ? "settings: none stored"
            : `settings: ${files.length} files, ${config.bytes} bytes, pushed ${config.updated_at}\n` +
              files.map((f) => `  ${f.path}  ${f.bytes} bytes`).join("\n"),
          logins.logins.length === 0
            ? "logins: none stored"
            : "logins:\n" +
              logins.logins
                .map(
                  (l) =>
                    `  ${AGENTS[l.agent].name} (${l.path}), stored ${l.updated_at}; projects: ${l.projects.join(", ") || "none"}`,
                )
                .join("\n"),
        ].join("\n"),
      );
    });
}
