// A real Kubernetes API server for the tests: kube-apiserver (built by scripts/setup.sh from Go modules) over
// Debian's etcd, both on loopback with data of their own in a fresh directory. `startKubeApiserver` runs no
// controller, scheduler or kubelet: it validates and admits objects (schemas, Pod Security, RuntimeClass, quota)
// and stores them, which is what a server-side dry-run asks of it. `startKubeCluster` adds kube-controller-manager,
// kube-scheduler and kwok with one fake node, so that Pods are made, bound, run, exec'd into and deleted.
// Nothing here reaches beyond 127.0.0.1.
import { spawn, type ChildProcess } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtempSync, promises as fs, readFileSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import * as os from "node:os";
import * as path from "node:path";
import { commandExists, waitFor } from "../../lib/process.js";
import { kubernetesBin, kwokBin, pinnedKubernetesVersion } from "../../lib/toolchain.js";
import { tailLog, stopProcess } from "./daemons.js";
import { freePort } from "./host.js";
import { REAL_NODE, kubeletClientCertificates, startKubeNode, type KubeNode } from "./kube-node.js";

/** What the API server answered: status, the decoded body, and any `Warning` headers (Pod Security's). */
export interface KubeResponse {
  readonly status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly body: any;
  readonly warnings: string[];
}

export interface KubeApiserver {
  /** `https://127.0.0.1:<port>` */
  readonly url: string;
  /** What `/version` reports (the pinned build's `v<version>`). */
  readonly version: string;
  /** The two processes (for a test's check that nothing is left running). */
  readonly pids: { readonly etcd: number; readonly apiserver: number };
  /** One request as the cluster's admin (a static token in `system:masters`, which every authorizer allows). */
  request(method: string, apiPath: string, body?: unknown, contentType?: string): Promise<KubeResponse>;
  /** A kubeconfig of the cluster's admin (the server's CA and the static token, inline). */
  readonly kubeconfig: string;
  stop(): Promise<void>;
}

/** What kwok runs for an exec into any Pod of the cluster: a local process, as this user, in this directory. */
export interface KwokExec {
  readonly workDir: string;
  readonly runAsUser: number;
  readonly runAsGroup: number;
  readonly env?: Readonly<Record<string, string>>;
}

export interface KubeCluster extends KubeApiserver {
  /** The fake node kwok keeps Ready; Pods the scheduler binds to it are run (tests/helpers/kwok-stages.yaml). */
  readonly node: string;
  /**
   * A kubeconfig of one of the `users` the cluster was started with: a static token of that user name, in no
   * group but `system:authenticated`. Authorization is RBAC: such a user may do only what a binding grants.
   */
  kubeconfigOf(user: string): string;
  readonly pids: KubeApiserver["pids"] & {
    readonly controllerManager: number;
    readonly scheduler: number;
    readonly kwok: number;
  };
  /** The real node (kubelet and containerd) when the cluster was started with `realNode`. */
  readonly realNode?: KubeNode;
}

/** The controllers the tests' cluster runs: what a tenant's objects need to come to life and to go away. */
const CONTROLLERS = [
  "statefulset-controller",
  // The tenant's egress proxy is a Deployment.
  "deployment-controller",
  "replicaset-controller",
  "resourcequota-controller",
  "namespace-controller",
  "garbage-collector-controller",
  "serviceaccount-controller",
  "persistentvolume-binder-controller",
  "persistentvolume-protection-controller",
  "persistentvolumeclaim-protection-controller",
  "pod-garbage-collector-controller",
  // A Service's Endpoints and EndpointSlices from its Pods: Pulumi's Kubernetes provider waits for a Service to
  // have them (the tenant's egress proxy's) before it calls it ready.
  "endpoints-controller",
  "endpointslice-controller",
  // Lifts the not-ready taint the API server puts on every new node once kwok reports it Ready.
  "node-lifecycle-controller",
];

/**
 * The texts of the `Warning` headers (`299 - "<text>"`, RFC 7234 quoting), one per header: Node joins repeated
 * headers with ", ", which the texts themselves contain.
 */
