// Issue 48: a kubernetes project through the runtime's API, its tenant stack applied by Pulumi's Kubernetes
// provider, on the cluster's real node (tests/helpers/kube-node.ts) rather than kwok's: the sandbox image runs as
// the tenant's StatefulSet renders it — no root, every capability dropped, the home a claimed volume, the image's
// supervisor under the Pod's own user — and the tenant's egress proxy runs the image's Squid in a Pod of its own.
// The tenant asks for the node by its RuntimeClass alone (its scheduling puts the Pod there), as a GKE Sandbox
// tenant asks for gVisor's. What kwok never showed: the Pod becomes Ready by its own readiness probe (the image's
// healthcheck), the runtime's exec and terminal reach a real container, and a stop and a start keep the home.
import * as fs from "node:fs/promises";
import type { AddressInfo } from "node:net";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kubernetesTenantNames } from "../../components/tenant/kubernetes/names.js";
import { processAlive, waitFor } from "../../lib/process.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import { KubernetesSshGateway } from "../../runtime/kubernetes/ssh-gateway.js";
import { kubernetesProjects, type KubernetesProjects } from "../../runtime/kubernetes/sandbox.js";
import { SecretBox } from "../../runtime/secrets.js";
import { apiHarness, emailOf, PASSWORD, type ApiHarness } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import type { KubeCluster } from "../helpers/kube-apiserver.js";
import { REAL_NODE } from "../helpers/kube-node.js";
import {
  REAL_NODE_RUNTIME_CLASS,
  tenantCluster,
  type TenantCluster,
} from "../helpers/kube-tenant-cluster.js";
import { testDatabase } from "../helpers/postgres.js";
import { developerRepo, hostGit, HostTmux, sbx, SBX, sbxServePage } from "../helpers/sbx.js";
import { curl } from "../helpers/curl.js";

/** The node's Pods' subnet, and the host's address on their bridge (the CNI bridge's gateway). */
const POD_SUBNET = "10.196.0.0/24";
const POD_BRIDGE_ADDRESS = "10.196.0.1";

let k8sCluster: TenantCluster;
let cluster: KubeCluster;
let platform: TestPlatform;
let projects: KubernetesProjects;
let h: ApiHarness<"alice">;
let projectId: string;
let gateway: KubernetesSshGateway;
let base: string;
let work: string;
let alice: string;
let repo: string;
const tmux = new HostTmux();
const git = (cwd: string, ...args: string[]) => hostGit(cwd, args);

beforeAll(async () => {
  k8sCluster = await tenantCluster({ realNode: { podSubnet: POD_SUBNET } });
  cluster = k8sCluster.cluster;
  await k8sCluster.volumes("real-home", 2);
  platform = await testPlatform(
    {
      subnetPool: "10.197.0.0/23",
      sshPortRange: [29710, 29715],
      kubernetes: {
        kubeconfigFile: k8sCluster.kubeconfigFile,
        runtimeClassName: REAL_NODE_RUNTIME_CLASS,
        homeSize: "10Gi",
        credentials: "kubeconfig",
        clusterDns: { namespace: "kube-system", podLabels: { "k8s-app": "kube-dns" } },
        // The host reaches the node's Pods from its address on their bridge: the front door's, to each Pod.
        frontDoorFrom: [`${POD_BRIDGE_ADDRESS}/32`],
      },
    },
    // The API on a port of its own (the front door's forward-auth asks it there; the terminal's URL names it).
    { frontDoor: true },
  );
  // The node's containerd has no registry: the platform's sandbox image is copied in from Docker.
  await cluster.realNode!.importImage(platform.config.tenants.image);
  projects = kubernetesProjects(k8sCluster.kubeconfigFile);
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    // The terminal proxy attaches as runtime/main.ts has it: by the project's recorded backend, here the cluster.
    terminal: {
      attacher: {
        attach: (id, session) =>
          platformBackends({
            docker: () => {
              throw new Error("not a container");
            },
            kubernetes: projects,
          })
            .attacher(h.db)
            .attach(id, session),
      },
    },
    server: { projects: { kubernetes: projects } },
  });
  // SSH to the Pods, which run no sshd: the runtime's gateway, on each project's own port (runtime/main.ts).
  gateway = new KubernetesSshGateway({
    db: h.db,
    box: SecretBox.fromDataDir(platform.config.host.dataDir),
    exec: projects.exec,
    bindAddress: "127.0.0.1",
  });
  await gateway.start();
  await h.app.listen({ host: "127.0.0.1", port: platform.config.runtime.apiPort });
  base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  ({ work, alice, repo } = await developerRepo("sbx-k8s-"));
}, 600_000);

