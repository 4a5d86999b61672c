// One agent configuration and login for all of a user's sandboxes (docs/api.md, "Agent configuration and
// logins"). Alice pushes her agents' settings and her new projects have them in the agent's home, Bob's has
// none; Alice's Codex login reaches only the project she opted in (0600, the agent's), and her logout takes it
// out of every running sandbox of hers at once, leaving Bob's alone; bad input is refused naming it. Real
// reconciler, engine, provider and sandboxes; the files are read through the API and with `docker exec`.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
/** Alice's project that opts into her login, Alice's that does not, Bob's. */
const ids = { opted: "", plain: "", bobs: "" };
const container = (id: string) => tenantNames(id).container;

const CONFIG = [
  { path: ".claude/CLAUDE.md", content: "# Alice's rules\nAlways write tests.\n" },
  { path: ".claude/commands/review.md", content: "Review the diff for bugs.\n" },
  { path: ".claude.json", content: '{"mcpServers":{"docs":{"command":"docs-mcp"}}}' },
  { path: ".codex/config.toml", content: 'model = "o4-mini"\napproval_policy = "never"\n' },
  { path: ".gemini/GEMINI.md", content: "Be brief.\n" },
];
/** A Codex login as `codex login` writes it, with a token no other file holds. */
const TOKEN = "alice-refresh-token-0f3c9a7e";
const LOGIN = JSON.stringify({ auth_mode: "chatgpt", tokens: { refresh_token: TOKEN, access_token: "a" } });

/** A file of the agent's home through the files API, or the status when there is none. */
async function homeFile(who: "alice" | "bob", id: string, path: string): Promise<string | number> {
  const answer = await h.as(who, "GET", `/projects/${id}/files/content?path=/home/agent/${path}`);
  return answer.statusCode === 200 ? answer.body : answer.statusCode;
}
const shell = async (id: string, script: string) => (await execIn(container(id), script)).stdout;

beforeAll(async () => {
  platform = await testPlatform({
    subnetPool: "10.249.40.0/22",
    sshPortRange: [29700, 29705],
    leaseSeconds: 10,
  });
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
  });
}, 1_200_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
}, 900_000);

describe("bad input is refused, naming it, and nothing is stored", () => {
  it.each([
    [".codex/auth.json", 400, "Codex's login"],
    [".claude/../.bashrc", 400, "'..' component"],
    ["/home/agent/.claude/settings.json", 400, "is absolute"],
    [".ssh/authorized_keys", 400, "is not one of the agents' config files"],
  ])("a config holding %s: %i", async (path, status, why) => {
    const answer = await h.as("alice", "PUT", "/auth/agent-config", { files: [{ path, content: "x" }] });
    expect(answer.statusCode, answer.body).toBe(status);
    expect(answer.json().message).toContain(JSON.stringify(path));
    expect(answer.json().message).toContain(why);
  });

  it("a config over the limits: a file (400) and too many files (400), naming the field", async () => {
    const file = await h.as("alice", "PUT", "/auth/agent-config", {
      files: [{ path: ".claude/CLAUDE.md", content: "a".repeat(16_385) }],
    });
    expect(file.statusCode, file.body).toBe(400);
    expect(file.json().message).toContain("files.0.content: must be at most 16384 characters");
    // The largest config the document allows, every character escaped in its JSON, is not too large a body.
    const largest = await h.as("alice", "PUT", "/auth/agent-config", {
      files: Array.from({ length: 64 }, (_, i) => ({
        path: `.claude/commands/c${i}.md`,
        content: "\u0001".repeat(16_384),
      })),
    });
    expect(largest.statusCode, largest.body.slice(0, 300)).toBe(200);
    expect((await h.as("alice", "DELETE", "/auth/agent-config")).statusCode).toBeLessThan(300);
    const many = await h.as("alice", "PUT", "/auth/agent-config", {
      files: Array.from({ length: 65 }, (_, i) => ({ path: `.claude/commands/c${i}.md`, content: "" })),
    });
    expect(many.statusCode).toBe(400);
    expect((await h.as("alice", "GET", "/auth/agent-config")).json()).toEqual({
      files: [],
      bytes: 0,
      updated_at: null,
    });
  });

  it("a login of an unknown agent (400), one that is no login (409)", async () => {
    const unknown = await h.as("alice", "PUT", "/auth/agent-logins/cursor", { content: "{}" });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().message).toContain('unknown agent "cursor"');
    const notJson = await h.as("alice", "PUT", "/auth/agent-logins/codex", { content: "sk-not-a-login" });
    expect(notJson.statusCode).toBe(409);
    expect(notJson.json().message).toContain(".codex/auth.json");
    expect((await h.as("alice", "GET", "/auth/agent-logins")).json()).toEqual({ logins: [] });
  });
});

