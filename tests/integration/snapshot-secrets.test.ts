// Issue 22.4: a snapshot never holds a credential. A sandbox shaped as gcp mode shapes it (the real
// TenantSandbox component with a GCS token file, through the real engine and provider plugin; the token
// minted by the runtime's impersonation code, runtime/gcp/credentials.ts, from a loopback stand-in for
// IAM Credentials), snapshotted by the real snapshot code into the suite's registry; then the
// snapshot's image config and every one of its layers, as the engine stores them, are searched for it.
// (Issue 21 replaced the service-account key this test first delivered: no key exists any more.)
import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { Stack } from "@pulumi/pulumi/automation/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";
import { TenantNetwork } from "../../components/tenant/network.js";
import { TenantSandbox } from "../../components/tenant/sandbox.js";
import { TenantStorage } from "../../components/tenant/storage.js";
import { tenantNames } from "../../components/tenant/names.js";
import { dockerClient } from "../../lib/docker-client.js";
import { openDatabase, type Database } from "../../runtime/store/db.js";
import { run, waitFor } from "../../lib/process.js";
import { migrate } from "../../runtime/store/migrations.js";
import { tenantDefaults, tenantStackOptions } from "../../runtime/tenants/config.js";
import { requestCreate } from "../../runtime/tenants/service.js";
import { takeSnapshot } from "../../runtime/tenants/snapshots.js";
import { localWorkspace } from "../../runtime/tenants/stack.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { StackConfig } from "../../stacks/config.js";
import { TenantTokens } from "../../runtime/gcp/credentials.js";
import { docker, execIn, uniqueName } from "../helpers/containers.js";
import { startTokenServer, type TokenServer } from "../helpers/fake-gcs.js";
import { isolatedHostConfig } from "../helpers/host.js";
import { sharedRegistryPort } from "../helpers/shared-registry.js";
import type { SnapshotRecord } from "../../runtime/store/snapshots.js";

const projectId = `snapkey-${uniqueName("k").slice(2, 8)}`;
// What a leak would carry: a token of this run's own, minted for the tenant's account.
const tokenPrefix = `sbx-test-secret-${randomBytes(12).toString("hex")}`;
let tokens: TokenServer;
let token: string;

let config: StackConfig;
let db: Database;
let stack: Stack;
let snapshot: SnapshotRecord;

