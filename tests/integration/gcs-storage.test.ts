// Issue 21: the GCP target's storage paths against a real GCS JSON API (fake-gcs-server, built from Go
// modules by scripts/setup.sh, on loopback). Only the endpoint differs from production: STORAGE_EMULATOR_HOST
// for the Pulumi CLI's gs:// backend and the runtime, rclone's endpoint option for the backup daemon.
// - a tenant stack (the real tenant program, local mode: the GCP provider cannot run here) created, updated
//   and destroyed with its state in gs://, and its state purged after;
// - the sandbox's backup daemon (sandbox-image's sandbox-backup, run on the host) syncing into
//   gs://<bucket>/projects/<id>/workspace with a token of the tenant's own account, minted by the runtime's
//   impersonation code; restored from there; an expired token refused and a renewed one used;
// - delete: the reconciler's two steps (destroy, then purge the prefix) leave no object of the tenant.
// The emulator enforces no IAM: a recording proxy in front of it shows each request's credentials and
// object path, which are asserted; the IAM conditions themselves are tested under mocks
// (tests/unit/gcp-tenant-iam.test.ts). Secrets: passphrase (gcpkms:// has no emulator here).
import { execFile } from "node:child_process";
import { mkdtempSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import type { TenantSpecInput } from "../../components/tenant/spec.js";
import { RESOURCE_TYPES } from "../../lib/constants.js";
import { squidPaths } from "../../lib/host/squid.js";
import { TenantTokens, tenantTokenPath } from "../../runtime/gcp/credentials.js";
import { GcsClient, gcsEndpoint, hostTokenSource, purgeTenantObjects } from "../../runtime/gcp/storage.js";
import {
  createTenant,
  destroyTenant,
  TENANT_PROJECT,
  upTenant,
  type TenantStackOptions,
} from "../../runtime/tenants/stack.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import type { HostConfig } from "../../stacks/config.js";
import { docker, uniqueName } from "../helpers/containers.js";
import {
  startFakeGcs,
  startRecordingProxy,
  startTokenServer,
  type FakeGcs,
  type RecordingProxy,
  type TokenServer,
} from "../helpers/fake-gcs.js";
import { isolatedSquidHost, tenantLeftovers } from "../helpers/host.js";

const exec = promisify(execFile);
const BUCKET = "sbx-test-platform-data";
const GCP_PROJECT = "sbx-test-proj";
const PROJECT_SERVICE_ACCOUNT = `project-service-sa@${GCP_PROJECT}.iam.gserviceaccount.com`;
const BACKUP_SCRIPT = path.resolve("sandbox-image/rootfs/usr/local/sbin/sandbox-backup");
const projectId = `gcs-${uniqueName("g").slice(2, 8)}`;
const stackName = tenantNames(projectId).stack;
const prefix = `projects/${projectId}/`;

let gcs: FakeGcs;
let proxy: RecordingProxy;
let iam: TokenServer;
let squid: Awaited<ReturnType<typeof isolatedSquidHost>>;
let host: HostConfig;
let options: TenantStackOptions;
let spec: TenantSpecInput;
let tokens: TenantTokens;
let secretsRoot: string;
let scratch: string;
const savedEnv = { ...process.env };

/** `sandbox-backup <args>` as the sandbox runs it (root, rclone dropped to the "agent", here nobody). */
async function backup(args: string[], home: string, remote = `:gcs:${BUCKET}/${prefix}workspace`) {
  const env = {
    PATH: process.env.PATH,
    SANDBOX_HOME: home,
    SANDBOX_STATE_DIR: path.join(scratch, "state"),
    SANDBOX_AGENT_USER: "nobody",
    BACKUP_REMOTE: remote,
    GCS_TOKEN_FILE: tenantTokenPath(secretsRoot, projectId),
    // The only difference from the sandbox on GCP: where GCS is.
    RCLONE_GCS_ENDPOINT: `http://${proxy.host}/storage/v1/`,
  };
  return exec("python3", [BACKUP_SCRIPT, ...args], { env, timeout: 120_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number; stdout: string; stderr: string }) => ({
      ...error,
      code: Number(error.code) || 1,
    }),
  );
}