describe("one config and login for all of a user's sandboxes", () => {
  it("alice pushes a config: her new projects have it in the home, bob's has none", async () => {
    const pushed = await h.as("alice", "PUT", "/auth/agent-config", { files: CONFIG });
    expect(pushed.statusCode, pushed.body).toBe(200);
    expect(pushed.json().files).toHaveLength(CONFIG.length);
    const create = async (who: "alice" | "bob", name: string) => {
      const created = await h.as(who, "POST", "/projects", { name });
      expect(created.statusCode, created.body).toBeLessThan(300);
      return created.json().project_id as string;
    };
    [ids.opted, ids.plain, ids.bobs] = await Promise.all([
      create("alice", "opted"),
      create("alice", "plain"),
      create("bob", "bobs"),
    ]);
    await Promise.all([
      h.waitForStatus("alice", ids.opted, "running", 600_000),
      h.waitForStatus("alice", ids.plain, "running", 600_000),
      h.waitForStatus("bob", ids.bobs, "running", 600_000),
    ]);
    for (const id of [ids.opted, ids.plain]) {
      await waitFor("alice's config in the home", 60_000, async () =>
        (await homeFile("alice", id, ".gemini/GEMINI.md")) === "Be brief.\n" ? true : undefined,
      );
      for (const file of CONFIG) expect(await homeFile("alice", id, file.path), file.path).toBe(file.content);
      // The image's own defaults the config does not name stay.
      expect(await homeFile("alice", id, ".gemini/settings.json")).toContain("gemini-api-key");
    }
    // Bob's home: the image's defaults, nothing of Alice's.
    expect(await homeFile("bob", ids.bobs, ".claude/CLAUDE.md")).toBe(404);
    expect(await homeFile("bob", ids.bobs, ".claude.json")).toBe(404);
    expect(await homeFile("bob", ids.bobs, ".codex/config.toml")).toContain(
      'sandbox_mode = "danger-full-access"',
    );
    expect(await shell(ids.bobs, "grep -rl 'Always write tests' ~ 2>/dev/null | wc -l")).toBe("0");
  }, 900_000);

  it("alice's Codex login reaches the project she opts in, 0600 and the agent's, and no other", async () => {
    const stored = await h.as("alice", "PUT", "/auth/agent-logins/codex", { content: LOGIN });
    expect(stored.statusCode, stored.body).toBe(200);
    // Bob has no login to give: his project cannot opt in; Alice's project is not his.
    expect((await h.as("bob", "PUT", `/projects/${ids.bobs}/agent-logins/codex`)).statusCode).toBe(409);
    expect((await h.as("bob", "PUT", `/projects/${ids.opted}/agent-logins/codex`)).statusCode).toBe(404);

    const optIn = await h.as("alice", "PUT", `/projects/${ids.opted}/agent-logins/codex`);
    expect(optIn.statusCode, optIn.body).toBe(202);
    expect(optIn.json()).toMatchObject({ agent: "codex", secret: "CODEX_LOGIN", delivered: true });
    // Written when the answer came: no wait.
    expect(await shell(ids.opted, "stat -c '%a %U' ~/.codex/auth.json; cat ~/.codex/auth.json")).toBe(
      `600 agent\n${LOGIN}`,
    );
    // The stack's update puts it in /run/secrets as every file secret (read-only).
    await waitFor("the secret's file", 300_000, async () =>
      (await shell(ids.opted, "cat /run/secrets/CODEX_LOGIN 2>/dev/null")) === LOGIN ? true : undefined,
    );
    for (const id of [ids.plain, ids.bobs])
      expect(await shell(id, "ls -a ~/.codex")).not.toContain("auth.json");
    expect(await shell(ids.plain, `grep -rl ${TOKEN} ~ /run/secrets 2>/dev/null | wc -l`)).toBe("0");
    expect(await shell(ids.bobs, `grep -rl ${TOKEN} ~ /run/secrets 2>/dev/null | wc -l`)).toBe("0");
    // The opt-in is a project secret of kind file, listed as secrets are (never its value).
    const secrets = await h.as("alice", "GET", `/projects/${ids.opted}/secrets`);
    expect(secrets.json().secrets).toEqual([
      expect.objectContaining({ name: "CODEX_LOGIN", delivery: "file" }),
    ]);
    const listed = await h.as("alice", "GET", "/auth/agent-logins");
    expect(listed.json().logins).toEqual([
      expect.objectContaining({ agent: "codex", path: ".codex/auth.json", projects: [ids.opted] }),
    ]);
    for (const answer of [stored, optIn, secrets, listed]) expect(answer.body).not.toContain(TOKEN);
    expect((await h.as("bob", "GET", "/auth/agent-logins")).json()).toEqual({ logins: [] });
  }, 300_000);

  it("logout removes it from every running sandbox of alice's at once, and bob's file stays", async () => {
    // A copy in Alice's other project (as a fork's home would hold), and Bob's own login in his.
    await shell(ids.plain, `umask 077; mkdir -p ~/.codex; printf '%s' '${LOGIN}' > ~/.codex/auth.json`);
    await shell(ids.bobs, `umask 077; printf '%s' '{"bob":1}' > ~/.codex/auth.json`);
    const logout = await h.as("alice", "DELETE", "/auth/agent-logins/codex");
    expect(logout.statusCode, logout.body).toBe(200);
    expect(logout.json()).toMatchObject({ agent: "codex", login_deleted: true });
    const byProject = Object.fromEntries(
      (logout.json().projects as { project_id: string }[]).map((p) => [p.project_id, p]),
    );
    expect(Object.keys(byProject).sort()).toEqual([ids.opted, ids.plain].sort());
    expect(byProject[ids.opted]).toMatchObject({ secret_deleted: true, removal: "removed" });
    expect(byProject[ids.plain]).toMatchObject({
      secret_deleted: false,
      removal: "removed",
      operation: null,
    });
    // Gone when the answer came.
    for (const id of [ids.opted, ids.plain])
      expect(await shell(id, "ls -a ~/.codex")).not.toContain("auth.json");
    expect(await shell(ids.bobs, "cat ~/.codex/auth.json")).toBe('{"bob":1}');
    expect((await h.as("alice", "GET", `/projects/${ids.opted}/secrets`)).json().secrets).toEqual([]);
    expect((await h.as("alice", "GET", "/auth/agent-logins")).json()).toEqual({ logins: [] });
    // The stack's update takes /run/secrets/CODEX_LOGIN away too.
    await waitFor("the secret's file gone", 300_000, async () =>
      (await shell(ids.opted, "ls /run/secrets")).includes("CODEX_LOGIN") ? undefined : true,
    );
    // A login stored again does not come back by itself: the project opts in again.
    await h.as("alice", "PUT", "/auth/agent-logins/codex", { content: LOGIN });
    await new Promise((resolve) => setTimeout(resolve, 5000));
    expect(await shell(ids.opted, "ls -a ~/.codex")).not.toContain("auth.json");
  }, 600_000);
});
