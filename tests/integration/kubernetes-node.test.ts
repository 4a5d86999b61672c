// Issue 48: one real node in the tests' cluster. Until now every kubernetes Pod here ran on kwok's node, which
// marks a Pod Running and answers an exec with a process on the host, so the sandbox image never ran as a Pod.
// Here a kubelet at the control plane's version, over a containerd of its own and Debian's CNI bridge
// (tests/helpers/kube-node.ts, docs/kubernetes-node.md), runs a Pod of the sandbox image for real, and the
// runtime's own exec (runtime/kubernetes/exec.ts) reaches it through the API server and the kubelet: the
// container's own PID namespace, hostname, cgroup, filesystem and network, and stdin closed as a kubelet closes it.
import { execFile } from "node:child_process";
import { existsSync, promises as fs } from "node:fs";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { processAlive, waitFor } from "../../lib/process.js";
import { KubernetesClient } from "../../runtime/kubernetes/client.js";
import { parseKubeconfig } from "../../runtime/kubernetes/kubeconfig.js";
import { kubernetesRunner } from "../../runtime/kubernetes/sandbox.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { startKubeCluster, type KubeCluster } from "../helpers/kube-apiserver.js";
import { REAL_NODE, REAL_NODE_LABEL } from "../helpers/kube-node.js";

const execFileAsync = promisify(execFile);
let cluster: KubeCluster;
let client: KubernetesClient;
let image: string;
const NAMESPACE = "real-node";
const POD = "sandbox-0";
/** The host's kernel tunables the kubelet sets at its start: the node must leave them as they were. */
const TUNABLES = ["kernel/panic_on_oops", "kernel/panic", "vm/overcommit_memory"];
let tunablesBefore: string[];

const tunables = () =>
  Promise.all(TUNABLES.map(async (name) => (await fs.readFile(`/proc/sys/${name}`, "utf8")).trim()));

