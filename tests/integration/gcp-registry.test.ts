// Snapshots on the GCP target (issue 21): pushed to and pulled from Artifact Registry with a token of the
// Project Service account (user `oauth2accesstoken`), minted by impersonation with the VM's token, and a
// deleted tenant's package deleted through the Artifact Registry API with it. The runtime's own code paths
// (snapshotOptions of a gcp config, takeSnapshot, ensureImage, deleteAllSnapshots) with only the endpoints
// moved: a real registry (Debian's docker-registry) behind a proxy that, as Artifact Registry does, answers 401
// with a Basic challenge until the right credentials come; IAM Credentials' and Artifact Registry's APIs are
// loopback stand-ins that record each call (neither can run here).
import { execFile } from "node:child_process";
import { createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { imageRegistry, registryInstance, stopRegistry } from "../../lib/host/registry.js";
import { authFor, deleteArtifactPackage } from "../../runtime/gcp/registry.js";
import { snapshotOptions } from "../../runtime/tenants/config.js";
import { deleteAllSnapshots, ensureImage, takeSnapshot } from "../../runtime/tenants/snapshots.js";
import { parseStackConfig } from "../../stacks/config.js";
import { startTokenServer, type TokenServer } from "../helpers/fake-gcs.js";
import { freePort } from "../helpers/host.js";
import { testDatabase, type TestDatabase } from "../helpers/postgres.js";

const exec = promisify(execFile);
const PROJECT = "sandbox-prod";
const PROJECT_SERVICE = `project-service-sa@${PROJECT}.iam.gserviceaccount.com`;
const TENANT = "6a1f0c3e-2b4d-4e8f-9a7b-1c2d3e4f5a6b";
const dir = mkdtempSync(path.join(os.tmpdir(), "gcp-registry-"));
const docker = new Docker();
let database: TestDatabase;
let iam: TokenServer;
let registryPort: number;
let proxy: Server;
let proxyHost: string;
let artifactRegistry: Server;
let artifactEndpoint: string;
/** Authorization headers the registry proxy saw (the engine's), and the API calls Artifact Registry got. */
const seenByRegistry: (string | undefined)[] = [];
const apiCalls: { method: string; path: string; authorization: string | undefined }[] = [];
/** Packages the Artifact Registry stand-in holds. */
const packages = new Set<string>();
let env: NodeJS.ProcessEnv;

const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
};

/** The token the last push or pull had to carry: the Project Service account's newest from IAM. */
const projectServiceToken = () => iam.minted.filter((m) => m.target === PROJECT_SERVICE).at(-1)?.accessToken;

