// A real Kubernetes API server for the tests: kube-apiserver (built by scripts/setup.sh from Go modules) over
// Debian's etcd, both on loopback with data of their own in a fresh directory. No controller manager, no
// scheduler, no kubelet: it validates and admits objects (schemas, Pod Security, RuntimeClass, quota) and
// stores them, which is what a server-side dry-run asks of it. Nothing here reaches beyond 127.0.0.1.
import { spawn, type ChildProcess } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtempSync, promises as fs, readFileSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import * as os from "node:os";
import * as path from "node:path";
import { commandExists, waitFor } from "../../lib/process.js";
import { kubeApiserverBin, pinnedKubeApiserverVersion } from "../../lib/toolchain.js";
import { freePort } from "./host.js";

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
  /** One request as the cluster's admin (a static token, authorization AlwaysAllow). */
  request(method: string, apiPath: string, body?: unknown, contentType?: string): Promise<KubeResponse>;
  stop(): Promise<void>;
}

/** The last `max` characters a process wrote, for the error that says why it did not start. */
function tailLog(child: ChildProcess, max = 8_000): () => string {
  let log = "";
  for (const stream of [child.stdout!, child.stderr!])
    stream.on("data", (chunk: Buffer) => (log = (log + chunk.toString()).slice(-max)));
  return () => log.trim();
}

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

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
async function stopProcess(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
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
  const apiserverBin = kubeApiserverBin();
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
  const stopAll = async () => {
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
    await fs.writeFile(path.join(dir, "tokens.csv"), `${token},admin,admin,system:masters\n`, {
      mode: 0o600,
    });
    const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    await fs.writeFile(path.join(dir, "sa.pub"), publicKey.export({ type: "spki", format: "pem" }));
    await fs.writeFile(path.join(dir, "sa.key"), privateKey.export({ type: "pkcs8", format: "pem" }), {
      mode: 0o600,
    });
    const certDir = path.join(dir, "pki");
    const apiserver = spawn(
      apiserverBin,
      [
        `--etcd-servers=${etcdUrl}`,
        ...["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", `--secure-port=${securePort}`],
        `--cert-dir=${certDir}`,
        // The default reconciler refuses a loopback advertise address; no Service of this cluster needs it.
        "--endpoint-reconciler-type=none",
        `--token-auth-file=${path.join(dir, "tokens.csv")}`,
        "--authorization-mode=AlwaysAllow",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        `--service-account-key-file=${path.join(dir, "sa.pub")}`,
        `--service-account-signing-key-file=${path.join(dir, "sa.key")}`,
        "--service-cluster-ip-range=10.96.0.0/16",
        // On by default too; named so that what the tests rely on does not change with the defaults.
        "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,PodSecurity,RuntimeClass,ResourceQuota",
        "--profiling=false",
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
    return {
      url,
      version: version.gitVersion,
      pids: { etcd: etcd.pid!, apiserver: apiserver.pid! },
      request,
      stop: stopAll,
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}

/** The version scripts/setup.sh builds: `v<k8s.io/kubernetes's pinned version>`. */
export const expectedKubeVersion = () => `v${pinnedKubeApiserverVersion()}`;
