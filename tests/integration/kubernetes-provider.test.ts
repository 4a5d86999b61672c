// A kubernetes project's whole life through the runtime's API and reconciler, its tenant stack applied by
// Pulumi's own Kubernetes provider (built from Go modules by scripts/setup.sh: docs/kubernetes.md, "Pulumi's
// Kubernetes provider") against the suite's cluster (kube-apiserver, controller-manager, scheduler, kwok's
// node), all on loopback. Nothing here renders or applies a manifest itself: the runtime's own user reaches the
// cluster with what the platform grants it (RuntimeClusterAccess, itself applied by a Pulumi stack through the
// same provider), and the platform runs on the local target, where a cluster of the operator's own has no
// Google identities. What it shows: the stack's state lists every object the cluster holds (uid for uid), the
// Pod runs and the API's exec reaches it, a stop scales it to nothing and keeps the home's claim, an object
// deleted out of band is found by the drift check and put back by the repair, a create that loses the cluster
// halfway waits for it, naming it, and finishes once it is back, and a delete leaves nothing.
import { execFile } from "node:child_process";
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kubernetesTenantNames } from "../../components/tenant/kubernetes/names.js";
import { tenantNames } from "../../components/tenant/names.js";
import { NOBODY_UID } from "../../lib/constants.js";
import { processAlive, waitFor } from "../../lib/process.js";
import {
  cacheRoot,
  kubernetesProviderBin,
  pinnedKubernetesProviderVersion,
  toolchain,
} from "../../lib/toolchain.js";
import { kubernetesProjects, type KubernetesProjects } from "../../runtime/kubernetes/sandbox.js";
import { kubernetesProviderPrerequisite } from "../../runtime/health.js";
import { tenantStackOptions } from "../../runtime/tenants/config.js";
import { previewFleet } from "../../runtime/tenants/fleet.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { getOperation, operationEvents, type Operation } from "../../runtime/store/operations.js";
import { TENANT_PROJECT } from "../../runtime/tenants/stack.js";
import { apiHarness, settledOperation, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import type { KubeCluster } from "../helpers/kube-apiserver.js";
import { AGENT_UID, tenantCluster, type TenantCluster } from "../helpers/kube-tenant-cluster.js";
import { testDatabase } from "../helpers/postgres.js";
import { messageOf } from "../helpers/tenant-manifests.js";
import { tcpRelay, type TcpRelay } from "../helpers/tcp-relay.js";
import { writeResourcePlugin } from "../helpers/resource-plugin.js";

const execFileAsync = promisify(execFile);
const require = createRequire(import.meta.url);

let k8sCluster: TenantCluster;
let cluster: KubeCluster;
let kubeconfigFile: string;
/** The runtime's way to the API server (its kubeconfig's server), which a test cuts: the cluster gone. */
let relay: TcpRelay;
let platform: TestPlatform;
let projects: KubernetesProjects;
let h: ApiHarness<"alice">;
let projectId: string;

/** A resource of a stack's checkpoint: a Kubernetes object's outputs are the object as the cluster answered. */
interface StateResource {
  readonly type: string;
  readonly urn: string;
  readonly inputs: { readonly version?: string };
  readonly outputs: {
    readonly apiVersion: string;
    readonly kind: string;
    readonly metadata: { readonly name: string; readonly namespace?: string; readonly uid: string };
  };
}

/** The project's tenant stack's checkpoint, as the reconciler's file backend holds it. */
function stackResources(id: string): StateResource[] {
  const file = path.join(
    platform.config.host.dataDir,
    "state",
    ".pulumi",
    "stacks",
    TENANT_PROJECT,
    `${tenantNames(id).stack}.json`,
  );
  return JSON.parse(readFileSync(file, "utf8")).checkpoint.latest.resources;
}

/** The REST path of an object the provider's state holds (its outputs carry apiVersion, kind and metadata). */
function pathOf(outputs: {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}) {
  const base = outputs.apiVersion.includes("/")
    ? `/apis/${outputs.apiVersion}`
    : `/api/${outputs.apiVersion}`;
  const kind = outputs.kind.toLowerCase();
  const plural = kind.endsWith("y") ? `${kind.slice(0, -1)}ies` : `${kind}s`;
  const namespaced = outputs.metadata.namespace ? `/namespaces/${outputs.metadata.namespace}` : "";
  return `${base}${namespaced}/${plural}/${outputs.metadata.name}`;
}

/** Every object of the project's stack is the one on the cluster (its uid), and they are these. */
async function expectStateIsCluster(id: string): Promise<StateResource[]> {
  const resources = stackResources(id);
  const objects = resources.filter((r) => r.type.startsWith("kubernetes:"));
  expect(objects.map((r) => r.type).sort()).toEqual(
    [
      "kubernetes:apps/v1:Deployment",
      "kubernetes:apps/v1:StatefulSet",
      "kubernetes:core/v1:ConfigMap",
      "kubernetes:core/v1:Namespace",
      "kubernetes:core/v1:PersistentVolumeClaim",
      "kubernetes:core/v1:ResourceQuota",
      "kubernetes:core/v1:Service",
      "kubernetes:core/v1:ServiceAccount",
      "kubernetes:networking.k8s.io/v1:NetworkPolicy",
      "kubernetes:networking.k8s.io/v1:NetworkPolicy",
      "kubernetes:networking.k8s.io/v1:NetworkPolicy",
    ].sort(),
  );
  for (const r of objects) {
    const live = await cluster.request("GET", pathOf(r.outputs));
    expect(live.status, `${r.type} ${r.outputs.metadata.name}: ${messageOf(live)}`).toBe(200);
    expect(live.body.metadata.uid, r.urn).toBe(r.outputs.metadata.uid);
  }
  return resources;
}

/** Runs `body` with the runtime's tool cache and PULUMI_HOME at `dir` (as an operator's host might have them). */
async function withCacheAt<T>(dir: string, body: () => Promise<T>): Promise<T> {
  const saved = {
    AGENT_SANDBOX_CACHE: process.env.AGENT_SANDBOX_CACHE,
    PULUMI_HOME: process.env.PULUMI_HOME,
  };
  process.env.AGENT_SANDBOX_CACHE = dir;
  process.env.PULUMI_HOME = dir;
  try {
    return await body();
  } finally {
    for (const [key, value] of Object.entries(saved))
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
  }
}

beforeAll(async () => {
  k8sCluster = await tenantCluster();
  cluster = k8sCluster.cluster;
  await k8sCluster.volumes("provider-home", 2);
  // The runtime (its client and its stacks' provider) reaches the API server through the relay.
  const direct = readFileSync(k8sCluster.kubeconfigFile, "utf8");
  const server = /server: https:\/\/127\.0\.0\.1:(\d+)/.exec(direct);
  if (!server) throw new Error(`no loopback server in ${k8sCluster.kubeconfigFile}`);
  relay = await tcpRelay({ host: "127.0.0.1", port: Number(server[1]) });
  kubeconfigFile = `${k8sCluster.kubeconfigFile}-relayed`;
  writeFileSync(kubeconfigFile, direct.replace(server[0], `server: https://127.0.0.1:${relay.port}`), {
    mode: 0o600,
  });
  platform = await testPlatform({
    subnetPool: "10.201.0.0/23",
    sshPortRange: [29330, 29335],
    kubernetes: {
      kubeconfigFile,
      runtimeClassName: "gvisor",
      homeSize: "10Gi",
      credentials: "kubeconfig",
      clusterDns: { namespace: "kube-system", podLabels: { "k8s-app": "kube-dns" } },
    },
  });
  projects = kubernetesProjects(kubeconfigFile);
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    server: { projects: { kubernetes: projects } },
  });
}, 300_000);

