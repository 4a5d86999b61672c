// Project secrets and the credential gateway (issue 15). Secrets set through the API reach the agent's
// shell (env) or /run/secrets (file) and nothing else: not `docker inspect`, not a snapshot's layer, not a
// backup. A model-API key never enters the sandbox: the sandbox's client, pointed at the gateway on its own
// gateway address with a placeholder key, reaches a TLS server posing as api.anthropic.com (the test's own,
// with its own CA) with the real key; no file, variable or process inside holds it; the request is logged
// without it. Another tenant cannot use the first one's gateway. Real reconciler, engine, provider,
// iptables, Squid, registry and gateway.
import { execFile, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import type * as http from "node:http";
import * as https from "node:https";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { GATEWAY_PLACEHOLDER } from "../../components/tenant/secrets.js";
import { tenantAddresses } from "../../lib/subnets.js";
import { waitFor } from "../../lib/process.js";
import { CredentialGateway, credentialGatewayOptions } from "../../runtime/gateway/gateway.js";
import { SecretBox } from "../../runtime/secrets.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { docker, execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { makeTestCertificates } from "../helpers/tls.js";

const exec = promisify(execFile);
const GATEWAY_PORT = 3180;
const realKey = `sk-ant-real-${randomBytes(12).toString("hex")}`;
const openAiKey = `sk-openai-real-${randomBytes(12).toString("hex")}`;
const geminiKey = `gemini-real-${randomBytes(12).toString("hex")}`;
const envValue = `env-secret-${randomBytes(12).toString("hex")}`;
const fileValue = `file-secret-${randomBytes(12).toString("hex")}`;

let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let gateway: CredentialGateway;
let tls: https.Server;
let certs: string;
const ids = { alice: "", bob: "" };
const container = (who: "alice" | "bob") => tenantNames(ids[who]).container;
/** What the server posing as the model API received. */
const received: { method: string; url: string; headers: Record<string, unknown>; body: string }[] = [];
/** Requests to `.../hold` the server posing as the model API holds unanswered until the test answers them. */
const held: { response: http.ServerResponse; closedAt?: number }[] = [];
/** Requests one project may have in flight through the gateway, in this file. */
const MAX_CONCURRENT = 2;

/** PUT/DELETE a secret as `who` and wait for the update it queued. */
async function secret(who: "alice" | "bob", method: "PUT" | "DELETE", name: string, body?: object) {
  const answer = await h.as(who, method, `/projects/${ids[who]}/secrets/${name}`, body);
  if (answer.statusCode === 202) {
    const { operation } = answer.json();
    await waitFor(`the update for ${name}`, 300_000, async () => {
      const { rows } = await h.db.query<{ state: string; error: string | null }>(
        "select state, error from operations where id = $1",
        [operation.id],
      );
      if (rows[0]?.state === "failed") throw new Error(`the update failed: ${rows[0].error}`);
      return rows[0]?.state === "succeeded" ? true : undefined;
    });
  }
  return answer;
}

/** A login shell's view (tmux's and SSH's shells are login shells). */
const shell = (who: "alice" | "bob", script: string) => execIn(container(who), `bash -lc '${script}'`);

beforeAll(async () => {
  certs = await fs.mkdtemp(path.join(os.tmpdir(), "gateway-certs-"));
  // A CA and a certificate for the three model APIs signed by it (the gateway verifies the upstream).
  await makeTestCertificates(certs, "agent-sandbox test CA", [
    "DNS:api.anthropic.com",
    "DNS:api.openai.com",
    "DNS:generativelanguage.googleapis.com",
  ]);
  tls = https.createServer(
    {
      key: await fs.readFile(path.join(certs, "server.key")),
      cert: await fs.readFile(path.join(certs, "server.pem")),
    },
    (request, response) => {
      if (request.url?.includes("/hold")) {
        const entry: (typeof held)[number] = { response };
        response.once("close", () => (entry.closedAt = Date.now()));
        held.push(entry);
        return;
      }
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        received.push({
          method: request.method ?? "",
          url: request.url ?? "",
          headers: request.headers,
          body: Buffer.concat(chunks).toString(),
        });
        response.writeHead(200, { "content-type": "application/json" });
        response.end(
          JSON.stringify({ type: "message", content: [{ type: "text", text: "hello from the API" }] }),
        );
      });
    },
  );
  await new Promise<void>((resolve) => tls.listen(0, "127.0.0.1", resolve));
  const { port } = tls.address() as { port: number };
  platform = await testPlatform(
    {
      subnetPool: "10.247.0.0/23",
      sshPortRange: [27850, 27855],
      leaseSeconds: 10,
      credentialGateway: {
        port: GATEWAY_PORT,
        upstreams: {},
        caFile: path.join(certs, "ca.pem"),
        resolve: {
          "api.anthropic.com": `127.0.0.1:${port}`,
          "api.openai.com": `127.0.0.1:${port}`,
          "generativelanguage.googleapis.com": `127.0.0.1:${port}`,
        },
        maxConcurrentRequests: MAX_CONCURRENT,
        headersTimeoutSeconds: 20,
      },
    },
    { registry: true },
  );
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
  });
  gateway = new CredentialGateway({
    db: h.db,
    box: SecretBox.fromDataDir(platform.config.host.dataDir),
    ...credentialGatewayOptions(platform.config.tenants.credentialGateway)!,
    syncMs: 500,
  });
  await gateway.start();
  for (const who of ["alice", "bob"] as const) {
    const created = await h.as(who, "POST", "/projects", { name: `gateway-${who}` });
    expect(created.statusCode, created.body).toBeLessThan(300);
    ids[who] = created.json().project_id;
  }
  for (const who of ["alice", "bob"] as const) await h.waitForStatus(who, ids[who], "running", 600_000);
}, 1_200_000);