beforeAll(async () => {
  tunablesBefore = await tunables();
  image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  cluster = await startKubeCluster({ workDir: "/tmp", runAsUser: 65534, runAsGroup: 65534 }, [], {
    realNode: { podSubnet: "10.198.0.0/24" },
  });
  client = new KubernetesClient(parseKubeconfig(cluster.kubeconfig, { source: "the tests' admin" }));
  await cluster.realNode!.importImage(image);
  const created = await cluster.request("POST", "/api/v1/namespaces", {
    apiVersion: "v1",
    kind: "Namespace",
    metadata: { name: NAMESPACE },
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
}, 600_000);

afterAll(async () => {
  await cluster?.stop();
}, 180_000);

describe("a real node", () => {
  it("registers as a kubelet of the control plane's version, tainted, and leaves the host's kernel tunables as they were", async () => {
    const { status, body } = await cluster.request("GET", `/api/v1/nodes/${REAL_NODE}`);
    expect(status).toBe(200);
    expect(body.status.nodeInfo.kubeletVersion).toBe(cluster.version);
    expect(body.status.nodeInfo.containerRuntimeVersion).toMatch(/^containerd:\/\/1\.6\./);
    expect(body.status.addresses).toContainEqual({ type: "InternalIP", address: REAL_NODE });
    expect(body.spec.taints).toContainEqual(
      expect.objectContaining({ key: REAL_NODE_LABEL, effect: "NoSchedule" }),
    );
    // The kubelet sets kernel.panic_on_oops=1 at its start; the helper puts the host's value back.
    expect(await tunables()).toEqual(tunablesBefore);
  });

  it("runs the sandbox image as a Pod, and the runtime's exec reaches its container through the API server", async () => {
    const pod = await cluster.request("POST", `/api/v1/namespaces/${NAMESPACE}/pods`, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: POD },
      spec: {
        nodeSelector: { [REAL_NODE_LABEL]: "true" },
        tolerations: [{ key: REAL_NODE_LABEL, operator: "Exists", effect: "NoSchedule" }],
        automountServiceAccountToken: false,
        terminationGracePeriodSeconds: 1,
        containers: [
          {
            name: "sandbox",
            image,
            imagePullPolicy: "Never",
            command: ["sleep", "infinity"],
            resources: { requests: { cpu: "10m", memory: "32Mi" } },
          },
        ],
      },
    });
    expect(pod.status, JSON.stringify(pod.body)).toBe(201);
    const running = await waitFor(`Pod ${POD} Running on the real node`, 120_000, async () => {
      const { body } = await cluster.request("GET", `/api/v1/namespaces/${NAMESPACE}/pods/${POD}`);
      const waiting = body.status?.containerStatuses?.[0]?.state?.waiting;
      if (waiting?.reason && /Err|BackOff|Invalid/.test(waiting.reason))
        throw new Error(`${waiting.reason}: ${waiting.message}`);
      return body.status?.phase === "Running" ? body : undefined;
    }).catch(async (error: Error) => {
      // What the cluster says of the Pod, and what the node's own logs say.
      const { body } = await cluster.request("GET", `/api/v1/namespaces/${NAMESPACE}/pods/${POD}`);
      const events = await cluster.request("GET", `/api/v1/namespaces/${NAMESPACE}/events`);
      const said = (events.body.items ?? []).map(
        (e: { reason: string; message: string }) => `${e.reason}: ${e.message}`,
      );
      throw new Error(
        `${error.message}; status ${JSON.stringify(body.status)}; events ${said.join(" | ")}\n${cluster.realNode!.log()}`,
      );
    });
    expect(running.spec.nodeName).toBe(REAL_NODE);
    const podIp: string = running.status.podIP;
    expect(podIp).toMatch(/^10\.198\.0\.\d+$/);

    const runner = kubernetesRunner(client, { namespace: NAMESPACE, pod: POD, container: "sandbox" });
    // Its own PID namespace (the command is PID 1), its hostname, its cgroup under the kubelet's, its address.
    const seen = await runner.run([
      "sh",
      "-c",
      "tr '\\0' ' ' </proc/1/cmdline; echo; hostname; grep -m1 kubepods /proc/self/cgroup; hostname -i",
    ]);
    expect(seen.exitCode, seen.stderr).toBe(0);
    const [cmdline, hostname, cgroup, address] = seen.stdout.split("\n");
    expect(cmdline!.trim()).toBe("sleep infinity");
    expect(hostname).toBe(POD);
    expect(cgroup).toMatch(new RegExp(`/kubepods/.*pod${running.metadata.uid}/`));
    expect(address!.trim()).toBe(podIp);
    // The image's own files, not the host's.
    const files = await runner.run([
      "sh",
      "-c",
      "test -x /usr/local/bin/sandbox-sync && cat /etc/os-release",
    ]);
    expect(files.exitCode, files.stderr).toBe(0);
    expect(files.stdout).toMatch(/Debian/);
    // A kubelet closes the command's stdin at the end of what was sent (kwok never does): `wc -c` reads to the end.
    const input = Buffer.alloc(300_000, "x");
    expect(await runner.run(["wc", "-c"], { stdin: input })).toMatchObject({
      exitCode: 0,
      stdout: `${input.length}\n`,
    });
  });

  it("never pulls from a registry: an image the node lacks fails on loopback", async () => {
    const created = await cluster.request("POST", `/api/v1/namespaces/${NAMESPACE}/pods`, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "not-imported" },
      spec: {
        nodeSelector: { [REAL_NODE_LABEL]: "true" },
        tolerations: [{ key: REAL_NODE_LABEL, operator: "Exists", effect: "NoSchedule" }],
        automountServiceAccountToken: false,
        containers: [
          { name: "c", image: "agent-sandbox-test/not-imported:1", imagePullPolicy: "IfNotPresent" },
        ],
      },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const waiting = await waitFor("the pull's failure", 60_000, async () => {
      const { body } = await cluster.request("GET", `/api/v1/namespaces/${NAMESPACE}/pods/not-imported`);
      const state = body.status?.containerStatuses?.[0]?.state?.waiting;
      return state?.reason === "ErrImagePull" || state?.reason === "ImagePullBackOff" ? state : undefined;
    });
    // docker.io's hosts.toml sends every pull to a closed loopback port.
    expect(waiting.message).toMatch(/127\.0\.0\.1:1/);
  });

  it("stops leaving nothing: no process, mount, cgroup, bridge or directory of the node's", async () => {
    const node = cluster.realNode!;
    await node.stop();
    for (const pid of Object.values(node.pids)) expect(processAlive(pid)).toBe(false);
    const mounts = await fs.readFile("/proc/self/mountinfo", "utf8");
    expect(mounts.split("\n").filter((line) => line.includes(` ${node.dir}/`))).toEqual([]);
    expect(existsSync(node.dir)).toBe(false);
    expect(existsSync("/sys/fs/cgroup/memory/kubepods")).toBe(false);
    expect(existsSync("/sys/class/net/asnode0")).toBe(false);
    // Nothing of the node's containerd: no shim of its socket.
    const shims = await execFileAsync("pgrep", ["-f", node.containerdSocket]).then(
      ({ stdout }) => stdout.trim(),
      () => "",
    );
    expect(shims).toBe("");
    expect(await tunables()).toEqual(tunablesBefore);
  });
});