afterAll(async () => {
  await h?.close();
  projects?.close();
  await platform?.stop();
  await relay?.close();
  if (k8sCluster)
    for (const [name, pid] of Object.entries(await k8sCluster.stop()))
      expect(processAlive(pid), `${name} still runs`).toBe(false);
});

describe("Pulumi's Kubernetes provider as the set-up builds it", () => {
  it("serves the schema of the @pulumi/kubernetes release the tenant program is written against", async () => {
    const chain = toolchain();
    const { stdout } = await execFileAsync(
      chain.pulumiBin,
      ["package", "get-schema", kubernetesProviderBin()],
      { env: { ...process.env, ...chain.env }, maxBuffer: 64 * 1024 * 1024 },
    );
    const schema = JSON.parse(stdout) as {
      version: string;
      resources: Record<string, unknown>;
      provider: { inputProperties: Record<string, unknown> };
    };
    expect(schema.version).toBe(pinnedKubernetesProviderVersion());
    // Every resource the SDK can register is one the provider knows (the provider has a few of its own
    // overlays more: yaml, kustomize, CustomResource).
    const sdk = path.dirname(require.resolve("@pulumi/kubernetes/package.json"));
    const tokens = new Set<string>();
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        const file = path.join(dir, entry.name);
        if (entry.isDirectory()) walk(file);
        else if (entry.name.endsWith(".js"))
          for (const match of readFileSync(file, "utf8").matchAll(/__pulumiType = '([^']+)'/g))
            if (match[1] !== "kubernetes") tokens.add(match[1]!);
      }
    };
    walk(sdk);
    expect(tokens.size).toBeGreaterThan(400);
    expect([...tokens].filter((token) => !(token in schema.resources))).toEqual([]);
    expect(Object.keys(schema.provider.inputProperties)).toContain("kubeconfig");
  });
});