/** A home the "agent" (nobody) owns, with a few files in nested directories. */
async function makeHome(files: Record<string, string>): Promise<string> {
  const home = mkdtempSync(path.join(scratch, "home-"));
  for (const [name, content] of Object.entries(files)) {
    await fs.mkdir(path.dirname(path.join(home, name)), { recursive: true });
    await fs.writeFile(path.join(home, name), content);
  }
  await exec("chown", ["-R", "nobody:nogroup", home]);
  return home;
}

beforeAll(async () => {
  scratch = mkdtempSync(path.join(os.tmpdir(), "gcs-test-"));
  await fs.chmod(scratch, 0o755);
  gcs = await startFakeGcs();
  await gcs.createBucket(BUCKET);
  proxy = await startRecordingProxy(gcs.host);
  iam = await startTokenServer(`tok-${uniqueName("t").slice(2)}`);
  // What the runtime's unit sets on GCP is the real endpoint (unset); here the emulator, through the proxy.
  process.env.STORAGE_EMULATOR_HOST = proxy.host;
  // The Pulumi CLI's gs:// backend resolves credentials even for an emulator; on the VM it finds the
  // metadata server's.
  process.env.GOOGLE_OAUTH_ACCESS_TOKEN = "the-vm-token";
  squid = await isolatedSquidHost();
  host = squid.host;
  secretsRoot = path.join(host.dataDir, "tenant-secrets");
  const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  options = {
    backendUrl: `gs://${BUCKET}/state`,
    workRoot: path.join(host.dataDir, "work"),
    passphrase: "integration-test",
  };
  spec = {
    projectId,
    ownerId: "owner",
    mode: "local",
    image,
    subnet: "10.248.21.0/24",
    sshHostPort: 28121,
    allowlist: ["allowed.sandbox.test"],
    backupIntervalSeconds: 3600,
    host: {
      squidPort: host.squidPort,
      squidConfigFile: squidPaths(host).config,
      squidFragmentsDir: squidPaths(host).fragmentsDir,
      backupRoot: path.join(host.dataDir, "backups"),
    },
  };
  tokens = new TenantTokens(
    {
      project: GCP_PROJECT,
      projectServiceAccount: PROJECT_SERVICE_ACCOUNT,
      source: hostTokenSource(),
      endpoint: iam.endpoint,
    },
    secretsRoot,
  );
}, 600_000);

afterAll(async () => {
  await destroyTenant(projectId, options).catch(() => undefined);
  process.env = savedEnv;
  await squid?.stop();
  await proxy?.stop();
  await iam?.stop();
  await gcs?.stop();
  await fs.rm(scratch, { recursive: true, force: true });
}, 300_000);

const stateObjects = async () =>
  (await gcs.list(BUCKET, "state/")).filter((name) => name.includes(`/${stackName}`));

describe("a tenant stack with its state in gs://", () => {
  it("is created: the checkpoint is an object of the bucket, the sandbox runs", async () => {
    const started = Date.now();
    await createTenant(spec, options);
    const checkpoint = `state/.pulumi/stacks/${TENANT_PROJECT}/${stackName}.json`;
    expect(await gcs.list(BUCKET, checkpoint)).toContain(checkpoint);
    const deployment = JSON.parse((await gcs.read(BUCKET, checkpoint))!);
    const types = deployment.checkpoint.latest.resources.map((r: { type: string }) => r.type);
    expect(types).toContain(RESOURCE_TYPES.dockerContainer);
    expect(await docker("inspect", "-f", "{{.State.Running}}", tenantNames(projectId).container)).toBe(
      "true",
    );
    // Every state request went to the emulator (through the proxy), none elsewhere.
    expect(
      proxy.requests.some(
        (r) => r.url.includes(encodeURIComponent(checkpoint)) || r.url.includes(checkpoint),
      ),
    ).toBe(true);
    console.log(`create with gs:// state: ${Date.now() - started} ms`);
  }, 300_000);

  it("is updated: a stop is recorded in the bucket's checkpoint and history", async () => {
    const before = await gcs.read(BUCKET, `state/.pulumi/stacks/${TENANT_PROJECT}/${stackName}.json`);
    await upTenant({ ...spec, running: false }, options, true);
    const after = await gcs.read(BUCKET, `state/.pulumi/stacks/${TENANT_PROJECT}/${stackName}.json`);
    expect(after).not.toBe(before);
    expect(await docker("inspect", "-f", "{{.State.Running}}", tenantNames(projectId).container)).toBe(
      "false",
    );
    expect(
      (await gcs.list(BUCKET, `state/.pulumi/history/${TENANT_PROJECT}/${stackName}/`)).length,
    ).toBeGreaterThan(0);
    await upTenant(spec, options, true); // running again, for the backups below
  }, 300_000);
});

