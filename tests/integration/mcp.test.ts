// The MCP server (docs/mcp.md) with the MCP SDK's own client, against a real runtime (API and reconciler)
// and one real sandbox for the whole file: over stdio through the real `sbx mcp` (bin/sbx, as an MCP
// client's configuration starts it, its API key in SBX_API_KEY) the tools are listed, a sandbox is created,
// a command runs in it, a written file is read back and listed, and the sandbox is destroyed; over streamable
// HTTP on the API's port (/mcp) the same tools answer for a key, a session belongs to the key that opened
// it, and a revoked key is refused on its next request. Bad tool input is an `isError` result naming the
// problem, never a protocol error.
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxRuntime, type ApiHarness } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { tenantLeftovers, type TestPlatform } from "../helpers/host.js";
import { MCP_ACCEPT, mcpInitialize } from "../helpers/mcp.js";
import { SBX } from "../helpers/sbx.js";
import { tenantNames } from "../../components/tenant/names.js";

let platform: TestPlatform;
let h: ApiHarness<"alice">;
let base: string;
let configHome: string;
let stdio: McpClient;
/** The sandbox create_sandbox made over stdio, used by every test after it. */
let sandboxId: string;

/** A tool call's result (creating a sandbox takes longer than the client's default minute). */
async function call(client: McpClient, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  return (await client.callTool({ name, arguments: args }, undefined, {
    timeout: 900_000,
  })) as CallToolResult;
}
const textOf = (result: CallToolResult) =>
  result.content.map((part) => (part.type === "text" ? part.text : `[${part.type}]`)).join("\n");

async function makeKey(name: string): Promise<{ id: string; key: string }> {
  const made = await h.as("alice", "POST", "/auth/api-keys", { name });
  expect(made.statusCode, made.body).toBe(201);
  return made.json();
}

/** An MCP client on /mcp with `headers` (its key). */
async function httpClient(headers: Record<string, string>): Promise<McpClient> {
  const client = new McpClient({ name: "mcp-test", version: "1" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers } }),
  );
  return client;
}

/** An MCP client on `sbx mcp` (bin/sbx, as a client's configuration starts it) with `key` in SBX_API_KEY. */
async function stdioClient(key: string): Promise<McpClient> {
  const client = new McpClient({ name: "mcp-test", version: "1" });
  await client.connect(
    new StdioClientTransport({
      command: SBX,
      args: ["mcp", "--api", base],
      env: { ...(process.env as Record<string, string>), XDG_CONFIG_HOME: configHome, SBX_API_KEY: key },
      stderr: "inherit",
    }),
  );
  return client;
}

