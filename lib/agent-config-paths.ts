// What a user's agent configuration may hold, and which login file each agent reads: pure rules, shared by
// the API's schemas (which state them in the OpenAPI document), the runtime's delivery and the CLI.

/** The agents whose configuration and logins the platform carries, as data: each one's login file and secret. */
export const AGENTS = {
  claude: { name: "Claude Code", login: ".claude/.credentials.json", secret: "CLAUDE_LOGIN" },
  codex: { name: "Codex", login: ".codex/auth.json", secret: "CODEX_LOGIN" },
  gemini: { name: "Gemini CLI", login: ".gemini/oauth_creds.json", secret: "GEMINI_LOGIN" },
} as const;
export type AgentName = keyof typeof AGENTS;
export const AGENT_NAMES = Object.keys(AGENTS) as AgentName[];

/** The agent whose login a project secret of this name delivers, if any. */
export const agentOfLoginSecret = (name: string): AgentName | undefined =>
  AGENT_NAMES.find((agent) => AGENTS[agent].secret === name);

/**
 * Files a config may hold, at most, and each one's characters: 1 Mi characters together, which the document
 * states whole (a total past the per-file rules would be a refusal of a request the document calls valid).
 */
export const MAX_CONFIG_FILES = 64;
/** 16,384 characters: at most 64 KiB in UTF-8 (a character is at most 4 bytes). */
export const MAX_CONFIG_FILE_CHARS = 16 * 1024;
export const MAX_CONFIG_FILE_BYTES = MAX_CONFIG_FILE_CHARS * 4;
/** The largest config's bytes in UTF-8 (what the store may hold for one user). */
export const MAX_CONFIG_BYTES = MAX_CONFIG_FILES * MAX_CONFIG_FILE_BYTES;
/** A login file's characters: at most 32 KiB in UTF-8, as a project secret's value. */
export const MAX_LOGIN_CHARS = 8192;

/**
 * Files of each agent's own directory that it reads as its settings, relative to the agent's home. A login
 * is none of them: `.claude/.credentials.json`, `.codex/auth.json`, `.gemini/oauth_creds.json` go through
 * the login store only.
 */
export const CONFIG_FILES = [
  ".claude/settings.json",
  ".claude/CLAUDE.md",
  // Claude Code's user-scoped MCP servers live here, among the CLI's own state: only `mcpServers` is taken.
  ".claude.json",
  ".codex/config.toml",
  ".codex/AGENTS.md",
  ".codex/AGENTS.override.md",
  ".gemini/settings.json",
  ".gemini/GEMINI.md",
] as const;

/** Directories whose files (at any depth up to {@link MAX_TREE_DEPTH}) a config may hold. */
export const CONFIG_TREES = [
  ".claude/agents",
  ".claude/commands",
  ".claude/skills",
  ".claude/output-styles",
  ".codex/prompts",
  ".gemini/commands",
] as const;
export const MAX_TREE_DEPTH = 8;

/** `.claude.json`: a JSON object with this key alone. */
export const CLAUDE_STATE_FILE = ".claude.json";
export const CLAUDE_STATE_KEYS = ["mcpServers"] as const;

/**
 * A name inside a tree: letters, digits, `_`, `@`, `+`, `-` and dots, not starting with a dot (no hidden
 * file, no `.` or `..`), at most 128 characters. Written in constructs every regex dialect reads alike.
 */
const NAME = "[A-Za-z0-9_@+-][A-Za-z0-9._@+-]{0,127}";
const literal = (path: string) => path.replace(/\./g, "\\.");

/** Every path a config may hold, as the OpenAPI document states it. */
export const CONFIG_PATH_PATTERN = `^(${[
  ...CONFIG_FILES.map(literal),
  ...CONFIG_TREES.map((tree) => `${literal(tree)}(/${NAME}){1,${MAX_TREE_DEPTH}}`),
].join("|")})$`;
const CONFIG_PATH = new RegExp(CONFIG_PATH_PATTERN);

/**
 * Why `path` may not be in a config, or undefined when it may: exactly the paths {@link CONFIG_PATH_PATTERN}
 * matches, each refusal in words naming the path.
 */
export function configPathProblem(path: string): string | undefined {
  if (CONFIG_PATH.test(path)) return undefined;
  const shown = JSON.stringify(path);
  if (/[\u0000-\u001f\u007f-\u009f]/.test(path)) return `${shown} has a control character`;
  if (path.startsWith("/") || path.startsWith("~"))
    return `${shown} is absolute: paths are relative to the agent's home (.claude/settings.json)`;
  if (path.includes("\\")) return `${shown} has a backslash: separate names with '/'`;
  const names = path.split("/");
  if (names.some((name) => name === ".."))
    return `${shown} has a '..' component: nothing outside the agents' config directories`;
  if (names.some((name) => name === "." || name === ""))
    return `${shown} has an empty or '.' component: write it normalized`;
  const agent = AGENT_NAMES.find((name) => AGENTS[name].login === path);
  if (agent)
    return `${shown} is ${AGENTS[agent].name}'s login, never part of a config: store it with PUT /auth/agent-logins/${agent}`;
  const tree = CONFIG_TREES.find((dir) => path.startsWith(`${dir}/`));
  if (tree)
    return `${shown}: a name under ${tree}/ is letters, digits, '_', '@', '+', '-' and '.', not starting with '.', at most 128 characters, at most ${MAX_TREE_DEPTH} levels deep`;
  return `${shown} is not one of the agents' config files (${CONFIG_FILES.join(", ")}, or a file under ${CONFIG_TREES.map((dir) => `${dir}/`).join(", ")})`;
}

/** Why this `.claude.json` may not be in a config (it must hold `mcpServers` alone), or undefined. */
export function claudeStateProblem(content: string): string | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(content);
  } catch {
    return `${CLAUDE_STATE_FILE} is not JSON`;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    return `${CLAUDE_STATE_FILE} is not a JSON object`;
  const others = Object.keys(parsed).filter((key) => !(CLAUDE_STATE_KEYS as readonly string[]).includes(key));
  return others.length === 0
    ? undefined
    : `${CLAUDE_STATE_FILE} may hold ${CLAUDE_STATE_KEYS.join(", ")} alone (Claude Code keeps its account and state there), not ${others.join(", ")}`;
}

export interface ConfigFile {
  readonly path: string;
  readonly content: string;
}

/** A refusal of a whole config, found past the document's rules (409), and why. */
export interface ConfigProblem {
  readonly status: 409;
  readonly message: string;
  readonly path?: string;
}

/**
 * What is wrong with a config as a whole, given that each path and content passed the document's rules:
 * a path twice, `.claude.json` holding more than MCP servers, or the bytes of all files over the limit.
 */
export function configProblem(files: readonly ConfigFile[]): ConfigProblem | undefined {
  const seen = new Set<string>();
  for (const file of files) {
    if (seen.has(file.path)) return { status: 409, path: file.path, message: `${file.path} is given twice` };
    seen.add(file.path);
  }
  const state = files.find((file) => file.path === CLAUDE_STATE_FILE);
  const stateProblem = state && claudeStateProblem(state.content);
  if (stateProblem) return { status: 409, path: CLAUDE_STATE_FILE, message: stateProblem };
  return undefined;
}

/** Why this content cannot be `agent`'s login (its file is a JSON object), or undefined. */
export function loginProblem(agent: AgentName, content: string): string | undefined {
  try {
    const parsed: unknown = JSON.parse(content);
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return undefined;
  } catch {
    // Said below.
  }
  return `a login for ${agent} is the content of ${AGENTS[agent].login}, a JSON object; this is not one`;
}
