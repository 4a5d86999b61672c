// One real node for the tests' cluster (tests/helpers/kube-apiserver.ts, `realNode`): the kubelet at the control
// plane's version (scripts/toolchain/kubelet) over a containerd of its own (Debian's 1.6, CRI on, Docker's
// untouched) with Debian's CNI bridge, so a Pod runs the sandbox image for real — its own PID namespace,
// cgroups, network and filesystem — where kwok's node runs a Pod's exec as a process on the host. The plan
// and the facts it rests on (this machine's cgroup v1, containerd 1.6 without RuntimeConfig, a node named by
// its loopback address) are docs/kubernetes-node.md. One node per machine at a time (a host lock): the
// kubelet owns the host's /kubepods cgroups and sysctls. Nothing here reaches beyond 127.0.0.1 and the node's
// own bridge; a Pod's image comes from Docker's store (`importImage`), never from a registry.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { waitFor } from "../../lib/process.js";
import { cacheRoot, kubeletBin, pinnedKubeletVersion } from "../../lib/toolchain.js";
import { hostLock } from "./host-lock.js";
import { tailLog, stopProcess } from "./daemons.js";
import { freePort, unmountUnder } from "./host.js";

const exec = promisify(execFile);

/** The node's name and address: the kubelet takes an IP as `--hostname-override` for both (kubernetes-node.md §3.6). */
export const REAL_NODE = "127.0.0.1";
/** The label and taint that keep every Pod off the node but those that ask for it. */
export const REAL_NODE_LABEL = "agent-sandbox.test/real-node";

/** The pod network's bridge (its subnet is the test file's, so tests/unit/test-isolation.test.ts sees it). */
const BRIDGE = "asnode0";

/** What the kubelet sets on the host at its start (`setupKernelTunables`), restored as soon as the node is Ready. */
const TUNABLES = [
  "vm.overcommit_memory",
  "vm.panic_on_oom",
  "kernel.panic",
  "kernel.panic_on_oops",
  "kernel.keys.root_maxkeys",
  "kernel.keys.root_maxbytes",
];

/** What the node needs of its control plane. */
export interface RealNodeAccess {
  readonly url: string;
  /** The API server's serving CA (PEM). */
  readonly ca: Buffer;
  /** A static token of `system:node:127.0.0.1` in `system:nodes` (the Node authorizer's). */
  readonly token: string;
  /** The CA whose client certificate the API server presents to kubelets (kubelet's `x509.clientCAFile`). */
  readonly kubeletClientCa: string;
  /** The Pods' addresses: a subnet of the test file's own (no default route, no masquerade: a Pod reaches only it). */
  readonly podSubnet: string;
  /** One request as the cluster's admin. */
  readonly request: (
    method: string,
    apiPath: string,
    body?: unknown,
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
  ) => Promise<{ status: number; body: any }>;
}

export interface KubeNode {
  readonly name: string;
  readonly dir: string;
  /** The containerd that runs the node's Pods (`ctr --address`). */
  readonly containerdSocket: string;
  readonly pids: { readonly containerd: number; readonly kubelet: number };
  /**
   * Copies a Docker image into the node's containerd (`docker save | ctr images import`), once: the store is
   * kept between runs under the cache. Returns the reference a Pod names it by (the same `name:tag`).
   */
  importImage(image: string): Promise<string>;
  /** The end of the kubelet's and containerd's logs, for a failure's message. */
  log(): string;
  stop(): Promise<void>;
}