afterAll(async () => {
  await tmux.stop();
  await gateway?.close();
  await h?.close();
  projects?.close();
  await platform?.stop();
  if (work) await fs.rm(work, { recursive: true, force: true });
  if (k8sCluster)
    for (const [name, pid] of Object.entries(await k8sCluster.stop()))
      expect(processAlive(pid), `${name} still runs`).toBe(false);
}, 180_000);

describe("a kubernetes project on a real node", () => {
  it("is created through the API: its Pod runs the image on the node, Ready by the image's own healthcheck, and exec reaches it", async () => {
    const created = await h.as("alice", "POST", "/projects", {
      name: "on-a-real-node",
      backend: "kubernetes",
    });
    expect(created.statusCode, created.body).toBe(202);
    projectId = created.json().project_id;
    await h.waitForStatus("alice", projectId, "running", 420_000);
    const view = await h.as("alice", "GET", `/projects/${projectId}`);
    expect(view.json()).toMatchObject({
      backend: "kubernetes",
      sandbox: { phase: "running", node: REAL_NODE },
    });

    const exec = await h.as("alice", "POST", `/projects/${projectId}/exec`, {
      command: ["sh", "-c", "id -u; hostname; cat /proc/1/cmdline | tr '\\0' ' '; echo; ls -d /home/agent"],
    });
    expect(exec.statusCode, exec.body).toBe(200);
    const [uid, hostname, init, home] = (exec.json().stdout as string).split("\n");
    expect(uid).toBe("1000");
    expect(hostname).toMatch(/-0$/);
    // The image's own init, not kwok's process on the host.
    expect(init).not.toBe("");
    expect(home).toBe("/home/agent");

    // The sandbox Pod admits the front door's address alone, on its agent's ports (tenants.kubernetes.frontDoorFrom).
    const { namespace, networkPolicy } = kubernetesTenantNames(projectId);
    const policy = await cluster.request(
      "GET",
      `/apis/networking.k8s.io/v1/namespaces/${namespace}/networkpolicies/${networkPolicy}`,
    );
    expect(policy.body.spec.ingress).toEqual([
      {
        from: [{ ipBlock: { cidr: `${POD_BRIDGE_ADDRESS}/32` } }],
        ports: [{ protocol: "TCP", port: 1024, endPort: 65535 }],
      },
    ]);
  });

  it("is deleted: its namespace goes, and the node runs nothing of it", async () => {
    // The node is this machine (2 CPUs): a tenant holds 1 of them by its requests, the next one needs it back.
    const { namespace } = kubernetesTenantNames(projectId);
    expect((await h.as("alice", "DELETE", `/projects/${projectId}`)).statusCode).toBe(202);
    await h.waitForStatus("alice", projectId, "gone", 300_000);
    expect((await cluster.request("GET", `/api/v1/namespaces/${namespace}`)).status).toBe(404);
    const pods = await cluster.request("GET", `/api/v1/pods?fieldSelector=spec.nodeName%3D${REAL_NODE}`);
    expect(pods.body.items).toEqual([]);
  });
});

