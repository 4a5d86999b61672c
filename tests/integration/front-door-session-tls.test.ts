// The front door's session on the GCP target (issue 21): its one-time URL is https:// on the platform's domain,
// and the cookie it sets is `Secure` (never sent over plain HTTP), besides HttpOnly, SameSite=Lax and host-only.
// The runtime's own routes, with the tenant defaults a gcp config gives.
import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { frontDoorHost } from "../../lib/front-door.js";
import { parseStackConfig } from "../../stacks/config.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { testDatabase } from "../helpers/postgres.js";

const DOMAIN = "sandboxes.example.test";
const PROJECT = "7d2e4f60-1a3b-4c5d-8e9f-0a1b2c3d4e5f";
const dir = mkdtempSync(path.join(os.tmpdir(), "front-door-session-tls-"));
let h: ApiHarness<"owner">;

beforeAll(async () => {
  const config = parseStackConfig(
    {
      "agent-sandbox:target": "gcp",
      "agent-sandbox:host": { dataDir: dir },
      "agent-sandbox:gcp": { project: "sandbox-prod", bucket: "sandbox-prod-data", domain: DOMAIN },
    },
    "Pulumi.gcp.yaml",
  );
  h = await apiHarness({ database: await testDatabase("pglite", { under: dir }), config, users: ["owner"] });
  const owner = h.users.owner.id;
  await h.db.query("insert into tenants (project_id, owner_id, spec, state) values ($1, $2, $3, 'running')", [
    PROJECT,
    owner,
    JSON.stringify({ running: true, ports: [{ port: 3000 }] }),
  ]);
  await h.db.query("insert into projects (id, user_id, name, ssh_private_key) values ($1, $2, 'web', 'x')", [
    PROJECT,
    owner,
  ]);
});

afterAll(async () => {
  await h?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("the front door's session over TLS", () => {
  it("the one-time URL is https:// on the domain, and the cookie it sets is Secure", async () => {
    const host = frontDoorHost(PROJECT, undefined, DOMAIN);
    const session = await h.as("owner", "POST", `/projects/${PROJECT}/front-door/session`, {});
    expect(session.statusCode, session.body).toBe(200);
    const { url, front_door_url } = session.json() as { url: string; front_door_url: string };
    expect(front_door_url).toBe(`https://${host}/`);
    expect(url).toMatch(new RegExp(`^https://${host.replaceAll(".", "\\.")}/__sbx/session\\?ticket=`));
    // What Caddy sends the runtime for that URL (provider/resources/front-door-route.ts rewrites it so).
    const ticket = new URL(url).searchParams.get("ticket")!;
    const redeemed = await h.app.inject({
      method: "GET",
      url: `/front-door/session/${PROJECT}?ticket=${encodeURIComponent(ticket)}`,
    });
    expect(redeemed.statusCode, redeemed.body).toBe(302);
    const cookie = String(redeemed.headers["set-cookie"]);
    expect(cookie).toMatch(/^sbx_front_door=[^;]+; Path=\/; HttpOnly; SameSite=Lax; Max-Age=3600; Secure$/);
  });
});