describe("backups under the tenant's prefix, with the tenant's own token", () => {
  const files = {
    "notes.md": "# notes\n",
    "src/app/main.ts": "console.log(1);\n",
    ".bashrc": "export A=1\n",
  };

  it("the runtime mints the token by impersonation: VM account → Project Service account → tenant's account", async () => {
    await tokens.renew(projectId);
    const minted = iam.minted.at(-1)!;
    expect(minted.target).toBe(
      `${tenantNames(projectId).serviceAccountId}@${GCP_PROJECT}.iam.gserviceaccount.com`,
    );
    expect(minted.delegates).toEqual([`projects/-/serviceAccounts/${PROJECT_SERVICE_ACCOUNT}`]);
    expect(minted.authorization).toBe("Bearer the-vm-token");
    const file = tenantTokenPath(secretsRoot, projectId);
    expect((await fs.stat(file)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await fs.readFile(file, "utf8")).access_token).toBe(minted.accessToken);
  });

  it("sandbox-backup once writes the home under projects/<id>/workspace/, every request with that token", async () => {
    const token = iam.minted.at(-1)!.accessToken;
    const home = await makeHome(files);
    const seen = proxy.requests.length;
    const result = await backup(["once"], home);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(await gcs.list(BUCKET, prefix)).toEqual(
      Object.keys(files)
        .map((name) => `${prefix}workspace/${name}`)
        .sort(),
    );
    const requests = proxy.requests.slice(seen);
    expect(requests.length).toBeGreaterThan(0);
    for (const request of requests) {
      expect(request.authorization).toBe(`Bearer ${token}`);
      // Each object named in a request is the tenant's (what the IAM condition would check).
      const names = [...request.url.matchAll(/(?:\/o\/|[?&]name=|[?&]prefix=)([^?&]+)/g)].map((m) => m[1]!);
      expect(names.length).toBeGreaterThan(0);
      for (const name of names) expect(`${name}/`.startsWith(prefix) || name.startsWith(prefix)).toBe(true);
    }
  }, 120_000);

  it("restore copies the backup into an empty home", async () => {
    const home = await makeHome({});
    const result = await backup(["restore"], home);
    expect(result.code).toBe(0);
    for (const [name, content] of Object.entries(files))
      expect(await fs.readFile(path.join(home, name), "utf8")).toBe(content);
  }, 120_000);

  it("an expired token is refused naming the file; the renewed one is used", async () => {
    iam.lifetimeSeconds = -60;
    await tokens.renew(projectId);
    const home = await makeHome({ ...files, "late.txt": "late\n" });
    const expired = await backup(["once"], home);
    expect(expired.code).toBe(1);
    expect(expired.stderr).toMatch(/GCS token in .*gcs-token\.json expired/);
    iam.lifetimeSeconds = undefined;
    const failures = await tokens.renewDue([projectId]); // what the reconciler's renewal loop does
    expect(failures).toEqual({});
    const renewed = await backup(["once"], home);
    expect(renewed.code).toBe(0);
    expect(await gcs.list(BUCKET, `${prefix}workspace/late.txt`)).toEqual([`${prefix}workspace/late.txt`]);
  }, 120_000);

  it("a token that expires in the middle of a sync: that rclone run fails, the renewed token finishes the backup", async () => {
    await tokens.renew(projectId);
    const tokenOf = async () =>
      (
        JSON.parse(await fs.readFile(tenantTokenPath(secretsRoot, projectId), "utf8")) as {
          access_token: string;
        }
      ).access_token;
    const first = await tokenOf();
    const names = Array.from({ length: 12 }, (_, i) => `mid/file-${String(i).padStart(2, "0")}.txt`);
    const home = await makeHome(Object.fromEntries(names.map((name) => [name, `${name}\n`])));
    // GCS takes the first token for two uploads; then it has expired (401), and the platform renews the file, as
    // its renewal loop would while the sync runs.
    let uploads = 0;
    let renewal: Promise<unknown> | undefined;
    proxy.refuse = async (request) => {
      if (request.authorization !== `Bearer ${first}`) return undefined;
      if (request.method === "POST" && request.url.includes("/upload/") && ++uploads <= 2) return undefined;
      if (uploads <= 2) return undefined;
      renewal ??= tokens.renew(projectId);
      await renewal;
      return 401;
    };
    const seen = proxy.requests.length;
    let result: Awaited<ReturnType<typeof backup>>;
    try {
      result = await backup(["once"], home);
    } finally {
      proxy.refuse = undefined;
    }
    const second = await tokenOf();
    expect(second).not.toBe(first);
    expect(result.code).toBe(0);
    expect(result.stderr + result.stdout).toMatch(
      /the GCS token was renewed during a failed sync; retrying with it/,
    );
    const during = proxy.requests.slice(seen);
    expect(during.some((request) => request.authorization === `Bearer ${first}`)).toBe(true);
    expect(during.some((request) => request.authorization === `Bearer ${second}`)).toBe(true);
    expect(
      during.every((request) => [first, second].some((token) => request.authorization === `Bearer ${token}`)),
    ).toBe(true);
    expect(await gcs.list(BUCKET, `${prefix}workspace/mid/`)).toEqual(
      names.map((name) => `${prefix}workspace/${name}`),
    );
  }, 120_000);

  it("a bucket that does not exist fails the backup, naming it", async () => {
    const home = await makeHome({ "a.txt": "a\n" });
    const result = await backup(["once"], home, `:gcs:no-such-bucket-${projectId}/${prefix}workspace`);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      new RegExp(`no-such-bucket-${projectId}|bucket.*(not exist|not found)|404`, "i"),
    );
  }, 120_000);
});