describe("the developer's workflow (sbx) on a kubernetes project", () => {
  let sbxProject: string;

  it("logs in and starts: the repository is pushed into the Pod's /workspace through the SSH gateway", async () => {
    const login = await sbx(
      alice,
      work,
      ["login", "--api", base, "--email", emailOf("alice"), "--password-stdin"],
      {
        input: `${PASSWORD}\n`,
      },
    );
    expect(login.code, login.stderr).toBe(0);
    // The platform's default is a container: the developer asks for the cluster.
    const started = await sbx(alice, repo, ["start", "--backend", "kubernetes", "--json"], {
      timeoutMs: 400_000,
    });
    expect(started.code, started.stderr + started.stdout).toBe(0);
    const result = started.json<{ project_id: string; workspace: string; pushed: string[] }>();
    sbxProject = result.project_id;
    expect(result.workspace).toBe("/workspace/app");
    expect(result.pushed).toEqual(["main"]);
    const view = await h.as("alice", "GET", `/projects/${sbxProject}`);
    expect(view.json()).toMatchObject({ backend: "kubernetes", sandbox: { node: REAL_NODE } });
    const inside = await h.as("alice", "POST", `/projects/${sbxProject}/exec`, {
      command: ["sh", "-c", "cd /workspace/app && git log -1 --format=%s && cat README.md"],
    });
    expect(inside.json()).toMatchObject({ exit_code: 0, stdout: "first\n# app\n" });
  }, 480_000);

  it("attaches: what is typed runs in the Pod's terminal, in the repository", async () => {
    await tmux.open("M", `XDG_CONFIG_HOME=${alice} ${SBX} attach`, repo);
    await tmux.waitFor("M", /agent@[^\n]*\$\s*$/m);
    await tmux.send("M", "cd /workspace/app && echo typed-$((6*7)) && hostname", "Enter");
    // The hostname's line (the Pod's, its StatefulSet's `-0`) after the echo's: waiting for the echo alone read
    // the screen before the hostname was printed once (a full run, session 60).
    await tmux.waitFor("M", /typed-42\n\S+-0\n/);
  });

  it("a commit inside comes back with sbx sync under sandbox/<branch>", async () => {
    const commit = await h.as("alice", "POST", `/projects/${sbxProject}/exec`, {
      command: [
        "sh",
        "-c",
        "cd /workspace/app && echo inside > inside.txt && git add inside.txt && git commit -q -m 'made inside' && git rev-parse HEAD",
      ],
    });
    expect(commit.json().exit_code, commit.body).toBe(0);
    const head = (commit.json().stdout as string).trim();
    const synced = await sbx(alice, repo, ["sync", "--json"]);
    expect(synced.code, synced.stderr).toBe(0);
    expect(git(repo, "rev-parse", "sandbox/main")).toBe(head);
    expect(git(repo, "log", "-1", "--format=%s", "sandbox/main")).toBe("made inside");
  });

  it("a worktree of its own, and .env pushed into the repository, never committed", async () => {
    const added = await sbx(alice, repo, ["worktree", "add", "wt-a", "--json"]);
    expect(added.code, added.stderr).toBe(0);
    expect(added.json()).toMatchObject({ name: "wt-a", path: "/workspace/app/.worktrees/wt-a" });
    await fs.writeFile(path.join(repo, ".env"), "SBX_DOTENV=from-dotenv\n");
    const pushed = await sbx(alice, repo, ["env", "push", "--json"]);
    expect(pushed.code, pushed.stderr).toBe(0);
    const files = await h.as("alice", "POST", `/projects/${sbxProject}/exec`, {
      command: [
        "sh",
        "-c",
        "cd /workspace/app && stat -c '%a %n' .env && git status --porcelain | grep -c env || true; git worktree list | wc -l",
      ],
    });
    expect(files.json().stdout).toBe("600 .env\n0\n2\n");
  });

  it("a dev server in the worktree is found in the Pod, and sbx open reaches it through the front door at the Pod's address", async () => {
    const page = `a dev server of ${sbxProject} in its Pod`;
    const served = await sbxServePage(alice, repo, "/workspace/app/.worktrees/wt-a", page, 3002);
    expect(served.code, served.stderr).toBe(0);
    await waitFor("the Pod's dev server", 30_000, async () => {
      const answer = await h.as("alice", "POST", `/projects/${sbxProject}/exec`, {
        command: ["sh", "-c", "curl -s -m 2 http://127.0.0.1:3002/ || true"],
      });
      return (answer.json().stdout as string).includes(page) ? true : undefined;
    });
    // Read inside the Pod (its kernel's sockets, its process's working directory), with the Pod's own address.
    const ports = await sbx(alice, repo, ["ports", "--json"]);
    expect(ports.code, ports.stderr).toBe(0);
    const found = ports.json<{
      dev_servers: { port: number; worktree: string | null; reachable: boolean; url: string | null }[];
    }>().dev_servers;
    expect(found).toEqual([
      expect.objectContaining({ port: 3002, worktree: "wt-a", reachable: true, url: expect.any(String) }),
    ]);
    const opened = await sbx(alice, repo, ["open", "--worktree", "wt-a", "--json"]);
    expect(opened.code, opened.stderr).toBe(0);
    const session = opened.json<{ port: number; url: string; front_door_url: string }>();
    expect(session.port).toBe(3002);
    expect(session.front_door_url).toMatch(/^http:\/\/wt-a\.[a-z0-9-]+\.sandbox\.localhost:\d+\/$/);
    const jar = path.join(work, "front-door-jar");
    expect(await curl(session.url, "-L", "-c", jar, "-b", jar)).toEqual({ status: 200, body: `${page}\n` });
    expect(await curl(session.front_door_url, "-b", jar)).toEqual({ status: 200, body: `${page}\n` });
    // Without the owner's cookie, nothing.
    expect((await curl(session.front_door_url)).status).toBe(404);
  });

  it("stop, start again (nothing new to push), rm: the home and the repository's commits outlive the Pod", async () => {
    const stopped = await sbx(alice, repo, ["stop", "--json"]);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.json()).toMatchObject({ status: "stopped" });
    // A stop scales the StatefulSet (and the proxy's Deployment) to nothing: no Pod of it on the node once the
    // kubelet has ended them (the proxy's may still be terminating when the stop answers), its claim kept.
    const { namespace } = kubernetesTenantNames(sbxProject);
    const podsLeft = async () =>
      (
        await cluster.request("GET", `/api/v1/pods?fieldSelector=spec.nodeName%3D${REAL_NODE}`)
      ).body.items.filter((p: { metadata: { namespace: string } }) => p.metadata.namespace === namespace);
    await waitFor("the stopped project's Pods to end", 60_000, async () =>
      (await podsLeft()).length === 0 ? true : undefined,
    ).catch(() => undefined);
    expect((await podsLeft()).map((p: { metadata: { name: string } }) => p.metadata.name)).toEqual([]);
    const again = await sbx(alice, repo, ["start", "--json"], { timeoutMs: 400_000 });
    expect(again.code, again.stderr).toBe(0);
    expect(again.json()).toMatchObject({ project_id: sbxProject, status: "existing" });
    // The home is the claim's volume, mounted again by the kubelet into the new Pod: the commit made inside is there.
    const kept = await h.as("alice", "POST", `/projects/${sbxProject}/exec`, {
      command: ["sh", "-c", "git -C /workspace/app log -1 --format=%s; cat /workspace/app/.env"],
    });
    expect(kept.json()).toMatchObject({ exit_code: 0, stdout: "made inside\nSBX_DOTENV=from-dotenv\n" });
    const removed = await sbx(alice, repo, ["rm", "--yes", "--json"], { timeoutMs: 300_000 });
    expect(removed.code, removed.stderr).toBe(0);
    await h.waitForStatus("alice", sbxProject, "gone", 300_000);
    expect((await cluster.request("GET", `/api/v1/namespaces/${namespace}`)).status).toBe(404);
  }, 900_000);
});