beforeAll(async () => {
  // The suite's registry (helpers/shared-registry.ts): a fresh one makes the first push compress every layer.
  const host = { ...(await isolatedHostConfig()), registryPort: await sharedRegistryPort() };
  const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  config = StackConfig.parse({
    target: "local",
    host,
    tenants: { image, subnetPool: "10.233.8.0/24", sshPortRange: [27180, 27181] },
  });
  db = await openDatabase({ dataDir: path.join(host.dataDir, "db") });
  await migrate(db);
  await requestCreate(db, tenantDefaults(config), { projectId, ownerId: "u1" }); // the row snapshots belong to

  const labels = { [LABELS.tenant]: projectId, [LABELS.managedBy]: MANAGED_BY };
  const secretsDir = path.join(tenantDefaults(config).host.secretsRoot!, projectId);
  const program = async () => {
    const network = new TenantNetwork("t-network", { projectId, subnet: "10.233.8.0/24", labels });
    const storage = new TenantStorage("t-storage", { projectId, labels });
    new TenantSandbox("t-sandbox", {
      projectId,
      image,
      network: network.networkName,
      address: network.sandboxAddress,
      gateway: network.gateway,
      proxyPort: host.squidPort,
      volumeName: storage.volumeName,
      volumeMountpoint: storage.mountpoint,
      protectedPaths: [],
      sshPublicKey: "",
      sshHostPort: 27180,
      backupRemote: `:gcs:sandbox-bucket/projects/${projectId}/workspace`,
      backupIntervalSeconds: 3600,
      gcsTokenFile: true,
      secretsDir,
      limits: { memoryMiB: 512, cpus: 1, pids: 256 },
      running: true,
      labels,
    });
  };
  stack = await Stack.createOrSelect(
    `tenant-${projectId}`,
    await localWorkspace(projectId, program, tenantStackOptions(config)),
  );
  await stack.up();
  const container = tenantNames(projectId).container;
  await waitFor("the sandbox healthy", 60_000, async () =>
    (await execIn(container, "/usr/local/sbin/sandbox-healthcheck", "root")).code === 0 ? true : undefined,
  );
  // What the reconciler does after the up: mint the tenant's token and write it for the sandbox.
  tokens = await startTokenServer(tokenPrefix);
  await new TenantTokens(
    {
      project: "sandbox-proj",
      projectServiceAccount: "project-service-sa@sandbox-proj.iam.gserviceaccount.com",
      source: async () => "the-vm-token",
      endpoint: tokens.endpoint,
    },
    tenantDefaults(config).host.secretsRoot!,
  ).renew(projectId);
  token = tokens.minted[0]!.accessToken;
  // The backup daemon (root) reads it at run time, from the read-only mount.
  const mounted = await execIn(container, "cat /run/secrets/gcs-token.json", "root");
  expect(JSON.parse(mounted.stdout).access_token).toBe(token);
  // Not the agent: rclone gets it in its environment from the daemon, for one run at a time.
  expect((await execIn(container, "cat /run/secrets/gcs-token.json", "agent")).code).not.toBe(0);
  snapshot = await takeSnapshot(db, dockerClient(), projectId, {
    repository: `127.0.0.1:${host.registryPort}/sandboxes`,
    keep: 5,
    pruneRegistry: true,
  });
}, 900_000);

afterAll(async () => {
  await stack?.destroy().catch(() => undefined);
  await tokens?.stop();
  if (snapshot) await docker("image", "rm", "--force", snapshot.image).catch(() => undefined);
  await docker("image", "rm", "--force", snapshot?.image.replace(/:[^:]+$/, ":latest") ?? "none").catch(
    () => undefined,
  );
  await db?.close();
  await fs.rm(path.dirname(config.host.configDir), { recursive: true, force: true });
}, 300_000);

describe("a gcp-mode sandbox's snapshot", () => {
  it("holds no token: not in the container's environment, not in the image config", async () => {
    const container = JSON.parse(await docker("inspect", tenantNames(projectId).container))[0];
    expect(JSON.stringify(container.Config)).not.toContain(token);
    const config = await docker("image", "inspect", "--format", "{{json .Config}}", snapshot.image);
    expect(config).not.toContain(token);
    expect(config).toContain("GCS_TOKEN_FILE=/run/secrets/gcs-token.json"); // a path, not the token
    expect(config).not.toMatch(/GCS_SA_KEY|GOOGLE_APPLICATION_CREDENTIALS/);
  });

  it("holds no token in any layer, as the engine stores them", async () => {
    const { GraphDriver } = JSON.parse(await docker("image", "inspect", snapshot.image))[0];
    const layers = [GraphDriver.Data.UpperDir, ...(GraphDriver.Data.LowerDir ?? "").split(":")].filter(
      Boolean,
    );
    expect(layers.length).toBeGreaterThan(1);
    const found = await run("grep", ["-rlaF", "--no-messages", token, ...layers], 300_000).then(
      (r) => r.stdout.trim(),
      () => "", // grep exits 1 when nothing matches
    );
    expect(found).toBe("");
    // The search finds the token where it is: the root-only file on the host it is mounted from.
    const hostFile = path.join(tenantDefaults(config).host.secretsRoot!, projectId, "gcs-token.json");
    expect((await fs.stat(hostFile)).mode & 0o777).toBe(0o600);
    expect((await run("grep", ["-laF", token, hostFile])).stdout.trim()).toBe(hostFile);
  });
});
