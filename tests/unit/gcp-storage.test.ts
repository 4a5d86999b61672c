// The runtime's GCS settings and guards (runtime/gcp/storage.ts, runtime/tenants/config.ts); the requests
// themselves run against fake-gcs-server in tests/integration/gcs-storage.test.ts.
import { mkdtempSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { TenantTokens, tenantTokenPath } from "../../runtime/gcp/credentials.js";
import {
  GcsClient,
  gcsEndpoint,
  hostTokenSource,
  purgePrefix,
  tenantPrefix,
} from "../../runtime/gcp/storage.js";
import { gcpTenantCloud } from "../../runtime/tenants/config.js";
import { parseStackConfig } from "../../stacks/config.js";
import { startTokenServer } from "../helpers/fake-gcs.js";

describe("GCS endpoint and credentials", () => {
  it("Google unless STORAGE_EMULATOR_HOST says otherwise (host:port or a URL)", () => {
    expect(gcsEndpoint({})).toBe("https://storage.googleapis.com");
    expect(gcsEndpoint({ STORAGE_EMULATOR_HOST: "127.0.0.1:4443" })).toBe("http://127.0.0.1:4443");
    expect(gcsEndpoint({ STORAGE_EMULATOR_HOST: "https://gcs.test/" })).toBe("https://gcs.test");
  });

  it("the runtime's token: GOOGLE_OAUTH_ACCESS_TOKEN first, none for an emulator without one", async () => {
    expect(await hostTokenSource({ GOOGLE_OAUTH_ACCESS_TOKEN: "t1", STORAGE_EMULATOR_HOST: "h:1" })()).toBe(
      "t1",
    );
    expect(await hostTokenSource({ STORAGE_EMULATOR_HOST: "h:1" })()).toBeUndefined();
    // Without either, the metadata server: unreachable here, and the error names it.
    await expect(hostTokenSource({ GCE_METADATA_HOST: "127.0.0.1:9" })()).rejects.toThrow(
      /metadata server at 127\.0\.0\.1:9/,
    );
  });
});

describe("purging a prefix", () => {
  const client = new GcsClient(async () => undefined, "http://127.0.0.1:9");
  it.each(["projects/p1", "/", ""])("refuses %j before any request (p1 would match p10)", async (prefix) => {
    await expect(purgePrefix(client, "b", prefix)).rejects.toThrow(/refusing to purge prefix/);
  });

  it("a tenant's prefix ends in a slash", () => {
    expect(tenantPrefix("proj-1")).toBe("projects/proj-1/");
  });

  it("an unreachable GCS is an error naming the bucket and the prefix", async () => {
    await expect(purgePrefix(client, "my-bucket", "projects/p1/")).rejects.toThrow(
      /listing gs:\/\/my-bucket\/projects\/p1\/: cannot reach http:\/\/127\.0\.0\.1:9/,
    );
  });
});

describe("the reconciler's GCP settings", () => {
  it("none on the local target; on gcp the platform bucket and the Project Service account as delegate", () => {
    expect(
      gcpTenantCloud(parseStackConfig({ "agent-sandbox:target": "local" }, "Pulumi.dev.yaml")),
    ).toBeUndefined();
    const config = parseStackConfig(
      {
        "agent-sandbox:target": "gcp",
        "agent-sandbox:gcp": {
          project: "sandbox-prod",
          bucket: "sandbox-prod-data",
          domain: "sandboxes.example.test",
        },
      },
      "Pulumi.gcp.yaml",
    );
    const cloud = gcpTenantCloud(config, { STORAGE_EMULATOR_HOST: "127.0.0.1:4443" })!;
    expect(cloud.storage.bucket).toBe("sandbox-prod-data");
    expect(cloud.storage.client.endpoint).toBe("http://127.0.0.1:4443");
    expect(gcpTenantCloud(config, {})!.storage.client.endpoint).toBe("https://storage.googleapis.com");
  });
});

describe("tenant tokens (a loopback stand-in for IAM Credentials)", () => {
  it("renewDue mints for a missing or soon-expiring file, skips a fresh one, reports an unreachable API per project", async () => {
    const iam = await startTokenServer("unit");
    const root = mkdtempSync(path.join(os.tmpdir(), "tokens-"));
    try {
      const options = {
        project: "sandbox-prod",
        projectServiceAccount: "project-service-sa@sandbox-prod.iam.gserviceaccount.com",
        source: async () => "vm",
        endpoint: iam.endpoint,
      };
      const tokens = new TenantTokens(options, root, 20 * 60_000);
      expect(await tokens.renewDue(["a", "b"])).toEqual({});
      expect(iam.minted.map((m) => m.target.split("@")[0])).toEqual([
        tenantNames("a").serviceAccountId,
        tenantNames("b").serviceAccountId,
      ]);
      expect(await tokens.renewDue(["a", "b"])).toEqual({}); // both fresh (1 h left)
      expect(iam.minted).toHaveLength(2);
      iam.lifetimeSeconds = 600; // expires within the 20-minute margin
      await tokens.renew("a");
      iam.lifetimeSeconds = undefined;
      await tokens.renewDue(["a", "b"]);
      expect(iam.minted).toHaveLength(4); // a: renewed at once, as it was due
      const written = JSON.parse(await fs.readFile(tenantTokenPath(root, "a"), "utf8"));
      expect(written).toMatchObject({ access_token: iam.minted[3]!.accessToken, token_type: "Bearer" });
      const broken = new TenantTokens({ ...options, endpoint: "http://127.0.0.1:9" }, root);
      await tokens.remove("b");
      expect(Object.keys(await broken.renewDue(["b"]))).toEqual(["b"]);
    } finally {
      await iam.stop();
      await fs.rm(root, { recursive: true, force: true });
    }
  });
});