/** A CA and the API server's client certificate signed by it (openssl), for the kubelet's x509 authentication. */
export async function kubeletClientCertificates(
  dir: string,
): Promise<{ ca: string; cert: string; key: string }> {
  const file = (name: string) => path.join(dir, name);
  const openssl = (...args: string[]) => exec("openssl", args);
  await openssl(
    ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"],
    ...[
      "-subj",
      "/CN=agent-sandbox-test-kubelet-client-ca",
      "-keyout",
      file("kc-ca.key"),
      "-out",
      file("kc-ca.crt"),
    ],
    ...["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"],
  );
  await openssl(
    ...[
      "req",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-subj",
      "/O=system:masters/CN=kube-apiserver-kubelet-client",
    ],
    ...["-keyout", file("kc.key"), "-out", file("kc.csr")],
  );
  await fs.writeFile(
    file("kc.ext"),
    "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n",
  );
  await openssl(
    ...["x509", "-req", "-in", file("kc.csr"), "-CA", file("kc-ca.crt"), "-CAkey", file("kc-ca.key")],
    ...["-CAcreateserial", "-days", "2", "-out", file("kc.crt"), "-extfile", file("kc.ext")],
  );
  return { ca: file("kc-ca.crt"), cert: file("kc.crt"), key: file("kc.key") };
}

async function sysctl(name: string): Promise<string> {
  return (await fs.readFile(`/proc/sys/${name.replaceAll(".", "/")}`, "utf8")).trim();
}

async function setSysctl(name: string, value: string): Promise<void> {
  await fs.writeFile(`/proc/sys/${name.replaceAll(".", "/")}`, value);
}

/**
 * Starts the node and waits until it is Ready. The containerd's image store is kept under the cache
 * (`kube-node/containerd`) so the sandbox image is imported once per machine; everything else — its state, the
 * kubelet's root, the CNI allocations, the Pods' logs — is in a fresh directory that `stop()` removes, with
 * every mount, cgroup, link and process the node made.
 */
