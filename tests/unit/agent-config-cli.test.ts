// `sbx agent-config push`'s collection from a developer's home: the allowlisted files only, links in a tree
// and hidden names skipped and listed, `.claude.json` cut to its MCP servers, and never a login file.
import { mkdtemp, mkdir, rm, symlink, writeFile } from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectConfig } from "../../cli/commands/agent-config.js";

let home: string;
const put = async (rel: string, content: string) => {
  await mkdir(path.dirname(path.join(home, rel)), { recursive: true });
  await writeFile(path.join(home, rel), content);
};

beforeAll(async () => {
  home = await mkdtemp(path.join(os.tmpdir(), "agent-config-home-"));
  await put(".claude/settings.json", '{"model":"opus"}');
  await put(".claude/commands/git/commit.md", "commit");
  await put(".claude/commands/.hidden.md", "hidden");
  await symlink(path.join(home, ".claude/settings.json"), path.join(home, ".claude/commands/link.md"));
  await put(
    ".claude.json",
    '{"mcpServers":{"docs":{"command":"d"}},"oauthAccount":{"email":"a@b"},"primaryApiKey":"sk-x"}',
  );
  await put(".claude/.credentials.json", '{"claudeAiOauth":{"refreshToken":"r"}}');
  await put(".codex/auth.json", '{"tokens":{"refresh_token":"r"}}');
  await put(".codex/config.toml", 'model = "o4-mini"\n');
  await put(".gemini/oauth_creds.json", '{"refresh_token":"r"}');
  await put(".bashrc", "alias x=y");
});
afterAll(() => rm(home, { recursive: true, force: true }));

describe("collectConfig", () => {
  it("takes the allowlisted files, skips links and hidden names in trees, and never a login", async () => {
    const { files, skipped } = await collectConfig(home);
    expect(files.map((f) => f.path).sort()).toEqual([
      ".claude.json",
      ".claude/commands/git/commit.md",
      ".claude/settings.json",
      ".codex/config.toml",
    ]);
    expect(skipped.sort()).toEqual([".claude/commands/.hidden.md", ".claude/commands/link.md"]);
    expect(JSON.parse(files.find((f) => f.path === ".claude.json")!.content)).toEqual({
      mcpServers: { docs: { command: "d" } },
    });
    expect(JSON.stringify(files)).not.toMatch(/refresh|sk-x|a@b/);
  });
});