describe("deleting the tenant", () => {
  it("destroys the stack, purges its state and empties projects/<id>/; a neighbour's prefix is untouched", async () => {
    // proj-1 vs proj-10: an object of a tenant whose id extends this one's.
    const neighbour = `projects/${projectId}0/workspace/keep.txt`;
    const upload = await fetch(
      `${gcs.endpoint}/upload/storage/v1/b/${BUCKET}/o?uploadType=media&name=${encodeURIComponent(neighbour)}`,
      { method: "POST", body: "neighbour\n" },
    );
    expect(upload.ok).toBe(true);
    expect((await stateObjects()).length).toBeGreaterThan(0);
    // The reconciler's delete: destroy (the sandbox and its daemon go first), then the prefix.
    expect(await destroyTenant(projectId, options)).toBe("deleted");
    const storage = { client: new GcsClient(hostTokenSource(), gcsEndpoint()), bucket: BUCKET };
    expect(await purgeTenantObjects(storage, projectId)).toBe(12); // the last sync mirrored a home of only the 12 files of mid/
    expect(await gcs.list(BUCKET, prefix)).toEqual([]);
    expect(await stateObjects()).toEqual([]);
    expect(await gcs.list(BUCKET, neighbour)).toEqual([neighbour]);
    expect(await tenantLeftovers(host, projectId)).toEqual([]);
    // A second delete finds nothing and changes nothing.
    expect(await destroyTenant(projectId, options)).toBe("absent");
    expect(await purgeTenantObjects(storage, projectId)).toBe(0);
  }, 300_000);

  it("a purge of a bucket that does not exist fails naming it", async () => {
    const storage = { client: new GcsClient(hostTokenSource(), gcsEndpoint()), bucket: "no-such-bucket" };
    await expect(purgeTenantObjects(storage, projectId)).rejects.toThrow(/gs:\/\/no-such-bucket/);
  });
});