function warningsOf(rawHeaders: string[]): string[] {
  const texts: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() !== "warning") continue;
    const match = /^\d{3} \S+ "((?:[^"\\]|\\.)*)"/.exec(rawHeaders[i + 1]!);
    texts.push(match ? match[1]!.replace(/\\(.)/g, "$1") : rawHeaders[i + 1]!);
  }
  return texts;
}

/** The environment without etcd's own variables (ETCD_*), which would override the flags below. */
const cleanEnv = () =>
  Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("ETCD_"))) as Record<
    string,
    string
  >;

/**
 * Starts etcd and kube-apiserver on free loopback ports and waits until `/readyz` answers ok. The serving
 * certificate is the API server's self-signed one (`--cert-dir`), which requests verify against; the
 * service-account signing key is generated here. `stop()` ends both processes and removes their data.
 */
export async function startKubeApiserver(): Promise<KubeApiserver> {
  return startControlPlane(undefined, []);
}

/**
 * A small whole cluster: etcd and kube-apiserver as {@link startKubeApiserver} starts them, then
 * kube-controller-manager ({@link CONTROLLERS} only; the node is never declared lost, so it needs no heartbeat),
 * kube-scheduler and kwok, each on loopback ports of its own, and one node that kwok makes Ready. An exec into
 * any Pod runs `exec`'s local process (kwok's ClusterExec). `stop()` ends every process and removes their data.
 */
export async function startKubeCluster(
  exec: KwokExec,
  users: readonly string[] = [],
  options: ControlPlaneOptions = {},
): Promise<KubeCluster> {
  return (await startControlPlane(exec, users, options)) as KubeCluster;
}

export interface ControlPlaneOptions {
  /**
   * A TokenReview webhook (`http://127.0.0.1:<port>/...`) the API server asks about a bearer token it does not
   * know, as GKE's asks Google about an access token: the tests' stand-in for Google's token check.
   */
  readonly tokenWebhook?: string;
  /**
   * The fake node's size and the Pod addresses kwok gives out: by default a node of 16 CPUs, 64 GiB and 110 Pods
   * on a /24, as a real one; a fleet of tenants (tests/bench/fleet-1000.ts) needs room for two Pods each.
   */
  readonly node?: {
    readonly cpu: string;
    readonly memory: string;
    readonly pods: string;
    readonly cidr: string;
  };
  /**
   * One real node beside kwok's (tests/helpers/kube-node.ts): a kubelet with a containerd of its own, named
   * `127.0.0.1`, tainted so that only Pods that tolerate it run there. The API server then authorizes with the
   * Node authorizer before RBAC and presents a client certificate to kubelets.
   */
  readonly realNode?: { readonly podSubnet: string };
}