export async function startKubeNode(access: RealNodeAccess): Promise<KubeNode> {
  const kubelet = kubeletBin("kubelet");
  const pause = kubeletBin("pause");
  for (const plugin of ["bridge", "host-local", "loopback"])
    if (!existsSync(`/usr/lib/cni/${plugin}`))
      throw new Error(
        `/usr/lib/cni/${plugin} is missing: the real node's Pods need Debian's containernetworking-plugins`,
      );
  const turn = await hostLock("kube-node");
  // Short: containerd's sockets live under it, and a unix socket's path has 108 bytes.
  const dir = mkdtempSync("/tmp/kn-");
  const root = path.join(cacheRoot(), "kube-node", "containerd");
  const socket = path.join(dir, "run", "containerd.sock");
  const children: ChildProcess[] = [];
  const killAll = () => children.forEach((child) => child.exitCode === null && child.kill("SIGKILL"));
  process.once("exit", killAll);
  const tunables = new Map<string, string>();
  for (const name of TUNABLES) tunables.set(name, await sysctl(name));
  const restoreTunables = async () => {
    for (const [name, value] of tunables) if ((await sysctl(name)) !== value) await setSysctl(name, value);
  };
  const ctr = (...args: string[]) =>
    exec("ctr", ["--address", socket, "--namespace", "k8s.io", ...args], { maxBuffer: 16 << 20 });

  const podsOnNode = async (): Promise<{ namespace: string; name: string }[]> => {
    const { status, body } = await access.request(
      "GET",
      `/api/v1/pods?fieldSelector=spec.nodeName%3D${REAL_NODE}`,
    );
    if (status !== 200) throw new Error(`listing the real node's Pods: ${status} ${JSON.stringify(body)}`);
    return (body.items as { metadata: { namespace: string; name: string } }[]).map(
      ({ metadata }) => metadata,
    );
  };
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    try {
      // The Pods first, through the kubelet: it stops their containers and tears their network down (CNI DEL).
      if (children[1]?.exitCode === null) {
        for (const pod of await podsOnNode().catch(() => []))
          await access.request(
            "DELETE",
            `/api/v1/namespaces/${pod.namespace}/pods/${pod.name}?gracePeriodSeconds=0`,
          );
        await waitFor("the real node's Pods to go", 60_000, async () =>
          (await podsOnNode()).length === 0 ? true : undefined,
        ).catch(() => undefined);
      }
      if (children[1]) await stopProcess(children[1]);
      // What the kubelet left (it does not stop containers when it exits), before containerd goes: the shims
      // would outlive it.
      if (children[0]?.exitCode === null) await clearContainers(ctr);
      if (children[0]) await stopProcess(children[0]);
    } finally {
      process.removeListener("exit", killAll);
      killAll();
      await removeNodeFiles([dir]);
      await restoreTunables().catch(() => undefined);
      await turn.release();
    }
  };

  try {
    // A node killed with its run (no stop) left these: cleared before anything starts.
    await clearKilledNodes(dir);
    await fs.mkdir(path.join(dir, "run"), { recursive: true });
    await fs.mkdir(root, { recursive: true });
    const cniConfDir = path.join(dir, "cni", "net.d");
    await fs.mkdir(cniConfDir, { recursive: true });
    await fs.writeFile(
      path.join(cniConfDir, "10-agent-sandbox.conflist"),
      JSON.stringify({
        cniVersion: "1.0.0",
        name: "agent-sandbox-test-node",
        plugins: [
          {
            type: "bridge",
            bridge: BRIDGE,
            isGateway: true,
            isDefaultGateway: false,
            ipMasq: false,
            hairpinMode: true,
            ipam: {
              type: "host-local",
              ranges: [[{ subnet: access.podSubnet }]],
              routes: [],
              dataDir: path.join(dir, "cni", "ipam"),
            },
          },
        ],
      }),
    );
    // A stray pull (a Pod naming an image the node lacks) fails on loopback, never at a public registry.
    const certsDir = path.join(dir, "certs.d");
    await fs.mkdir(path.join(certsDir, "docker.io"), { recursive: true });
    await fs.writeFile(
      path.join(certsDir, "docker.io", "hosts.toml"),
      'server = "http://127.0.0.1:1"\n[host."http://127.0.0.1:1"]\n  capabilities = ["pull", "resolve"]\n',
    );
    const pauseImage = `docker.io/agent-sandbox-test/pause:v${pinnedKubeletVersion()}`;
    const config = path.join(dir, "containerd.toml");
    await fs.writeFile(
      config,
      [
        "version = 2",
        `root = "${root}"`,
        `state = "${path.join(dir, "state")}"`,
        "oom_score = 0",
        "[grpc]",
        `  address = "${socket}"`,
        "[ttrpc]",
        `  address = "${socket}.ttrpc"`,
        '[debug]\n  address = ""',
        '[metrics]\n  address = ""',
        '[plugins."io.containerd.internal.v1.opt"]',
        `  path = "${path.join(dir, "opt")}"`,
        '[plugins."io.containerd.grpc.v1.cri"]',
        `  sandbox_image = "${pauseImage}"`,
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "  enable_selinux = false",
        "  disable_apparmor = true",
        "  netns_mounts_under_state_dir = true",
        // This machine's root lacks CAP_SYS_RESOURCE, so no process may lower its OOM score below its parent's:
        // runc failed the Pods' sandbox (-998) with "can't get final child's PID from pipe". Held at containerd's.
        "  restrict_oom_score_adj = true",
        '  [plugins."io.containerd.grpc.v1.cri".containerd]',
        '    snapshotter = "overlayfs"',
        '    default_runtime_name = "runc"',
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
        '      runtime_type = "io.containerd.runc.v2"',
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
        '        BinaryName = "/usr/sbin/runc"',
        `        Root = "${path.join(dir, "runc")}"`,
        "        SystemdCgroup = false",
        '  [plugins."io.containerd.grpc.v1.cri".cni]',
        '    bin_dir = "/usr/lib/cni"',
        `    conf_dir = "${cniConfDir}"`,
        "    max_conf_num = 1",
        '  [plugins."io.containerd.grpc.v1.cri".registry]',
        `    config_path = "${certsDir}"`,
        "",
      ].join("\n"),
    );
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([key]) => !key.startsWith("CONTAINERD_")),
    ) as Record<string, string>;
    const containerd = spawn("containerd", ["--config", config], { stdio: ["ignore", "pipe", "pipe"], env });
    children.push(containerd);
    const containerdLog = tailLog(containerd);
    await waitFor(`the real node's containerd on ${socket}`, 30_000, async () => {
      if (containerd.exitCode !== null)
        throw new Error(`containerd exited ${containerd.exitCode}: ${containerdLog()}`);
      return ctr("version").then(
        () => true,
        () => undefined,
      );
    });
    await clearContainers(ctr);

    const importImage = async (image: string): Promise<string> => {
      const ref = image.includes("/") ? `docker.io/${image}` : `docker.io/library/${image}`;
      const { stdout } = await ctr("images", "ls", "-q");
      if (!stdout.split("\n").includes(ref)) {
        const save = spawn("docker", ["save", image], { stdio: ["ignore", "pipe", "pipe"] });
        const load = spawn("ctr", ["--address", socket, "--namespace", "k8s.io", "images", "import", "-"], {
          stdio: [save.stdout, "pipe", "pipe"],
        });
        const [saveLog, loadLog] = [tailLog(save), tailLog(load)];
        const code = (child: ChildProcess) =>
          new Promise<number>((resolve) => child.once("exit", (exitCode) => resolve(exitCode ?? 1)));
        const [saved, loaded] = await Promise.all([code(save), code(load)]);
        if (saved !== 0 || loaded !== 0)
          throw new Error(
            `importing ${image} into the real node: docker save ${saved}: ${saveLog()}; ctr import ${loaded}: ${loadLog()}`,
          );
      }
      // The kept store holds one tag of a repository: an image rebuilt since (a new tag) replaces the old, whose
      // layers containerd's collector then frees.
      const repository = ref.slice(0, ref.lastIndexOf(":"));
      const { stdout: refs } = await ctr("images", "ls", "-q");
      for (const old of refs.split("\n"))
        if (old.startsWith(`${repository}:`) && old !== ref)
          await ctr("images", "rm", old).catch(() => undefined);
      return image;
    };

    // The Pods' sandbox container: the pause binary as an image of one file, made in Docker and imported.
    if (!(await ctr("images", "ls", "-q")).stdout.split("\n").includes(pauseImage)) {
      const dockerTag = pauseImage.slice("docker.io/".length);
      const context = path.join(dir, "pause-image");
      await fs.mkdir(context);
      await fs.copyFile(pause, path.join(context, "pause"));
      await exec("sh", [
        "-c",
        'tar -C "$1" -c pause | docker import -c \'ENTRYPOINT ["/pause"]\' - "$2" >/dev/null',
        "sh",
        context,
        dockerTag,
      ]);
      await importImage(dockerTag);
      await exec("docker", ["rmi", dockerTag]).catch(() => undefined);
    }

    const port = await freePort();
    const healthzPort = await freePort();
    await fs.writeFile(path.join(dir, "ca.crt"), access.ca);
    await fs.writeFile(
      path.join(dir, "kubelet.kubeconfig"),
      [
        "apiVersion: v1",
        "kind: Config",
        `clusters:\n- name: test\n  cluster:\n    server: ${access.url}\n    certificate-authority: ${path.join(dir, "ca.crt")}`,
        `users:\n- name: node\n  user:\n    token: ${access.token}`,
        "contexts:\n- name: test\n  context:\n    cluster: test\n    user: node",
        "current-context: test",
        "",
      ].join("\n"),
      { mode: 0o600 },
    );
    await fs.writeFile(path.join(dir, "resolv.conf"), "nameserver 127.0.0.1\n");
    await fs.writeFile(
      path.join(dir, "kubelet.yaml"),
      JSON.stringify({
        apiVersion: "kubelet.config.k8s.io/v1beta1",
        kind: "KubeletConfiguration",
        // This machine's cgroups are v1 (hybrid): a kubelet since 1.35 exits on them unless told not to.
        failCgroupV1: false,
        // containerd 1.6 cannot report its cgroup driver (no RuntimeConfig): the kubelet falls back to this.
        cgroupDriver: "cgroupfs",
        containerRuntimeEndpoint: `unix://${socket}`,
        imageServiceEndpoint: `unix://${socket}`,
        address: REAL_NODE,
        port,
        readOnlyPort: 0,
        healthzBindAddress: REAL_NODE,
        healthzPort,
        authentication: {
          anonymous: { enabled: false },
          webhook: { enabled: true },
          x509: { clientCAFile: access.kubeletClientCa },
        },
        authorization: { mode: "Webhook" },
        registerNode: true,
        registerWithTaints: [{ key: REAL_NODE_LABEL, value: "true", effect: "NoSchedule" }],
        resolvConf: path.join(dir, "resolv.conf"),
        podLogsDir: path.join(dir, "pod-logs"),
        volumePluginDir: path.join(dir, "volume-plugins"),
        // Docker's chains are the host's: the kubelet adds none.
        makeIPTablesUtilChains: false,
        // Only memory: the disk the suite fills with images must never put the node under pressure.
        evictionHard: { "memory.available": "100Mi" },
        // The imported images are the node's only source: never collected.
        imageGCHighThresholdPercent: 100,
        imageGCLowThresholdPercent: 99,
        serializeImagePulls: false,
        rotateCertificates: false,
        serverTLSBootstrap: false,
        nodeStatusReportFrequency: "10s",
      }),
    );
    const kubeletProcess = spawn(
      kubelet,
      [
        `--config=${path.join(dir, "kubelet.yaml")}`,
        `--kubeconfig=${path.join(dir, "kubelet.kubeconfig")}`,
        `--hostname-override=${REAL_NODE}`,
        `--root-dir=${path.join(dir, "kubelet")}`,
        `--cert-dir=${path.join(dir, "kubelet", "pki")}`,
        `--node-labels=${REAL_NODE_LABEL}=true`,
        "--v=1",
      ],
      { stdio: ["ignore", "pipe", "pipe"], env },
    );
    children.push(kubeletProcess);
    const kubeletLog = tailLog(kubeletProcess);
    await waitFor(`node ${REAL_NODE} Ready (the real kubelet)`, 120_000, async () => {
      if (kubeletProcess.exitCode !== null)
        throw new Error(`the kubelet exited ${kubeletProcess.exitCode}: ${kubeletLog()}`);
      if (containerd.exitCode !== null)
        throw new Error(`containerd exited ${containerd.exitCode}: ${containerdLog()}`);
      const { body } = await access.request("GET", `/api/v1/nodes/${REAL_NODE}`);
      const conditions = (body as { status?: { conditions?: { type: string; status: string }[] } }).status
        ?.conditions;
      return conditions?.some((c) => c.type === "Ready" && c.status === "True") ? true : undefined;
    }).catch((error: Error) => {
      throw new Error(`${error.message}\nthe kubelet's log ends:\n${kubeletLog()}`);
    });
    // The kubelet set its kernel tunables at its start (panic_on_oops=1 among them, which would turn any oops
    // of this shared machine into a panic): the host's own again, now that it has read them.
    await restoreTunables();
    return {
      name: REAL_NODE,
      dir,
      containerdSocket: socket,
      pids: { containerd: containerd.pid!, kubelet: kubeletProcess.pid! },
      importImage,
      log: () => `the kubelet's log ends:\n${kubeletLog()}\ncontainerd's log ends:\n${containerdLog()}`,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * What a node whose run was killed (no `stop()`) left: its kubelet, containerd and shims (a containerd left
 * running holds the kept store's database, and the next one waits on it forever), the Pods' processes, the
 * mounts and files under its `/tmp/kn-*` directory, its cgroups and bridge. The host lock makes every other
 * node directory a dead one.
 */
async function clearKilledNodes(own: string): Promise<void> {
  const stale = (await fs.readdir("/tmp"))
    .filter((name) => name.startsWith("kn-"))
    .map((name) => `/tmp/${name}`);
  const leftovers: number[] = [];
  for (const entry of await fs.readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const argv = (await fs.readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "")).split("\0");
    if (argv.some((arg) => stale.some((dir) => dir !== own && arg.includes(`${dir}/`))))
      leftovers.push(Number(entry));
  }
  // The Pods' own processes, in the kubelet's cgroups.
  for (const procs of ["/sys/fs/cgroup/pids/kubepods", "/sys/fs/cgroup/memory/kubepods"]) {
    if (!existsSync(procs)) continue;
    const { stdout } = await exec("find", [procs, "-name", "cgroup.procs"]).catch(() => ({ stdout: "" }));
    for (const file of stdout.split("\n").filter(Boolean))
      for (const pid of (await fs.readFile(file, "utf8").catch(() => "")).split("\n").filter(Boolean))
        leftovers.push(Number(pid));
  }
  for (const pid of leftovers) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone already
    }
  }
  await waitFor("a killed node's processes to exit", 15_000, async () =>
    leftovers.some((pid) => existsSync(`/proc/${pid}`)) ? undefined : true,
  ).catch(() => undefined);
  await removeNodeFiles(stale.filter((dir) => dir !== own));
}