afterAll(async () => {
  await gateway?.close();
  await h?.close();
  await platform?.stop();
  for (const { response } of held) response.destroy();
  tls?.close();
  if (certs) await fs.rm(certs, { recursive: true, force: true });
}, 900_000);

describe("project secrets", () => {
  it("are set write-only, listed by name, and reach the agent's shell or /run/secrets as configured", async () => {
    expect((await secret("alice", "PUT", "MY_TOKEN", { value: envValue })).statusCode).toBe(202);
    const file = await secret("alice", "PUT", "DEPLOY_KEY", { value: fileValue, delivery: "file" });
    expect(file.statusCode, file.body).toBe(202);
    expect(file.json().secret).toMatchObject({ name: "DEPLOY_KEY", delivery: "file" });
    expect(file.body).not.toContain(fileValue);
    const listed = await h.as("alice", "GET", `/projects/${ids.alice}/secrets`);
    expect(
      listed.json().secrets.map((s: { name: string; delivery: string }) => `${s.name}:${s.delivery}`),
    ).toEqual(["DEPLOY_KEY:file", "MY_TOKEN:env"]);
    expect(listed.body).not.toContain(envValue);
    expect((await shell("alice", 'printf %s "$MY_TOKEN"')).stdout).toBe(envValue);
    expect((await shell("alice", 'printf %s "${DEPLOY_KEY:-unset}"')).stdout).toBe("unset");
    expect((await execIn(container("alice"), "cat /run/secrets/DEPLOY_KEY")).stdout).toBe(fileValue);
    // Read-only for the agent: it cannot replace what the platform delivers.
    expect((await execIn(container("alice"), "echo x > /run/secrets/DEPLOY_KEY")).code).not.toBe(0);
  });

  it("are not in docker inspect, the snapshot's layer or the backup", async () => {
    const inspected = await docker("inspect", container("alice"));
    for (const value of [envValue, fileValue, realKey]) expect(inspected).not.toContain(value);
    const snap = await h.as("alice", "POST", `/projects/${ids.alice}/snapshot`, {});
    expect(snap.statusCode, snap.body).toBe(202);
    await waitFor("the snapshot", 600_000, async () => {
      const { rows } = await h.db.query<{ state: string; error: string | null }>(
        "select state, error from operations where id = $1",
        [snap.json().operation.id],
      );
      if (rows[0]?.state === "failed") throw new Error(`the snapshot failed: ${rows[0].error}`);
      return rows[0]?.state === "succeeded" ? true : undefined;
    });
    const snapshots = (await h.as("alice", "GET", `/projects/${ids.alice}/snapshots`)).json().snapshots;
    expect(snapshots.length).toBe(1);
    const image = JSON.parse(await docker("image", "inspect", snapshots[0].image))[0];
    expect(JSON.stringify(image.Config)).not.toContain(envValue);
    // The snapshot's own layer (what the commit added to the base image) and the backup on the host.
    // Where the sandbox's /mnt/backup is on the host (a new tenant's own backup filesystem, an older one's
    // directory under <dataDir>/backups).
    const mounts: { Destination: string; Source: string }[] = JSON.parse(
      await docker("inspect", "--format", "{{json .Mounts}}", tenantNames(ids.alice).container),
    );
    const backup = mounts.find((m) => m.Destination === "/mnt/backup")?.Source;
    expect(backup, "the sandbox's /mnt/backup mount").toBeDefined();
    expect((await fs.readdir(backup!)).length).toBeGreaterThan(0);
    const found = await exec("grep", [
      "-rlaF",
      "--no-messages",
      "-e",
      envValue,
      "-e",
      fileValue,
      image.GraphDriver.Data.UpperDir,
      backup!,
    ]).then(
      (r) => r.stdout.trim(),
      () => "", // grep exits 1 when nothing matches
    );
    expect(found).toBe("");
    // The search finds them where they are: the tenant's root-only directory on the host.
    const secretsRoot = path.join(platform.config.host.dataDir, "tenant-secrets");
    expect((await fs.stat(secretsRoot)).mode & 0o777).toBe(0o700);
    expect((await exec("grep", ["-rlaF", fileValue, secretsRoot])).stdout.trim()).toBe(
      path.join(secretsRoot, ids.alice, "DEPLOY_KEY"),
    );
  });

  it("bad input is a 400 naming the field (a gateway delivery for a key no gateway serves, a 409 naming it); another user's project is a 404; nothing is stored", async () => {
    const cases: [string, object, number, string][] = [
      ["..%2Fetc", { value: "x" }, 400, "name"],
      ["lower_case", { value: "x" }, 400, "name"],
      ["BIG", { value: "x".repeat(32 * 1024 + 1) }, 400, "value"],
      ["EMPTY", { value: "" }, 400, "value"],
      ["NOT_A_MODEL_KEY", { value: "x", delivery: "gateway" }, 409, "delivery"],
      ["ODD", { value: "x", delivery: "tmpfs" }, 400, "delivery"],
      ["EXTRA", { value: "x", mode: "0644" }, 400, "mode"],
    ];
    for (const [name, body, status, field] of cases) {
      const answer = await h.as("alice", "PUT", `/projects/${ids.alice}/secrets/${name}`, body);
      expect(answer.statusCode, `${name}: ${answer.body}`).toBe(status);
      expect(answer.body, name).toContain(field);
    }
    const theirs = await h.as("bob", "PUT", `/projects/${ids.alice}/secrets/STOLEN`, { value: "x" });
    expect(theirs.statusCode).toBe(404);
    expect((await h.as("bob", "GET", `/projects/${ids.alice}/secrets`)).statusCode).toBe(404);
    expect((await h.as("alice", "DELETE", `/projects/${ids.alice}/secrets/NEVER_SET`)).statusCode).toBe(404);
    const names = (await h.as("alice", "GET", `/projects/${ids.alice}/secrets`)).json().secrets;
    expect(names.map((s: { name: string }) => s.name)).toEqual(["DEPLOY_KEY", "MY_TOKEN"]);
  });
});