/** A raw POST /mcp (an initialize, unless `body` says otherwise). */
const post = (headers: Record<string, string>, body?: object) =>
  fetch(`${base}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", ...MCP_ACCEPT, ...headers },
    body: JSON.stringify(body ?? mcpInitialize("raw")),
  });

beforeAll(async () => {
  ({ platform, h, base } = await sandboxRuntime({
    subnetPool: "10.218.0.0/24",
    sshPortRange: [29240, 29245],
  }));
  configHome = await fs.mkdtemp(path.join(os.tmpdir(), "mcp-test-"));
  stdio = await stdioClient((await makeKey("stdio")).key);
}, 600_000);

afterAll(async () => {
  await stdio?.close();
  await h?.close();
  await platform?.stop();
  if (configHome) await fs.rm(configHome, { recursive: true, force: true });
}, 900_000);

describe("sbx mcp (stdio)", () => {
  it("lists the seven tools, each description saying what it costs or may not do", async () => {
    const { tools } = await stdio.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([
      "create_sandbox",
      "destroy_sandbox",
      "list_directory",
      "list_sandboxes",
      "read_file",
      "run_command",
      "write_file",
    ]);
    const described = (name: string) => tools.find((t) => t.name === name)!.description!;
    expect(described("create_sandbox")).toMatch(/Expensive.*seconds to a minute/);
    expect(described("destroy_sandbox")).toMatch(/Final/);
    expect(described("run_command")).toMatch(/allowlist.*no root|no root.*allowlist/s);
    expect(described("run_command")).toMatch(/at most 600/);
    expect(described("read_file")).toMatch(/up to 1 MiB/);
  });

  it("creates a sandbox and waits until it runs", async () => {
    const created = await call(stdio, "create_sandbox", { name: "mcp-file" });
    expect(created.isError, textOf(created)).toBeFalsy();
    expect(created.structuredContent).toMatchObject({ name: "mcp-file", status: "running" });
    sandboxId = (created.structuredContent as { id: string }).id;
    expect(await h.statusOf("alice", sandboxId)).toBe("running");
    const listed = await call(stdio, "list_sandboxes", {});
    expect(textOf(listed)).toContain(sandboxId);
  }, 900_000);

  it("runs a command: exit code, stdout and stderr, as the agent user, in the sandbox itself", async () => {
    const ran = await call(stdio, "run_command", {
      sandbox_id: sandboxId,
      command: "echo out-$((6*7)); echo err-$((2*3)) >&2; id -un; cat /etc/hostname; exit 3",
    });
    expect(ran.isError, textOf(ran)).toBeFalsy();
    const text = textOf(ran);
    expect(text).toMatch(/^exit code 3 after/);
    expect(text).toContain("out-42\nagent\n");
    expect(text).toContain("--- stderr ---\nerr-6");
    const hostname = (await execIn(tenantNames(sandboxId).container, "cat /etc/hostname")).stdout.trim();
    expect(text).toContain(hostname);
    // An argv, with cwd and env: no shell between.
    const argv = await call(stdio, "run_command", {
      sandbox_id: sandboxId,
      command: ["printenv", "GREETING"],
      cwd: "/tmp",
      env: { GREETING: "$HOME stays literal" },
    });
    expect(textOf(argv)).toContain("$HOME stays literal");
  });

  it("bounds the output it shows and says what it left out; a command past its timeout is killed", async () => {
    // 588,895 bytes: shown as its head and its tail.
    const big = await call(stdio, "run_command", { sandbox_id: sandboxId, command: "seq 1 100000" });
    const text = textOf(big);
    expect(text).toContain(
      "--- stdout (568895 characters left out in the middle (20000 shown at most)) ---\n",
    );
    expect(text).toContain("\n1\n2\n3\n");
    expect(text).toContain("99999\n100000");
    expect(text.length).toBeLessThan(21_000);
    // 1,288,895 bytes: past the runtime's own cap too, which is said as well.
    const bigger = await call(stdio, "run_command", { sandbox_id: sandboxId, command: "seq 1 200000" });
    expect(textOf(bigger)).toContain(
      "(1288895 bytes written, the runtime kept the first 1048576; 1028576 characters",
    );
    const slow = await call(stdio, "run_command", {
      sandbox_id: sandboxId,
      command: "sleep 30",
      timeout_s: 1,
    });
    expect(textOf(slow)).toMatch(/^killed after the 1 s timeout/);
    expect(slow.structuredContent).toMatchObject({ timed_out: true });
  });

  it("writes a file, reads it back and lists it", async () => {
    const content = "line one\nünïcödé ✓\n";
    const wrote = await call(stdio, "write_file", {
      sandbox_id: sandboxId,
      path: "notes/hello.txt",
      content,
      mode: "600",
    });
    expect(wrote.isError, textOf(wrote)).toBeFalsy();
    expect(textOf(wrote)).toMatch(/^wrote 25 bytes to \/.*\/notes\/hello\.txt \(mode 0?600\)/);
    const read = await call(stdio, "read_file", { sandbox_id: sandboxId, path: "notes/hello.txt" });
    expect(textOf(read)).toBe(content);
    const listed = await call(stdio, "list_directory", { sandbox_id: sandboxId, path: "notes" });
    expect(textOf(listed)).toMatch(/file\s+25 \S+ \S+ hello\.txt/);
    // Bytes that are not UTF-8 go both ways as base64.
    const bytes = Buffer.from([0, 255, 1, 254]).toString("base64");
    await call(stdio, "write_file", {
      sandbox_id: sandboxId,
      path: "b.bin",
      content: bytes,
      encoding: "base64",
    });
    const asText = await call(stdio, "read_file", { sandbox_id: sandboxId, path: "b.bin" });
    expect(asText.isError).toBe(true);
    expect(textOf(asText)).toContain("is not UTF-8 text: read it with encoding base64");
    const asBase64 = await call(stdio, "read_file", {
      sandbox_id: sandboxId,
      path: "b.bin",
      encoding: "base64",
    });
    expect(textOf(asBase64)).toBe(bytes);
  });

  it("answers bad input with an isError result naming the problem", async () => {
    const missing = await call(stdio, "read_file", { sandbox_id: sandboxId });
    expect(missing.isError).toBe(true);
    expect(textOf(missing)).toMatch(/path.*is missing|is missing.*path/);
    const outside = await call(stdio, "read_file", { sandbox_id: sandboxId, path: "/etc/passwd" });
    expect(outside.isError).toBe(true);
    expect(textOf(outside)).toMatch(/resolves to \/etc\/passwd, outside \/home\/agent and \/workspace/);
    const escape = await call(stdio, "write_file", {
      sandbox_id: sandboxId,
      path: "../../etc/x",
      content: "x",
    });
    expect(escape.isError).toBe(true);
    expect(textOf(escape)).toContain("must not have a '..' component");
    const tooLong = await call(stdio, "run_command", {
      sandbox_id: sandboxId,
      command: "true",
      timeout_s: 3600,
    });
    expect(tooLong.isError).toBe(true);
    expect(textOf(tooLong)).toMatch(/timeout_s/);
    expect(textOf(tooLong)).toContain("must be at most 600 seconds");
    const unknown = await call(stdio, "run_command", {
      sandbox_id: "00000000-0000-4000-8000-000000000000",
      command: "true",
    });
    expect(unknown.isError).toBe(true);
    expect(textOf(unknown)).toMatch(/project not found/);
  });
});

describe("/mcp (streamable HTTP)", () => {
  it("lists the tools and runs a command for an API key", async () => {
    const { key } = await makeKey("http");
    const client = await httpClient({ "X-API-Key": key });
    try {
      expect((await client.listTools()).tools).toHaveLength(7);
      const listed = await call(client, "list_sandboxes", {});
      expect(textOf(listed)).toContain(sandboxId);
      const ran = await call(client, "run_command", {
        sandbox_id: sandboxId,
        command: "cat notes/hello.txt",
      });
      expect(textOf(ran)).toContain("ünïcödé ✓");
    } finally {
      await client.close();
    }
  });

  it("refuses a request without a key, with a session's token, or with an unknown key: 401 saying why", async () => {
    const none = await post({});
    expect(none.status).toBe(401);
    const session = await post({ authorization: `Bearer ${h.users.alice.token}` });
    expect(session.status).toBe(401);
    expect(await session.json()).toMatchObject({ error: "api_key_required" });
    const wrong = await post({ "x-api-key": `sbx_${"A".repeat(43)}` });
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as { message: string }).message).toMatch(/not a valid API key/);
  });

  it("keeps a session to the key that opened it", async () => {
    const first = await makeKey("first");
    const second = await makeKey("second");
    const opened = await post({ authorization: `Bearer ${first.key}` });
    expect(opened.status).toBe(200);
    const session = opened.headers.get("mcp-session-id")!;
    expect(session).toBeTruthy();
    await opened.body?.cancel();
    const list = { jsonrpc: "2.0", id: 2, method: "tools/list" };
    const other = await post({ "x-api-key": second.key, "mcp-session-id": session }, list);
    expect(other.status).toBe(404);
    expect(await other.json()).toMatchObject({ error: "session_not_found" });
    const noSession = await post({ "x-api-key": first.key }, list);
    expect(noSession.status).toBe(400);
    expect(((await noSession.json()) as { message: string }).message).toMatch(/send initialize first/);
  });

  it("refuses a revoked key on its next request", async () => {
    const { id, key } = await makeKey("revoked");
    const client = await httpClient({ authorization: `Bearer ${key}` });
    try {
      expect((await client.listTools()).tools.length).toBe(7);
      const revoked = await h.as("alice", "DELETE", `/auth/api-keys/${id}`);
      expect(revoked.statusCode, revoked.body).toBeLessThan(300);
      await expect(client.listTools()).rejects.toThrow(/not a valid API key \(unknown, revoked or expired\)/);
      const raw = await post({ authorization: `Bearer ${key}` });
      expect(raw.status).toBe(401);
      expect(((await raw.json()) as { message: string }).message).toMatch(/revoked/);
      // sbx mcp with that key: the tool answers the refusal.
      const refused = await stdioClient(key);
      try {
        const listed = await call(refused, "list_sandboxes", {});
        expect(listed.isError).toBe(true);
        expect(textOf(listed)).toMatch(/^the API key in \$SBX_API_KEY was refused: .*not a valid API key/);
      } finally {
        await refused.close();
      }
    } finally {
      await client.close().catch(() => undefined);
    }
  });
});

describe("destroy_sandbox", () => {
  it("destroys the sandbox: the project goes, nothing of its tenant is left", async () => {
    const destroyed = await call(stdio, "destroy_sandbox", { sandbox_id: sandboxId });
    expect(destroyed.isError, textOf(destroyed)).toBeFalsy();
    await h.waitForStatus("alice", sandboxId, "gone", 600_000);
    expect(await tenantLeftovers(platform.config.host, sandboxId)).toEqual([]);
    const again = await call(stdio, "run_command", { sandbox_id: sandboxId, command: "true" });
    expect(again.isError).toBe(true);
  }, 700_000);
});