/**
 * What nodes left on the host once their processes are gone: the mounts, files and log links under each of
 * `dirs`, the kubelet's cgroups, the Pods' bridge.
 */
async function removeNodeFiles(dirs: readonly string[]): Promise<void> {
  for (const dir of dirs) {
    await unmountUnder(dir).catch(() => []);
    await fs.rm(dir, { recursive: true, force: true }).catch(() => undefined);
    await removeContainerLogLinks(dir);
  }
  await removeKubepodsCgroups();
  await exec("ip", ["link", "del", BRIDGE]).catch(() => undefined);
}

/** Kills and removes every task and container of the node's containerd (the kubelet's namespace). */
async function clearContainers(ctr: (...args: string[]) => Promise<{ stdout: string }>): Promise<void> {
  const ids = (await ctr("containers", "ls", "-q")).stdout.split("\n").filter(Boolean);
  for (const id of ids) {
    await ctr("tasks", "kill", "--signal", "SIGKILL", id).catch(() => undefined);
    await waitFor(`task ${id} to stop`, 10_000, async () =>
      ctr("tasks", "rm", id).then(
        () => true,
        (error: Error) => (/not found|no such/i.test(error.message) ? true : undefined),
      ),
    ).catch(() => undefined);
    await ctr("containers", "rm", id).catch(() => undefined);
  }
}

/** The kubelet's QoS cgroups (`/kubepods` in every v1 hierarchy), leaves first, if empty. */
async function removeKubepodsCgroups(): Promise<void> {
  for (const hierarchy of await fs.readdir("/sys/fs/cgroup").catch(() => [] as string[])) {
    const top = path.join("/sys/fs/cgroup", hierarchy, "kubepods");
    if (!existsSync(top)) continue;
    await exec("find", [top, "-depth", "-type", "d", "-exec", "rmdir", "{}", "+"]).catch(() => undefined);
  }
}

/** The `/var/log/containers` links the kubelet made (its path is fixed) to logs under `dir`. */
async function removeContainerLogLinks(dir: string): Promise<void> {
  const links = await fs.readdir("/var/log/containers").catch(() => [] as string[]);
  for (const link of links) {
    const file = path.join("/var/log/containers", link);
    const target = await fs.readlink(file).catch(() => "");
    if (target.startsWith(`${dir}/`)) await fs.rm(file, { force: true });
  }
}