describe("the credential gateway", () => {
  it("adds the real key on the way out; nothing inside the sandbox holds it; the request is logged without it", async () => {
    expect((await secret("alice", "PUT", "ANTHROPIC_API_KEY", { value: realKey })).statusCode).toBe(202);
    const { gateway: address } = tenantAddresses(
      (await h.db.query<{ subnet: string }>("select subnet from tenants where project_id = $1", [ids.alice]))
        .rows[0]!.subnet,
    );
    expect((await shell("alice", 'printf %s "$ANTHROPIC_BASE_URL"')).stdout).toBe(
      `http://${address}:${GATEWAY_PORT}/anthropic`,
    );
    expect((await shell("alice", 'printf %s "$ANTHROPIC_API_KEY"')).stdout).toBe(GATEWAY_PLACEHOLDER);
    await waitFor("the gateway listening for alice", 30_000, async () =>
      gateway.addresses.get(address) === ids.alice ? true : undefined,
    );
    const call = await shell(
      "alice",
      `curl -sS --max-time 20 -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" -H "content-type: application/json" -d "{\\"model\\":\\"m\\"}"`,
    );
    expect(call.stdout, call.stderr).toContain("hello from the API");
    expect(received).toHaveLength(1);
    expect(received[0]).toMatchObject({ method: "POST", url: "/v1/messages", body: '{"model":"m"}' });
    expect(received[0]!.headers["x-api-key"]).toBe(realKey);
    expect(received[0]!.headers.host).toBe("api.anthropic.com");

    // No file, variable or process inside holds it.
    // The key goes to grep on its stdin: on a command line it would be in a process inside.
    const search = (value: string, script: string) =>
      spawnSync("docker", ["exec", "-i", "-u", "root", container("alice"), "sh", "-c", script], {
        input: `${value}\n`,
        encoding: "utf8",
      });
    const inFiles = "grep -rlaF --no-messages -f /dev/stdin /run /etc /home /tmp /var /root /opt";
    const inProcesses =
      "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f; echo; done 2>/dev/null > /tmp/.procs; grep -caF -f /dev/stdin /tmp/.procs; rm -f /tmp/.procs";
    const files = search(realKey, inFiles);
    expect([files.status, files.stdout]).toEqual([1, ""]); // 1: nothing matched
    expect(search(realKey, inProcesses).stdout.trim()).toBe("0");
    // The same searches find what is inside: a file secret's file, a process's environment.
    expect(search(fileValue, inFiles).stdout.trim()).toBe("/run/secrets/DEPLOY_KEY");
    expect(Number(search("PROJECT_ID=", inProcesses).stdout.trim())).toBeGreaterThan(0);
    expect(await docker("inspect", container("alice"))).not.toContain(realKey);

    const log = await h.as("alice", "GET", `/projects/${ids.alice}/gateway/requests`);
    expect(log.statusCode).toBe(200);
    expect(log.json().requests).toHaveLength(1);
    expect(log.json().requests[0]).toMatchObject({
      provider: "anthropic",
      host: "api.anthropic.com",
      method: "POST",
      path: "/v1/messages",
      status: 200,
      request_bytes: 13,
      error: null,
    });
    expect(log.json().requests[0].response_bytes).toBeGreaterThan(0);
    expect(log.body).not.toContain(realKey);
    expect((await h.as("bob", "GET", `/projects/${ids.alice}/gateway/requests`)).statusCode).toBe(404);
  });

  it("Codex and Gemini CLI, as the image runs them, reach their model through the gateway with the project's key", async () => {
    // Codex reads no OPENAI_BASE_URL (the image names the gateway as its provider: /usr/local/bin/codex);
    // Gemini CLI needs its API key chosen as its auth (the image's default settings) to ask without a prompt.
    expect((await secret("alice", "PUT", "OPENAI_API_KEY", { value: openAiKey })).statusCode).toBe(202);
    expect((await secret("alice", "PUT", "GEMINI_API_KEY", { value: geminiKey })).statusCode).toBe(202);
    const before = received.length;
    // The stub answers every request with the same small JSON, which neither CLI takes for an answer: each
    // fails after its request, which is what is checked here (a full answer is the agent pane's test, for
    // Claude Code).
    const codex = await shell(
      "alice",
      `cd /tmp && timeout 30 codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "say hi" >/dev/null 2>&1; echo codex-ran`,
    );
    expect(codex.stdout).toContain("codex-ran");
    const gemini = await shell(
      "alice",
      `cd /tmp && timeout 60 gemini --yolo -p "say hi" >/dev/null 2>&1; echo gemini-ran`,
    );
    expect(gemini.stdout).toContain("gemini-ran");
    const asked = received.slice(before);
    const toOpenAi = asked.filter((r) => r.headers.host === "api.openai.com");
    expect(toOpenAi.length, JSON.stringify(asked.map((r) => [r.headers.host, r.url]))).toBeGreaterThan(0);
    for (const request of toOpenAi) {
      expect(request).toMatchObject({ method: "POST", url: "/v1/responses" });
      expect(request.headers.authorization).toBe(`Bearer ${openAiKey}`);
    }
    const toGemini = asked.filter((r) => r.headers.host === "generativelanguage.googleapis.com");
    expect(toGemini.length, JSON.stringify(asked.map((r) => [r.headers.host, r.url]))).toBeGreaterThan(0);
    for (const request of toGemini) {
      expect(request.url).toMatch(/^\/v1beta\/models\/[^/]+:(generateContent|streamGenerateContent)/);
      expect(request.headers["x-goog-api-key"]).toBe(geminiKey);
    }
    const log = (await h.as("alice", "GET", `/projects/${ids.alice}/gateway/requests`)).json().requests;
    expect(log.some((r: { provider: string }) => r.provider === "openai")).toBe(true);
    expect(log.some((r: { provider: string }) => r.provider === "gemini")).toBe(true);
    for (const value of [openAiKey, geminiKey]) expect(JSON.stringify(log)).not.toContain(value);
  }, 600_000);

  it("a request line the URL parser cannot read is answered 400 naming it; the gateway serves on", async () => {
    const unhandled: unknown[] = [];
    const note = (error: unknown) => unhandled.push(error);
    process.on("unhandledRejection", note);
    try {
      // As the agent, to the gateway address and port its own environment names.
      const probe = [
        "import os, socket, urllib.parse",
        "u = urllib.parse.urlsplit(os.environ['ANTHROPIC_BASE_URL'])",
        "s = socket.create_connection((u.hostname, u.port), timeout=5)",
        "s.sendall(b'GET //a:99999/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')",
        "print(s.recv(4096).decode(errors='replace'))",
      ].join("\n");
      const raw = await shell("alice", `echo ${Buffer.from(probe).toString("base64")} | base64 -d | python3`);
      expect(raw.stdout, raw.stderr).toMatch(/^HTTP\/1\.1 400 /);
      expect(raw.stdout).toContain(
        'the request target must be a path (/<provider>/...), not \\"//a:99999/\\"',
      );
      const call = await shell(
        "alice",
        `curl -sS --max-time 20 -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H "content-type: application/json" -d "{}"`,
      );
      expect(call.stdout, call.stderr).toContain("hello from the API");
    } finally {
      process.off("unhandledRejection", note);
    }
    expect(unhandled.map(String)).toEqual([]);
  });

  it("a request the sandbox's client abandons is abandoned upstream at once", async () => {
    const before = held.length;
    const call = await shell(
      "alice",
      `curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$ANTHROPIC_BASE_URL/v1/hold"`,
    );
    expect(call.stdout).toBe("000"); // curl gave up
    expect(held.length).toBe(before + 1);
    const entry = held.at(-1)!;
    // Within seconds of curl leaving (it used to stay open upstream for ten minutes).
    await waitFor("the upstream request to close", 10_000, async () => (entry.closedAt ? true : undefined));
  });

  it(`at most ${MAX_CONCURRENT} requests at once per project: one more is 429 naming the limit`, async () => {
    const before = held.length;
    const background = Array.from({ length: MAX_CONCURRENT }, () =>
      shell("alice", `curl -s --max-time 60 "$ANTHROPIC_BASE_URL/v1/hold"`),
    );
    await waitFor("the held requests upstream", 30_000, async () =>
      held.length === before + MAX_CONCURRENT ? true : undefined,
    );
    let over: { stdout: string };
    try {
      over = await shell(
        "alice",
        `curl -s -w " %{http_code}" --max-time 10 -X POST "$ANTHROPIC_BASE_URL/v1/messages" -d "{}"`,
      );
    } finally {
      // Answered whatever happened above, so no later test finds the project at its limit.
      for (const { response } of held.slice(before)) response.end("released");
    }
    expect(over.stdout).toContain(`has ${MAX_CONCURRENT} requests in flight through the gateway already`);
    expect(over.stdout).toMatch(/ 429$/);
    expect((await Promise.all(background)).map((r) => r.stdout)).toEqual(
      Array(MAX_CONCURRENT).fill("released"),
    );
    // Answered, they no longer count.
    const after = await shell(
      "alice",
      `curl -s --max-time 20 -X POST "$ANTHROPIC_BASE_URL/v1/messages" -d "{}"`,
    );
    expect(after.stdout).toContain("hello from the API");
  });

  it("another tenant cannot use the first one's gateway, and gets no key from its own", async () => {
    const subnets = await h.db.query<{ project_id: string; subnet: string }>(
      "select project_id, subnet from tenants where project_id = any($1)",
      [[ids.alice, ids.bob]],
    );
    const addressOf = (id: string) =>
      tenantAddresses(subnets.rows.find((r) => r.project_id === id)!.subnet).gateway;
    const before = received.length;
    // Alice's gateway address from Bob's sandbox: the firewall drops it (no answer at all).
    const stolen = await execIn(
      container("bob"),
      `curl -s -o /dev/null -w '%{http_code}' --noproxy '*' --max-time 3 -X POST http://${addressOf(ids.alice)}:${GATEWAY_PORT}/anthropic/v1/messages`,
    );
    expect(stolen.stdout).toBe("000");
    // Bob's own gateway: he has no key there.
    await waitFor("the gateway listening for bob", 30_000, async () =>
      gateway.addresses.get(addressOf(ids.bob)) === ids.bob ? true : undefined,
    );
    const own = await execIn(
      container("bob"),
      `curl -s --noproxy '*' --max-time 5 -X POST http://${addressOf(ids.bob)}:${GATEWAY_PORT}/anthropic/v1/messages`,
    );
    expect(own.stdout).toContain("has no ANTHROPIC_API_KEY");
    expect(received.length).toBe(before);
  });

  it("a host out of the project's allowlist is refused by the gateway too", async () => {
    const patched = await h.as("alice", "PATCH", `/projects/${ids.alice}`, {
      allowlist: ["registry.npmjs.org"],
    });
    expect(patched.statusCode, patched.body).toBe(202);
    await waitFor("the allowlist update", 300_000, async () => {
      const { rows } = await h.db.query<{ state: string }>("select state from operations where id = $1", [
        patched.json().operation.id,
      ]);
      return rows[0]?.state === "succeeded" ? true : undefined;
    });
    const before = received.length;
    const call = await shell("alice", `curl -s --max-time 10 -X POST "$ANTHROPIC_BASE_URL/v1/messages"`);
    expect(call.stdout).toContain("api.anthropic.com is not in the project's allowlist");
    expect(received.length).toBe(before);
  });

  it("a deleted secret leaves the sandbox with its next update", async () => {
    expect((await secret("alice", "DELETE", "MY_TOKEN")).statusCode).toBe(202);
    expect((await shell("alice", 'printf %s "${MY_TOKEN:-unset}"')).stdout).toBe("unset");
    expect((await execIn(container("alice"), "ls /run/secrets")).stdout.split("\n").sort()).toEqual([
      "DEPLOY_KEY",
      "agent.env",
    ]);
  });
});