describe("a kubernetes project through the API, its stack applied by Pulumi's Kubernetes provider", () => {
  it("is created: the stack's state lists every object the cluster now holds, the Pod runs and exec reaches it", async () => {
    expect(existsSync(kubernetesProviderBin()), kubernetesProviderBin()).toBe(true);
    const created = await h.as("alice", "POST", "/projects", { name: "on-a-cluster", backend: "kubernetes" });
    expect(created.statusCode, created.body).toBe(202);
    projectId = created.json().project_id;
    await h.waitForStatus("alice", projectId, "running", 300_000);

    // Every object in the state is the one on the cluster (its uid), applied by the runtime's own user.
    const resources = await expectStateIsCluster(projectId);
    const provider = resources.find((r) => r.type === "pulumi:providers:kubernetes");
    expect(provider?.inputs.version).toBe(pinnedKubernetesProviderVersion());
    // No Google identity on the local target: no gcp resource, no Workload Identity annotation.
    expect(resources.filter((r) => r.type.startsWith("gcp:"))).toEqual([]);

    const view = await h.as("alice", "GET", `/projects/${projectId}`);
    expect(view.json()).toMatchObject({
      backend: "kubernetes",
      sandbox: { phase: "running", node: cluster.node },
    });
    const exec = await h.as("alice", "POST", `/projects/${projectId}/exec`, {
      command: ["sh", "-c", "echo through the provider; id -u"],
    });
    expect(exec.statusCode, exec.body).toBe(200);
    expect(exec.json()).toMatchObject({ exit_code: 0, stdout: `through the provider\n${AGENT_UID}\n` });
  });

  it("stops to no Pod with its home's claim kept, and starts again", async () => {
    const names = kubernetesTenantNames(projectId);
    const sandboxSet = `/apis/apps/v1/namespaces/${names.namespace}/statefulsets/${names.statefulSet}`;
    const claim = `/api/v1/namespaces/${names.namespace}/persistentvolumeclaims/${names.homeClaim}`;
    const claimUid = (await cluster.request("GET", claim)).body.metadata.uid;
    const written = await h.as("alice", "POST", `/projects/${projectId}/exec`, {
      command: ["sh", "-c", "mkdir -p notes && echo kept-by-the-final-backup > notes/stop.txt"],
    });
    expect(written.json(), written.body).toMatchObject({ exit_code: 0 });
    expect((await h.as("alice", "POST", `/projects/${projectId}/stop`, {})).statusCode).toBe(202);
    await h.waitForStatus("alice", projectId, "stopped", 180_000);
    expect((await cluster.request("GET", sandboxSet)).body.spec.replicas).toBe(0);
    await waitFor("the sandbox's Pod gone", 60_000, async () =>
      (await cluster.request("GET", `/api/v1/namespaces/${names.namespace}/pods/${names.pod}`)).status === 404
        ? true
        : undefined,
    );
    const kept = await cluster.request("GET", claim);
    expect(kept.body).toMatchObject({ metadata: { uid: claimUid }, status: { phase: "Bound" } });
    // The stop's final backup, taken by the runtime from outside the Pod, is in the project's directory on this
    // host (the local target's backupRoot, as a container's), owned by the user its rclone runs as.
    const backupDir = path.join(platform.config.host.dataDir, "backups", projectId);
    const status = await h.as("alice", "GET", `/projects/${projectId}/backup-status`);
    expect(status.json(), status.body).toMatchObject({
      last_result: "ok",
      last_trigger: "final",
      usage: { objects: 1, bytes: "kept-by-the-final-backup\n".length },
    });
    expect(readFileSync(path.join(backupDir, "workspace", "notes", "stop.txt"), "utf8")).toBe(
      "kept-by-the-final-backup\n",
    );
    expect(statSync(backupDir)).toMatchObject({ uid: NOBODY_UID, mode: 0o40700 });

    expect((await h.as("alice", "POST", `/projects/${projectId}/start`, {})).statusCode).toBe(202);
    await h.waitForStatus("alice", projectId, "running", 180_000);
    expect((await cluster.request("GET", sandboxSet)).body.spec.replicas).toBe(1);
    const exec = await h.as("alice", "POST", `/projects/${projectId}/exec`, { command: ["true"] });
    expect(exec.json()).toMatchObject({ exit_code: 0 });
  });

  it("is checked for drift without the engine once a clean refresh has vouched for its objects; a write to one goes back to the engine", async () => {
    const names = kubernetesTenantNames(projectId);
    const configMapUrn = stackResources(projectId).find(
      (r) => r.type === "kubernetes:core/v1:ConfigMap",
    )!.urn;
    const check = async () => {
      const op = await settledOperation(
        h.db,
        (await requestOperation(h.db, projectId, "check-drift")).operation,
      );
      expect(op, op.error ?? "").toMatchObject({ state: "succeeded" });
      return op.result as Record<string, unknown>;
    };
    // The first check since the last update: the engine's refresh, which vouches for every object it saw.
    const first = await check();
    expect(first).toMatchObject({ drifted: false, checked: "engine", vouched: 11 });
    expect(first.precheck).toMatch(/no refresh by the engine has found|the stack's checkpoint changed/);
    // Nothing written since: no engine.
    expect(await check()).toEqual({ drifted: false, changes: {}, resources: [], checked: "in-process" });
    expect((await h.as("alice", "GET", `/projects/${projectId}/drift`)).json()).toMatchObject({
      status: "clean",
      resources: [],
    });

    // A write to one object out of band (an annotation of someone else's): its resourceVersion moves, so the
    // pre-check names it and the engine decides again. To this provider another manager's annotation is no
    // drift, so that refresh vouches for the new version, and the next check needs no engine again.
    const configMap = `/api/v1/namespaces/${names.namespace}/configmaps/${names.proxy}`;
    const patched = await cluster.request(
      "PATCH",
      configMap,
      { metadata: { annotations: { "example.com/touched-by": "an operator" } } },
      "application/merge-patch+json",
    );
    expect(patched.status, messageOf(patched)).toBe(200);
    const third = await check();
    expect(third).toMatchObject({ drifted: false, checked: "engine", vouched: 11 });
    expect(third.precheck).toContain(`${configMapUrn} changed on the cluster`);
    expect(await check()).toMatchObject({ drifted: false, checked: "in-process" });
  });

  it("finds an object deleted out of band as drift, names it, and the repair puts it back", async () => {
    const names = kubernetesTenantNames(projectId);
    const policy = `/apis/networking.k8s.io/v1/namespaces/${names.namespace}/networkpolicies/${names.networkPolicy}`;
    const before = await cluster.request("GET", policy);
    expect(before.status, messageOf(before)).toBe(200);
    expect((await cluster.request("DELETE", policy)).status).toBe(200);

    const check = await requestOperation(h.db, projectId, "check-drift");
    const checked = await settledOperation(h.db, check.operation);
    expect(checked, checked.error ?? "").toMatchObject({
      state: "succeeded",
      result: { drifted: true, checked: "engine" },
    });
    // The pre-check found it gone and left the verdict to the engine; a finding of drift vouches for nothing.
    expect((checked.result as { precheck: string }).precheck).toMatch(
      /kubernetes:networking\.k8s\.io\/v1:NetworkPolicy::\S+ is gone from the cluster/,
    );
    expect(checked.result).not.toHaveProperty("vouched");
    const drift = (await h.as("alice", "GET", `/projects/${projectId}/drift`)).json();
    expect(drift).toMatchObject({ status: "drifted" });
    expect(drift.resources).toEqual([
      expect.objectContaining({ type: "kubernetes:networking.k8s.io/v1:NetworkPolicy", change: "deleted" }),
    ]);

    const repair = await requestOperation(h.db, projectId, "update", "repair-by-test");
    const repaired = await settledOperation(h.db, repair.operation);
    expect(repaired, repaired.error ?? "").toMatchObject({ state: "succeeded" });
    const after = await cluster.request("GET", policy);
    expect(after.status, messageOf(after)).toBe(200);
    expect(after.body.spec).toEqual(before.body.spec);
    expect(after.body.metadata.uid).not.toBe(before.body.metadata.uid);

    const again = await settledOperation(
      h.db,
      (await requestOperation(h.db, projectId, "check-drift")).operation,
    );
    // The repair's update changed the checkpoint: the engine again, which vouches for the objects once more.
    expect(again).toMatchObject({
      state: "succeeded",
      result: { drifted: false, checked: "engine", vouched: 11 },
    });
    expect((await h.as("alice", "GET", `/projects/${projectId}/drift`)).json()).toMatchObject({
      status: "clean",
      resources: [],
    });
  });

  it("is previewed by a rollout preview with the cluster's kubeconfig, as the reconciler gives it", async () => {
    // What `npm run preview:tenants` runs: the recorded spec through this checkout's program, read-only.
    const preview = await previewFleet(tenantStackOptions(platform.config), {
      version: "sha256:0123456789abcdef",
    });
    expect(preview.tenants).toEqual([
      expect.objectContaining({ projectId, status: "unchanged", changes: [] }),
    ]);
  });

  it("loses its cluster halfway through a create: the create waits for it, naming it, and finishes once it answers, nothing half-made", async () => {
    const created = await h.as("alice", "POST", "/projects", { name: "cut-off", backend: "kubernetes" });
    expect(created.statusCode, created.body).toBe(202);
    const cutOff: string = created.json().project_id;
    const { rows } = await h.db.query<Operation>(
      "select * from operations where project_id = $1 and kind = 'create'",
      [cutOff],
    );
    const create = rows[0]!;
    const events = async () => (await operationEvents(h.db, create.id)).map(({ event }) => event);
    // Gone once the provider has made the first object: the rest of the create meets no cluster.
    await waitFor("the create's first object made", 180_000, async () =>
      (await events()).some(
        (e) => e.type === "resource" && e.status === "done" && String(e.resource).startsWith("kubernetes:"),
      )
        ? true
        : undefined,
    );
    await relay.cut();
    try {
      // The reconciler watches the cluster while the engine runs (every 5 s): two answers in a row that it is
      // gone end the engine's run at once. Without the watch, a cut while the provider awaits an object (a
      // Deployment's rollout, a Service's endpoints) ended the attempt only when that await gave up, after up
      // to its 10 minutes (session 43's cold run); a cut between two requests of the provider's fails the
      // engine by itself at once, and the reconciler then asks.
      const waiting = await waitFor("the create waiting for its cluster", 180_000, async () =>
        (await events()).find(
          (e) =>
            e.type === "diagnostic" && String(e.message).includes("the operation runs again once it answers"),
        ),
      ).catch(async (error: Error) => {
        throw new Error(`${error.message}; its events: ${JSON.stringify(await events()).slice(-4000)}`);
      });
      const server = `the cluster's API server https://127\\.0\\.0\\.1:${relay.port}`;
      expect(String(waiting.message)).toMatch(new RegExp(`^${server} (is|was) unreachable`));
      // Where it was the watch that ended the engine, it said so, naming why, before the wait began.
      const all = await events();
      const ended = all.findIndex(
        (e) => e.type === "diagnostic" && String(e.message).includes("the engine's run is ended"),
      );
      if (ended !== -1) {
        expect(String(all[ended]!.message)).toMatch(
          new RegExp(`^${server} is unreachable .*: the engine's run is ended, to wait for the cluster$`),
        );
        expect(ended).toBeLessThan(all.findIndex((e) => e.message === waiting.message));
      }
      console.log(
        `cut-off create: ${ended === -1 ? "the engine failed by itself" : "the watch ended the engine"}; then: ${waiting.message}`,
      );
      // Still the first attempt, in flight with its lease: not failed, not given up.
      expect(await getOperation(h.db, create.id)).toMatchObject({ state: "running", attempt: 1 });
      // The cluster stays away a while (the reconciler asks after 0.5, 1 and 2 s), then comes back.
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      expect(await getOperation(h.db, create.id)).toMatchObject({ state: "running", attempt: 1 });
    } finally {
      await relay.restore();
    }

    const settled = await settledOperation(h.db, create, 300_000);
    expect(settled, settled.error ?? "").toMatchObject({ state: "succeeded", attempt: 2 });
    await h.waitForStatus("alice", cutOff, "running", 180_000);
    // Nothing half-made: every object of the stack is on the cluster, and the cluster's namespace holds no
    // other of the kinds the stack makes.
    const resources = await expectStateIsCluster(cutOff);
    const names = kubernetesTenantNames(cutOff);
    for (const [list, kind] of [
      [`/api/v1/namespaces/${names.namespace}/serviceaccounts`, "ServiceAccount"],
      [`/api/v1/namespaces/${names.namespace}/configmaps`, "ConfigMap"],
      [`/apis/apps/v1/namespaces/${names.namespace}/statefulsets`, "StatefulSet"],
      [`/apis/networking.k8s.io/v1/namespaces/${names.namespace}/networkpolicies`, "NetworkPolicy"],
    ] as const) {
      const live = (await cluster.request("GET", list)).body.items as { metadata: { uid: string } }[];
      const kept = resources
        .filter((r) => r.type.startsWith("kubernetes:") && r.outputs.kind === kind)
        .map((r) => r.outputs.metadata.uid);
      // A namespace's default ServiceAccount and root CA ConfigMap are the cluster's own.
      const own = live.filter(
        (item) => !["default", "kube-root-ca.crt"].includes((item.metadata as { name?: string }).name ?? ""),
      );
      expect(own.map((item) => item.metadata.uid).sort(), kind).toEqual(kept.sort());
    }
    const exec = await h.as("alice", "POST", `/projects/${cutOff}/exec`, { command: ["true"] });
    expect(exec.json(), exec.body).toMatchObject({ exit_code: 0 });

    expect((await h.as("alice", "DELETE", `/projects/${cutOff}`)).statusCode).toBe(202);
    await waitFor("the cut-off project gone", 180_000, async () =>
      (await h.as("alice", "GET", `/projects/${cutOff}`)).statusCode === 404 ? true : undefined,
    );
    expect(() => stackResources(cutOff)).toThrow(/ENOENT/);
  }, 1_200_000);

  it("is refused, named, when the provider is not installed: /healthz says where it looked, a create records nothing", async () => {
    const nowhere = mkdtempSync(path.join(os.tmpdir(), "no-provider-"));
    const before = (await h.as("alice", "GET", "/projects")).json().projects.length;
    try {
      const env = { ...process.env, AGENT_SANDBOX_CACHE: nowhere, PULUMI_HOME: nowhere };
      const check = await kubernetesProviderPrerequisite(env).probe();
      const version = pinnedKubernetesProviderVersion();
      expect(check).toMatchObject({ name: "kubernetes-provider", ready: false });
      expect(check.detail).toContain(
        `Pulumi's Kubernetes provider v${version} is not installed (looked at ${nowhere}/`,
      );
      expect(check.detail).toContain(`plugin install resource kubernetes ${version}`);
      const refused = await withCacheAt(nowhere, () =>
        h.as("alice", "POST", "/projects", { name: "no-provider", backend: "kubernetes" }),
      );
      expect(refused.statusCode, refused.body).toBe(409);
      expect(refused.json().message).toBe(check.detail);
    } finally {
      rmSync(nowhere, { recursive: true, force: true });
    }
    expect((await h.as("alice", "GET", "/projects")).json().projects).toHaveLength(before);
    expect(await kubernetesProviderPrerequisite().probe()).toMatchObject({ ready: true });
  });

  it("is refused, named, when the provider reports another version: the operation asked before it was known fails naming it before its engine starts, then /healthz and a create name it", async () => {
    // A cache like the machine's (the same Pulumi CLI and tools, linked), whose Kubernetes provider is a real
    // Pulumi plugin of another version.
    const real = cacheRoot();
    const other = mkdtempSync(path.join(os.tmpdir(), "other-provider-"));
    for (const entry of readdirSync(real))
      if (!entry.startsWith("pulumi-kubernetes-v"))
        symlinkSync(path.join(real, entry), path.join(other, entry));
    const env = { ...process.env, AGENT_SANDBOX_CACHE: other, PULUMI_HOME: other };
    const bin = kubernetesProviderBin(env);
    writeResourcePlugin(bin, { versioned: "4.0.1" });
    const version = pinnedKubernetesProviderVersion();
    const problem =
      `Pulumi's Kubernetes provider at ${bin} reports v4.0.1 where v${version} is pinned (package.json's ` +
      "@pulumi/kubernetes)";
    let admitted: string | undefined;
    try {
      await withCacheAt(other, async () => {
        // Not asked yet since it changed: admitted, and its operation asks before anything is applied.
        const created = await h.as("alice", "POST", "/projects", {
          name: "other-provider",
          backend: "kubernetes",
        });
        expect(created.statusCode, created.body).toBe(202);
        admitted = created.json().project_id as string;
        const { rows } = await h.db.query<Operation>(
          "select * from operations where project_id = $1 and kind = 'create'",
          [admitted],
        );
        const failed = await settledOperation(h.db, rows[0]!, 180_000);
        expect(failed).toMatchObject({ state: "failed", attempt: 1 });
        expect(failed.error).toContain(problem);
        // Nothing of it was made: no namespace on the cluster.
        const names = kubernetesTenantNames(admitted);
        expect((await cluster.request("GET", `/api/v1/namespaces/${names.namespace}`)).status).toBe(404);

        const check = await kubernetesProviderPrerequisite().probe();
        expect(check).toMatchObject({ name: "kubernetes-provider", ready: false });
        expect(check.detail).toContain(problem);
        expect(check.detail).toContain(`plugin install resource kubernetes ${version}`);
        const refused = await h.as("alice", "POST", "/projects", {
          name: "other-again",
          backend: "kubernetes",
        });
        expect(refused.statusCode, refused.body).toBe(409);
        expect(refused.json().message).toBe(check.detail);
      });
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
    expect(await kubernetesProviderPrerequisite().probe()).toMatchObject({ ready: true });
    // With the pinned provider back, the failed project is deleted like any other.
    expect((await h.as("alice", "DELETE", `/projects/${admitted}`)).statusCode).toBe(202);
    await waitFor("the failed project gone", 180_000, async () =>
      (await h.as("alice", "GET", `/projects/${admitted}`)).statusCode === 404 ? true : undefined,
    );
  });

  it("is deleted: its namespace and everything in it go, and so does its stack", async () => {
    const names = kubernetesTenantNames(projectId);
    const deleted = await h.as("alice", "DELETE", `/projects/${projectId}`);
    expect(deleted.statusCode, deleted.body).toBe(202);
    await waitFor("the project gone", 180_000, async () =>
      (await h.as("alice", "GET", `/projects/${projectId}`)).statusCode === 404 ? true : undefined,
    );
    await waitFor("the namespace gone", 120_000, async () =>
      (await cluster.request("GET", `/api/v1/namespaces/${names.namespace}`)).status === 404
        ? true
        : undefined,
    );
    expect(() => stackResources(projectId)).toThrow(/ENOENT/);
  });
});