beforeAll(async () => {
  database = await testDatabase("pglite", { under: dir });
  const user = "0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e";
  await database.db.query(
    "insert into users (id, email, password_hash) values ($1, 'registry@example.test', 'x')",
    [user],
  );
  await database.db.query(
    "insert into tenants (project_id, owner_id, spec, state) values ($1, $2, '{}', 'running')",
    [TENANT, user],
  );
  await database.db.query(
    "insert into projects (id, user_id, name, ssh_private_key) values ($1, $2, 'registry', 'x')",
    [TENANT, user],
  );
  iam = await startTokenServer("registry-test");
  registryPort = await freePort();
  const hostDirs = {
    configDir: path.join(dir, "etc"),
    dataDir: path.join(dir, "data"),
    logDir: path.join(dir, "log"),
    runDir: path.join(dir, "run"),
  };
  await imageRegistry({ port: registryPort, ...hostDirs }).ensure(() => undefined);
  // Artifact Registry's Docker endpoint: Basic auth of oauth2accesstoken with a current token, or 401.
  proxy = createServer((req, res) => {
    seenByRegistry.push(req.headers.authorization);
    const expected = `Basic ${Buffer.from(`oauth2accesstoken:${projectServiceToken()}`).toString("base64")}`;
    if (req.headers.authorization !== expected) {
      res.writeHead(401, { "www-authenticate": 'Basic realm="artifact registry stand-in"' });
      res.end();
      return;
    }
    const upstream = httpRequest(
      { host: "127.0.0.1", port: registryPort, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  proxyHost = `127.0.0.1:${await listen(proxy)}`;
  // Artifact Registry's API: packages.delete, recorded.
  artifactRegistry = createServer((req, res) => {
    apiCalls.push({
      method: req.method ?? "",
      path: req.url ?? "",
      authorization: req.headers.authorization,
    });
    const name = /\/packages\/([^/?]+)$/.exec(req.url ?? "")?.[1];
    if (req.headers.authorization !== `Bearer ${projectServiceToken()}`) res.writeHead(403).end();
    else if (req.method !== "DELETE" || !name || !packages.has(decodeURIComponent(name)))
      res.writeHead(404).end();
    else {
      packages.delete(decodeURIComponent(name));
      res
        .writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify({ name: "operations/1" }));
    }
  });
  artifactEndpoint = `http://127.0.0.1:${await listen(artifactRegistry)}`;
  env = {
    GOOGLE_OAUTH_ACCESS_TOKEN: "the-vm-token",
    AGENT_SANDBOX_IAMCREDENTIALS_ENDPOINT: iam.endpoint,
    AGENT_SANDBOX_REGISTRY_HOST: proxyHost,
    AGENT_SANDBOX_ARTIFACTREGISTRY_ENDPOINT: artifactEndpoint,
  };
  // The tenant's container, as small as a container gets: an empty image, never started.
  await exec("sh", ["-c", "tar -cf - -T /dev/null | docker import - agent-sandbox-test/empty:registry"]);
  await docker.createContainer({
    name: tenantNames(TENANT).container,
    Image: "agent-sandbox-test/empty:registry",
    Cmd: ["/none"],
    Labels: { "dev.agent-sandbox.tenant": TENANT },
  });
}, 120_000);

afterAll(async () => {
  await docker
    .getContainer(tenantNames(TENANT).container)
    .remove({ force: true })
    .catch(() => undefined);
  const images = await docker.listImages({ filters: { reference: [`${proxyHost}/*/*/*`] } }).catch(() => []);
  for (const image of images)
    await docker
      .getImage(image.Id)
      .remove({ force: true })
      .catch(() => undefined);
  await docker
    .getImage("agent-sandbox-test/empty:registry")
    .remove({ force: true })
    .catch(() => undefined);
  await stopRegistry(
    registryInstance({
      port: registryPort,
      configDir: path.join(dir, "etc"),
      dataDir: path.join(dir, "data"),
      logDir: path.join(dir, "log"),
      runDir: path.join(dir, "run"),
    }),
  );
  proxy?.close();
  artifactRegistry?.close();
  await iam?.stop();
  await database?.close();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

const config = () =>
  parseStackConfig(
    {
      "agent-sandbox:target": "gcp",
      "agent-sandbox:host": { dataDir: path.join(dir, "data") },
      "agent-sandbox:gcp": {
        project: PROJECT,
        bucket: "sandbox-prod-data",
        domain: "sandboxes.example.test",
      },
    },
    "Pulumi.gcp.yaml",
  );

describe("snapshots in Artifact Registry, with the Project Service account's token", () => {
  it("a snapshot is pushed with oauth2accesstoken and a token minted through the VM's own", async () => {
    const options = snapshotOptions(config(), env);
    expect(options.repository).toBe(`${proxyHost}/${PROJECT}/sandboxes`);
    const before = iam.minted.length;
    const snapshot = await takeSnapshot(database.db, docker, TENANT, options);
    expect(snapshot.image).toBe(`${proxyHost}/${PROJECT}/sandboxes/${TENANT}:${snapshot.tag}`);
    expect(snapshot.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    // One token, the Project Service account's, asked for with the VM's token and no delegate.
    expect(iam.minted.slice(before)).toEqual([
      expect.objectContaining({
        target: PROJECT_SERVICE,
        delegates: [],
        authorization: "Bearer the-vm-token",
      }),
    ]);
    // The engine was challenged, then came back with exactly those credentials.
    const token = projectServiceToken()!;
    expect(seenByRegistry).toContain(undefined);
    expect(seenByRegistry).toContain(`Basic ${Buffer.from(`oauth2accesstoken:${token}`).toString("base64")}`);
    packages.add(TENANT);
  });

  it("without the credentials the registry refuses the push, and nothing is left half-made", async () => {
    const options = { ...snapshotOptions(config(), env), registryAuth: undefined };
    const tagsBefore = (await docker.listImages())
      .flatMap((i) => i.RepoTags ?? [])
      .filter((t) => t.startsWith(proxyHost));
    await expect(takeSnapshot(database.db, docker, TENANT, options)).rejects.toThrow(
      /pushing snapshot .* failed/,
    );
    const tagsAfter = (await docker.listImages())
      .flatMap((i) => i.RepoTags ?? [])
      .filter((t) => t.startsWith(proxyHost));
    expect(tagsAfter.sort()).toEqual(tagsBefore.sort());
  });

  it("a restore on a host without the image pulls it with the same credentials", async () => {
    const options = snapshotOptions(config(), env);
    const { rows } = await database.db.query<{ image: string }>(
      "select image from snapshots where project_id = $1",
      [TENANT],
    );
    const image = rows[0]!.image;
    await docker.getImage(image).remove({ force: true });
    seenByRegistry.length = 0;
    await ensureImage(docker, image, options.registryAuth);
    expect((await docker.getImage(image).inspect()).Id).toMatch(/^sha256:/);
    expect(seenByRegistry.at(-1)).toBe(
      `Basic ${Buffer.from(`oauth2accesstoken:${projectServiceToken()}`).toString("base64")}`,
    );
  });

  it("the token goes to its own registry only", async () => {
    const auth = await snapshotOptions(config(), env).registryAuth!();
    expect(authFor(`${proxyHost}/${PROJECT}/sandboxes/x:1`, auth)).toBe(auth);
    expect(authFor("docker.io/library/debian:12", auth)).toBeUndefined();
    expect(authFor(`${proxyHost}.evil.example/x:1`, auth)).toBeUndefined();
  });

  it("deleting the tenant deletes its package through the Artifact Registry API; again, it is already gone", async () => {
    const options = snapshotOptions(config(), env);
    apiCalls.length = 0;
    await deleteAllSnapshots(database.db, docker, TENANT, options);
    expect(apiCalls).toEqual([
      {
        method: "DELETE",
        path: `/v1/projects/${PROJECT}/locations/europe-west1/repositories/sandboxes/packages/${TENANT}`,
        authorization: `Bearer ${projectServiceToken()}`,
      },
    ]);
    expect(packages.has(TENANT)).toBe(false);
    const { rows } = await database.db.query("select 1 from snapshots where project_id = $1", [TENANT]);
    expect(rows).toHaveLength(0);
    // A retried delete: the package is absent, which is fine.
    await deleteAllSnapshots(database.db, docker, TENANT, options);
    expect(apiCalls).toHaveLength(2);
  });

  it("a refused delete fails naming the package and the answer", async () => {
    await expect(
      deleteArtifactPackage(
        { project: PROJECT, location: "europe-west1", repository: "sandboxes", name: TENANT },
        async () => "not-the-project-service-token",
        artifactEndpoint,
      ),
    ).rejects.toThrow(
      `deleting the registry package projects/${PROJECT}/locations/europe-west1/repositories/sandboxes/packages/${TENANT}: 403`,
    );
    await expect(
      deleteArtifactPackage(
        { project: PROJECT, location: "europe-west1", repository: "sandboxes", name: TENANT },
        async () => "t",
        "http://127.0.0.1:1",
      ),
    ).rejects.toThrow(/cannot reach http:\/\/127\.0\.0\.1:1/);
  });
});