async function startControlPlane(
  clusterExec: KwokExec | undefined,
  users: readonly string[],
  options: ControlPlaneOptions = {},
): Promise<KubeApiserver | KubeCluster> {
  const apiserverBin = kubernetesBin("kube-apiserver");
  if (!(await commandExists("etcd")))
    throw new Error(
      "etcd is not installed: the tests' API server needs it (Debian: apt-get install etcd-server)",
    );
  const dir = mkdtempSync(path.join(os.tmpdir(), "kube-apiserver-"));
  const [clientPort, peerPort, securePort] = [await freePort(), await freePort(), await freePort()];
  const children: ChildProcess[] = [];
  // A test run must never leave either daemon running, even when the worker exits without afterAll.
  const killAll = () => children.forEach((child) => child.exitCode === null && child.kill("SIGKILL"));
  process.once("exit", killAll);
  let realNode: KubeNode | undefined;
  const stopAll = async () => {
    await realNode?.stop();
    for (const child of [...children].reverse()) await stopProcess(child);
    process.removeListener("exit", killAll);
    await fs.rm(dir, { recursive: true, force: true });
  };

  try {
    const etcdUrl = `http://127.0.0.1:${clientPort}`;
    const peerUrl = `http://127.0.0.1:${peerPort}`;
    const etcd = spawn(
      "etcd",
      [
        ...["--name", "test", "--data-dir", path.join(dir, "etcd")],
        ...["--listen-client-urls", etcdUrl, "--advertise-client-urls", etcdUrl],
        ...["--listen-peer-urls", peerUrl, "--initial-advertise-peer-urls", peerUrl],
        ...["--initial-cluster", `test=${peerUrl}`, "--logger", "zap", "--log-level", "warn"],
      ],
      { stdio: ["ignore", "pipe", "pipe"], env: cleanEnv() },
    );
    children.push(etcd);
    const etcdLog = tailLog(etcd);
    await waitFor(`etcd on ${etcdUrl}`, 30_000, async () => {
      if (etcd.exitCode !== null) throw new Error(`exited ${etcd.exitCode}: ${etcdLog()}`);
      const response = await fetch(`${etcdUrl}/health`, { signal: AbortSignal.timeout(1_000) });
      return response.ok ? true : undefined;
    });

    const token = randomBytes(24).toString("hex");
    const userTokens = new Map(users.map((user) => [user, randomBytes(24).toString("hex")]));
    const tokenLines = [...userTokens].map(([user, userToken]) => `${userToken},${user},${user}\n`);
    const wantsNode = clusterExec !== undefined && options.realNode !== undefined;
    // The real node's identity, as a kubelet's client certificate would give it: the Node authorizer's user.
    const nodeToken = randomBytes(24).toString("hex");
    if (wantsNode)
      tokenLines.push(`${nodeToken},system:node:${REAL_NODE},system:node:${REAL_NODE},system:nodes\n`);
    const kubeletClient = wantsNode ? await kubeletClientCertificates(dir) : undefined;
    await fs.writeFile(
      path.join(dir, "tokens.csv"),
      [`${token},admin,admin,system:masters\n`, ...tokenLines].join(""),
      {
        mode: 0o600,
      },
    );
    const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    await fs.writeFile(path.join(dir, "sa.pub"), publicKey.export({ type: "spki", format: "pem" }));
    await fs.writeFile(path.join(dir, "sa.key"), privateKey.export({ type: "pkcs8", format: "pem" }), {
      mode: 0o600,
    });
    const certDir = path.join(dir, "pki");
    const webhookFlags: string[] = [];
    if (options.tokenWebhook) {
      const config = path.join(dir, "token-webhook.yaml");
      await fs.writeFile(
        config,
        [
          "apiVersion: v1",
          "kind: Config",
          `clusters: [{name: webhook, cluster: {server: "${options.tokenWebhook}"}}]`,
          "users: [{name: apiserver, user: {}}]",
          "contexts: [{name: webhook, context: {cluster: webhook, user: apiserver}}]",
          "current-context: webhook",
          "",
        ].join("\n"),
      );
      webhookFlags.push(
        `--authentication-token-webhook-config-file=${config}`,
        "--authentication-token-webhook-version=v1",
        "--authentication-token-webhook-cache-ttl=1s",
      );
    }
    const apiserver = spawn(
      apiserverBin,
      [
        `--etcd-servers=${etcdUrl}`,
        ...["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", `--secure-port=${securePort}`],
        `--cert-dir=${certDir}`,
        // The default reconciler refuses a loopback advertise address; no Service of this cluster needs it.
        "--endpoint-reconciler-type=none",
        `--token-auth-file=${path.join(dir, "tokens.csv")}`,
        ...webhookFlags,
        // The API server alone admits whatever is sent (what a dry-run asks); the whole cluster authorizes.
        `--authorization-mode=${clusterExec ? (wantsNode ? "Node,RBAC" : "RBAC") : "AlwaysAllow"}`,
        ...(kubeletClient
          ? [
              `--kubelet-client-certificate=${kubeletClient.cert}`,
              `--kubelet-client-key=${kubeletClient.key}`,
            ]
          : []),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        `--service-account-key-file=${path.join(dir, "sa.pub")}`,
        `--service-account-signing-key-file=${path.join(dir, "sa.key")}`,
        "--service-cluster-ip-range=10.96.0.0/16",
        // On by default too; named so that what the tests rely on does not change with the defaults.
        `--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,PodSecurity,RuntimeClass,ResourceQuota${wantsNode ? ",NodeRestriction" : ""}`,
        "--profiling=false",
        // A client's streamed list (client-go's WatchListClient, on by default) needs etcd's RequestWatchProgress
        // (3.4.31 and later; Debian's is 3.4.23): each such watch fails, and kwok's and the controllers'
        // reflectors back off, seconds and then tens of seconds behind. Without the server's WatchList they list
        // and then watch, as against any server that lacks it.
        "--feature-gates=WatchList=false",
        // kwok's node serves exec at its InternalIP (loopback); its certificate is its own, unverified, as a
        // kubelet's serving certificate is unless --kubelet-certificate-authority is given.
        "--kubelet-preferred-address-types=InternalIP",
      ],
      { stdio: ["ignore", "pipe", "pipe"], env: cleanEnv() },
    );
    children.push(apiserver);
    const apiserverLog = tailLog(apiserver);
    const url = `https://127.0.0.1:${securePort}`;

    let ca: Buffer | undefined;
    const request = (method: string, apiPath: string, body?: unknown, contentType = "application/json") =>
      new Promise<KubeResponse>((resolve, reject) => {
        const payload = body === undefined ? undefined : JSON.stringify(body);
        const req = httpsRequest(
          `${url}${apiPath}`,
          {
            method,
            ca,
            headers: {
              authorization: `Bearer ${token}`,
              accept: "application/json",
              ...(payload === undefined
                ? {}
                : { "content-type": contentType, "content-length": Buffer.byteLength(payload) }),
            },
            timeout: 30_000,
          },
          (res) => {
            let text = "";
            res.setEncoding("utf8");
            res.on("data", (chunk: string) => (text += chunk));
            res.on("end", () => {
              let parsed: unknown = text;
              try {
                parsed = JSON.parse(text);
              } catch {
                // /readyz and friends answer plain text
              }
              resolve({
                status: res.statusCode ?? 0,
                body: parsed,
                warnings: warningsOf(res.rawHeaders),
              });
            });
          },
        );
        req.on("timeout", () => req.destroy(new Error(`${method} ${apiPath}: no answer in 30 s`)));
        req.on("error", reject);
        req.end(payload);
      });

    await waitFor(`kube-apiserver on ${url}`, 120_000, async () => {
      if (apiserver.exitCode !== null) throw new Error(`exited ${apiserver.exitCode}: ${apiserverLog()}`);
      // The self-signed certificate (and its CA) is written before the server listens.
      ca ??= readFileSync(path.join(certDir, "apiserver.crt"));
      const response = await request("GET", "/readyz");
      return response.status === 200 ? true : undefined;
    });
    const version = (await request("GET", "/version")).body as { gitVersion: string };
    const kubeconfigWith = (user: string, userToken: string) =>
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        `- name: test\n  cluster:\n    server: ${url}\n    certificate-authority-data: ${ca!.toString("base64")}`,
        "users:",
        `- name: ${user}\n  user:\n    token: ${userToken}`,
        "contexts:",
        `- name: test\n  context:\n    cluster: test\n    user: ${user}`,
        "current-context: test",
        "",
      ].join("\n");
    const kubeconfig = kubeconfigWith("admin", token);
    const apiserverParts = {
      url,
      version: version.gitVersion,
      request,
      kubeconfig,
      stop: stopAll,
    };
    if (!clusterExec) return { ...apiserverParts, pids: { etcd: etcd.pid!, apiserver: apiserver.pid! } };

    const kubeconfigPath = path.join(dir, "admin.kubeconfig");
    await fs.writeFile(kubeconfigPath, kubeconfig, { mode: 0o600 });
    const start = (name: string, bin: string, args: string[]) => {
      const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: cleanEnv() });
      children.push(child);
      const log = tailLog(child);
      const alive = () => {
        if (child.exitCode !== null) throw new Error(`${name} exited ${child.exitCode}: ${log()}`);
      };
      return { child, alive };
    };
    const serving = async (name: string) => [
      `--secure-port=${await freePort()}`,
      "--bind-address=127.0.0.1",
      `--cert-dir=${path.join(dir, name)}`,
    ];
    const controllerManager = start("kube-controller-manager", kubernetesBin("kube-controller-manager"), [
      `--kubeconfig=${kubeconfigPath}`,
      ...(await serving("controller-manager")),
      "--leader-elect=false",
      `--controllers=${CONTROLLERS.join(",")}`,
      // The quota controller recounts every 5 minutes by default; the tests watch a quota fill and empty.
      "--resource-quota-sync-period=2s",
      "--concurrent-namespace-syncs=2",
      // kwok sends no heartbeat (tests/helpers/kwok-stages.yaml): the node must not be declared lost.
      "--node-monitor-grace-period=24h",
    ]);
    const scheduler = start("kube-scheduler", kubernetesBin("kube-scheduler"), [
      `--kubeconfig=${kubeconfigPath}`,
      ...(await serving("scheduler")),
      "--leader-elect=false",
    ]);
    const nodePort = await freePort();
    const node = "kwok-node-0";
    const stages = readFileSync(path.join(import.meta.dirname, "kwok-stages.yaml"), "utf8");
    const execConfig = {
      apiVersion: "kwok.x-k8s.io/v1alpha1",
      kind: "ClusterExec",
      metadata: { name: "local" },
      spec: {
        selector: {},
        execs: [
          {
            local: {
              workDir: clusterExec.workDir,
              envs: Object.entries(clusterExec.env ?? {}).map(([name, value]) => ({ name, value })),
              securityContext: { runAsUser: clusterExec.runAsUser, runAsGroup: clusterExec.runAsGroup },
            },
          },
        ],
      },
    };
    const kwokConfig = path.join(dir, "kwok.yaml");
    await fs.writeFile(kwokConfig, `${stages}\n---\n${JSON.stringify(execConfig)}\n`);
    const kwok = start("kwok", kwokBin(), [
      `--config=${kwokConfig}`,
      `--kubeconfig=${kubeconfigPath}`,
      "--manage-all-nodes=false",
      "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
      "--node-ip=127.0.0.1",
      `--node-port=${nodePort}`,
      `--server-address=127.0.0.1:${nodePort}`,
      `--cidr=${options.node?.cidr ?? "10.244.0.1/24"}`,
    ]);
    const capacity = {
      cpu: options.node?.cpu ?? "16",
      memory: options.node?.memory ?? "64Gi",
      pods: options.node?.pods ?? "110",
    };
    const created = await request("POST", "/api/v1/nodes", {
      apiVersion: "v1",
      kind: "Node",
      metadata: { name: node, annotations: { "kwok.x-k8s.io/node": "fake" }, labels: { type: "kwok" } },
      status: { allocatable: capacity, capacity },
    });
    if (created.status !== 201) throw new Error(`creating node ${node}: ${JSON.stringify(created.body)}`);
    await waitFor(`node ${node} Ready (kwok)`, 60_000, async () => {
      controllerManager.alive();
      scheduler.alive();
      kwok.alive();
      const { body } = await request("GET", `/api/v1/nodes/${node}`);
      const ready = (body as { status?: { conditions?: { type: string; status: string }[] } }).status
        ?.conditions;
      return ready?.some((c) => c.type === "Ready" && c.status === "True") ? true : undefined;
    });
    if (kubeletClient)
      realNode = await startKubeNode({
        url,
        ca: ca!,
        token: nodeToken,
        kubeletClientCa: kubeletClient.ca,
        podSubnet: options.realNode!.podSubnet,
        request: (method, apiPath, body) => request(method, apiPath, body),
      });
    return {
      ...apiserverParts,
      node,
      ...(realNode ? { realNode } : {}),
      kubeconfigOf: (user: string) => {
        const userToken = userTokens.get(user);
        if (!userToken) throw new Error(`the cluster was not started with user ${user}`);
        return kubeconfigWith(user, userToken);
      },
      pids: {
        etcd: etcd.pid!,
        apiserver: apiserver.pid!,
        controllerManager: controllerManager.child.pid!,
        scheduler: scheduler.child.pid!,
        kwok: kwok.child.pid!,
      },
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}

/** The version scripts/setup.sh builds: `v<k8s.io/kubernetes's pinned version>`. */
export const expectedKubeVersion = () => `v${pinnedKubernetesVersion()}`;
