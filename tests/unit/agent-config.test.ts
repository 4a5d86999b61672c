// The agent config's pure rules: which paths a config may hold (the document's pattern and the words of each
// refusal agree), the limits on the whole, `.claude.json`'s one key, and what a login must be.
import { describe, expect, it } from "vitest";
import {
  AGENTS,
  CONFIG_PATH_PATTERN,
  configPathProblem,
  configProblem,
  loginProblem,
  MAX_CONFIG_BYTES,
  MAX_CONFIG_FILE_CHARS,
  MAX_CONFIG_FILES,
} from "../../lib/agent-config-paths.js";
import { PutAgentConfigBody, AgentParams } from "../../runtime/api/agent-config/schemas.js";
import { openApiDocument } from "../../runtime/api/openapi.js";
import { parseInput } from "../../runtime/api/validation.js";

describe("a config's paths", () => {
  it.each([
    ".claude/settings.json",
    ".claude/CLAUDE.md",
    ".claude.json",
    ".claude/agents/reviewer.md",
    ".claude/commands/git/commit.md",
    ".claude/skills/pdf/SKILL.md",
    ".codex/config.toml",
    ".codex/AGENTS.md",
    ".codex/prompts/fix-1.2.md",
    ".gemini/settings.json",
    ".gemini/GEMINI.md",
    ".gemini/commands/test.toml",
    `.claude/commands/${"a/".repeat(7)}b.md`,
  ])("takes %s", (path) => {
    expect(configPathProblem(path)).toBeUndefined();
  });

  it.each([
    ["/home/agent/.claude/settings.json", "is absolute"],
    ["~/.claude/settings.json", "is absolute"],
    [".claude/../.bashrc", "'..' component"],
    [".claude/commands/../../.ssh/authorized_keys", "'..' component"],
    [".claude//settings.json", "empty or '.' component"],
    ["./.claude/settings.json", "empty or '.' component"],
    [".claude\\settings.json", "backslash"],
    [".claude/.credentials.json", "Claude Code's login"],
    [".codex/auth.json", "Codex's login"],
    [".gemini/oauth_creds.json", "Gemini CLI's login"],
    [".bashrc", "is not one of the agents' config files"],
    [".ssh/authorized_keys", "is not one of the agents' config files"],
    [".claude/commands", "is not one of the agents' config files"],
    [".claude/commands/.hidden.md", "a name under .claude/commands/"],
    [`.claude/commands/${"a/".repeat(8)}b.md`, "at most 8 levels deep"],
    [".claude/commands/a b.md", "a name under .claude/commands/"],
    [".claude/settings.json\n", "control character"],
  ])("refuses %j, naming it (%s)", (path, why) => {
    const problem = configPathProblem(path);
    expect(problem).toContain(JSON.stringify(path));
    expect(problem).toContain(why);
  });

  it("takes exactly what the document's pattern matches", () => {
    const pattern = new RegExp(CONFIG_PATH_PATTERN);
    const paths = [
      ".claude/settings.json",
      ".claude/settings.jsonx",
      ".claudeXjson",
      ".claude/agents/x",
      ".claude/agents/x/",
      ".claude/agents/-x",
      ".claude/agents/.x",
      ".codex/prompts/a/b",
      ".gemini/commands/é.toml",
      "x/.claude/settings.json",
    ];
    for (const path of paths) expect(configPathProblem(path) === undefined, path).toBe(pattern.test(path));
  });

  it("is the pattern the document states, and the refusal is a 400 naming the path", () => {
    const put = openApiDocument("0.1.0").paths["/auth/agent-config"]?.put as {
      requestBody: {
        content: {
          "application/json": {
            schema: { properties: { files: { items: { properties: { path: { pattern: string } } } } } };
          };
        };
      };
    };
    expect(
      put.requestBody.content["application/json"].schema.properties.files.items.properties.path.pattern,
    ).toBe(CONFIG_PATH_PATTERN);
    expect(() =>
      parseInput(PutAgentConfigBody, { files: [{ path: ".codex/auth.json", content: "{}" }] }, "body"),
    ).toThrow(/files\.0\.path: "\.codex\/auth\.json" is Codex's login/);
    expect(() => parseInput(AgentParams, { agent: "cursor" }, "params")).toThrow(/unknown agent "cursor"/);
  });
});

describe("a config as a whole", () => {
  const file = (path: string, content = "x") => ({ path, content });

  it("refuses a path given twice, naming it", () => {
    expect(configProblem([file(".claude/CLAUDE.md"), file(".claude/CLAUDE.md")])).toEqual({
      status: 409,
      path: ".claude/CLAUDE.md",
      message: ".claude/CLAUDE.md is given twice",
    });
  });

  it("takes the largest config the document allows, and states its size whole (no limit past the schema's)", () => {
    const big = "€".repeat(MAX_CONFIG_FILE_CHARS); // 3 bytes a character in UTF-8
    const files = Array.from({ length: MAX_CONFIG_FILES }, (_, i) => file(`.claude/commands/c${i}.md`, big));
    expect(configProblem(files)).toBeUndefined();
    const bytes = files.reduce((sum, f) => sum + Buffer.byteLength(f.content), 0);
    expect(bytes).toBe(MAX_CONFIG_FILES * MAX_CONFIG_FILE_CHARS * 3);
    expect(bytes).toBeLessThanOrEqual(MAX_CONFIG_BYTES);
    expect(() =>
      parseInput(PutAgentConfigBody, { files: [...files, file(".claude/CLAUDE.md")] }, "body"),
    ).toThrow(/files: /);
  });

  it("refuses a file of more characters than a file may hold (the schema's 400)", () => {
    expect(() =>
      parseInput(
        PutAgentConfigBody,
        { files: [file(".claude/CLAUDE.md", "a".repeat(MAX_CONFIG_FILE_CHARS + 1))] },
        "body",
      ),
    ).toThrow(/files\.0\.content: must be at most 16384 characters/);
  });

  it("takes .claude.json with mcpServers alone (409 otherwise)", () => {
    expect(configProblem([file(".claude.json", '{"mcpServers":{"x":{"command":"y"}}}')])).toBeUndefined();
    expect(configProblem([file(".claude.json", '{"mcpServers":{},"oauthAccount":{}}')])).toMatchObject({
      status: 409,
      path: ".claude.json",
      message: expect.stringContaining("not oauthAccount"),
    });
    expect(configProblem([file(".claude.json", "[]")])?.message).toContain("not a JSON object");
    expect(configProblem([file(".claude.json", "{")])?.message).toContain("not JSON");
  });
});

describe("a login", () => {
  it("is a JSON object: the content of the agent's login file", () => {
    expect(loginProblem("codex", '{"tokens":{"refresh_token":"r"}}')).toBeUndefined();
    for (const bad of ["[]", "null", '"x"', "not json"])
      expect(loginProblem("codex", bad)).toContain(AGENTS.codex.login);
  });
});
