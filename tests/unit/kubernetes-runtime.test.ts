// Issue 20: the runtime's Kubernetes parts that need no cluster: the kubeconfig it accepts (and what it refuses,
// by name), the sandbox state it reads from a Pod's status, and the exit code it reads from an exec's Status;
// an upload through the exec's websocket against a real websocket server on loopback whose reader is slow.
// tests/integration/kubernetes-cluster.test.ts runs the same code against a real cluster.
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { afterAll, describe, expect, it } from "vitest";
import WebSocket, { WebSocketServer } from "ws";
import { KubernetesClient } from "../../runtime/kubernetes/client.js";
import { exitCodeOfStatus, execPath, SEND_BUFFER_BYTES } from "../../runtime/kubernetes/exec.js";
import { parseKubeconfig, readKubeconfig } from "../../runtime/kubernetes/kubeconfig.js";
import {
  kubernetesRunner,
  observeSandbox,
  sandboxPod,
  type PodObject,
} from "../../runtime/kubernetes/sandbox.js";
import { makeTestCertificates } from "../helpers/tls.js";

const CA = Buffer.from("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
const kubeconfig = (user: Record<string, unknown>, cluster: Record<string, unknown> = {}) =>
  JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    "current-context": "gke",
    contexts: [{ name: "gke", context: { cluster: "c", user: "u" } }],
    clusters: [
      {
        name: "c",
        cluster: {
          server: "https://10.0.0.2/",
          "certificate-authority-data": CA.toString("base64"),
          ...cluster,
        },
      },
    ],
    users: [{ name: "u", user }],
  });
const parse = (text: string) => parseKubeconfig(text, { source: "kubeconfig test" });

const dir = mkdtempSync(path.join(os.tmpdir(), "kubeconfig-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the kubeconfig the runtime reaches a cluster with", () => {
  it("takes a token, a CA and the current context; the server without a trailing slash", () => {
    const access = parse(kubeconfig({ token: "t0k" }));
    expect(access).toMatchObject({
      context: "gke",
      server: "https://10.0.0.2",
      insecureSkipTlsVerify: false,
    });
    expect(access.ca).toEqual(CA);
    expect(access.token?.()).toBe("t0k");
  });

  it("re-reads a token file on each use (a projected or rotated token), relative to the kubeconfig's directory", () => {
    writeFileSync(path.join(dir, "token"), "first\n");
    writeFileSync(path.join(dir, "config"), kubeconfig({ tokenFile: "token" }));
    const access = readKubeconfig(path.join(dir, "config"));
    expect(access.token?.()).toBe("first");
    writeFileSync(path.join(dir, "token"), "second\n");
    expect(access.token?.()).toBe("second");
  });

  it("takes a client certificate and key, inline or as files", () => {
    const inline = parse(
      kubeconfig({
        "client-certificate-data": Buffer.from("CERT").toString("base64"),
        "client-key-data": Buffer.from("KEY").toString("base64"),
      }),
    );
    expect(inline.clientCert?.toString()).toBe("CERT");
    expect(inline.clientKey?.toString()).toBe("KEY");
    writeFileSync(path.join(dir, "crt"), "FILECERT");
    writeFileSync(path.join(dir, "key"), "FILEKEY");
    writeFileSync(path.join(dir, "certs"), kubeconfig({ "client-certificate": "crt", "client-key": "key" }));
    expect(readKubeconfig(path.join(dir, "certs")).clientKey?.toString()).toBe("FILEKEY");
  });

  it.each([
    [
      "an exec plugin (GKE's)",
      kubeconfig({
        exec: { command: "gke-gcloud-auth-plugin", apiVersion: "client.authentication.k8s.io/v1beta1" },
      }),
      "user 'u' authenticates with an exec plugin (gke-gcloud-auth-plugin), which the runtime does not run: give it a token, a token file or a client certificate",
    ],
    ["no credentials", kubeconfig({}), "user 'u' has no credentials"],
    [
      "a certificate without its key",
      kubeconfig({ "client-certificate-data": "Q0VSVA==" }),
      "user 'u' has a client certificate without its key",
    ],
    [
      "a plain-http server",
      kubeconfig({ token: "t" }, { server: "http://10.0.0.2" }),
      "cluster 'c': server 'http://10.0.0.2' must be https (a plain-http API server is refused)",
    ],
    [
      "a context that is not there",
      kubeconfig({ token: "t" }).replace('"current-context":"gke"', '"current-context":"prod"'),
      "context 'prod' is not among its contexts",
    ],
    ["not YAML", "clusters: [", "not YAML"],
    ["not a mapping", "- a\n- b\n", "not a kubeconfig"],
    [
      "a relative file with nowhere to resolve it",
      kubeconfig(
        { token: "t" },
        { "certificate-authority-data": undefined, "certificate-authority": "ca.crt" },
      ),
      "certificate-authority 'ca.crt' is a relative path, and this kubeconfig was not read from a file",
    ],
  ])("refuses %s, saying what is wrong", (_name, text, message) => {
    expect(() => parse(text)).toThrow(`kubeconfig test: ${message}`);
  });

  it("names a file it cannot read", () => {
    expect(() => readKubeconfig(path.join(dir, "missing"))).toThrow(
      /kubeconfig .*missing: cannot be read: ENOENT/,
    );
  });
});

describe("the sandbox's state, read from its objects", () => {
  const ns = { metadata: {} };
  const set = { spec: { replicas: 1 } };
  const pod = (status: PodObject["status"], extra: Partial<PodObject> = {}): PodObject => ({
    spec: { nodeName: "n1" },
    status,
    ...extra,
  });
  /** Running, Ready, its container ready after `restarts` restarts. */
  const readyPod = (restarts: number) =>
    pod({
      phase: "Running",
      conditions: [{ type: "Ready", status: "True" }],
      containerStatuses: [{ name: "sandbox", ready: true, restartCount: restarts, state: {} }],
    });
  const waiting = (reason: string, message?: string) =>
    pod({
      phase: "Pending",
      containerStatuses: [{ name: "sandbox", state: { waiting: { reason, message } } }],
    });

  it.each<[string, Parameters<typeof observeSandbox>, unknown]>([
    ["no namespace", ["sandbox", undefined, undefined, undefined], { phase: "absent" }],
    [
      "a namespace being deleted",
      ["sandbox", { metadata: { deletionTimestamp: "2026-11-24T00:00:00Z" } }, set, undefined],
      { phase: "deleting", reason: "NamespaceTerminating" },
    ],
    ["no StatefulSet", ["sandbox", ns, undefined, undefined], { phase: "absent", reason: "NoStatefulSet" }],
    ["0 replicas, no Pod", ["sandbox", ns, { spec: { replicas: 0 } }, undefined], { phase: "stopped" }],
    [
      "0 replicas, the Pod still there",
      ["sandbox", ns, { spec: { replicas: 0 } }, pod({ phase: "Running" })],
      { phase: "stopping", node: "n1" },
    ],
    ["no Pod yet", ["sandbox", ns, set, undefined], { phase: "starting", reason: "NoPod" }],
    [
      "the Pod refused (a quota)",
      [
        "sandbox",
        ns,
        { spec: { replicas: 1 }, metadata: { managedFields: [{ time: "2026-11-24T10:00:00Z" }] } },
        undefined,
        [
          { reason: "FailedCreate", message: "older", lastTimestamp: "2026-11-24T10:00:05Z" },
          {
            reason: "FailedCreate",
            message: "exceeded quota: sandbox-quota",
            lastTimestamp: "2026-11-24T10:00:09Z",
          },
        ],
      ],
      { phase: "failed", reason: "FailedCreate", message: "exceeded quota: sandbox-quota" },
    ],
    [
      "a refusal from before the StatefulSet last changed (the quota since freed)",
      [
        "sandbox",
        ns,
        { spec: { replicas: 1 }, metadata: { managedFields: [{ time: "2026-11-24T11:00:00Z" }] } },
        undefined,
        [{ reason: "FailedCreate", message: "exceeded quota", lastTimestamp: "2026-11-24T10:00:09Z" }],
      ],
      { phase: "starting", reason: "NoPod" },
    ],
    [
      "not schedulable",
      [
        "sandbox",
        ns,
        set,
        pod({
          phase: "Pending",
          conditions: [
            { type: "PodScheduled", status: "False", reason: "Unschedulable", message: "0/3 nodes" },
          ],
        }),
      ],
      { phase: "starting", reason: "Unschedulable", message: "0/3 nodes" },
    ],
    [
      "an image it cannot pull",
      ["sandbox", ns, set, waiting("ImagePullBackOff", "Back-off pulling image")],
      { phase: "failed", reason: "ImagePullBackOff", message: "Back-off pulling image" },
    ],
    [
      "a crash loop",
      ["sandbox", ns, set, waiting("CrashLoopBackOff")],
      { phase: "failed", reason: "CrashLoopBackOff" },
    ],
    [
      "a container being created",
      ["sandbox", ns, set, waiting("ContainerCreating")],
      { phase: "starting", reason: "ContainerCreating" },
    ],
    [
      "running but not ready",
      ["sandbox", ns, set, pod({ phase: "Running", conditions: [{ type: "Ready", status: "False" }] })],
      { phase: "starting", reason: "Running" },
    ],
    [
      "running and ready, its proxy not (nothing outside can be reached)",
      ["sandbox", ns, set, readyPod(2), [], { status: { availableReplicas: 0 } }],
      { phase: "running", node: "n1", restarts: 2, egress: "not-ready" },
    ],
    [
      "running and ready, its proxy available",
      ["sandbox", ns, set, readyPod(0), [], { status: { availableReplicas: 1 } }],
      { phase: "running", node: "n1", restarts: 0, egress: "ready" },
    ],
    [
      "ended (evicted)",
      ["sandbox", ns, set, pod({ phase: "Failed", reason: "Evicted", message: "low on memory" })],
      { phase: "failed", reason: "Evicted", message: "low on memory" },
    ],
    [
      "ended by itself",
      [
        "sandbox",
        ns,
        set,
        pod({
          phase: "Succeeded",
          containerStatuses: [
            { name: "sandbox", state: { terminated: { exitCode: 0, reason: "Completed" } } },
          ],
        }),
      ],
      { phase: "failed", reason: "Completed", message: "the sandbox's container ended with exit code 0" },
    ],
    [
      "a Pod being deleted",
      [
        "sandbox",
        ns,
        set,
        pod({ phase: "Running" }, { metadata: { deletionTimestamp: "2026-11-24T00:00:00Z" } }),
      ],
      { phase: "stopping", node: "n1" },
    ],
  ])("%s", (_name, args, expected) => {
    expect(observeSandbox(...args)).toMatchObject(expected as object);
  });

  it("names the namespace as the tenant program does, with the one container and the egress proxy", () => {
    expect(sandboxPod("Team_Alpha.Prod")).toEqual({
      namespace: expect.stringMatching(/^sbx-team-alpha-prod-[0-9a-f]{8}$/),
      pod: "sandbox-0",
      container: "sandbox",
      statefulSet: "sandbox",
      proxy: "egress-proxy",
    });
  });
});

describe("an exec through the API", () => {
  it("reads the exit code from the final Status: a kubelet's, and kwok's words", () => {
    expect(exitCodeOfStatus({ status: "Success" })).toBe(0);
    expect(
      exitCodeOfStatus({
        status: "Failure",
        reason: "NonZeroExitCode",
        details: { causes: [{ reason: "ExitCode", message: "42" }] },
      }),
    ).toBe(42);
    expect(
      exitCodeOfStatus({ status: "Failure", message: "error executing command: cmd wait: x: exit status 3" }),
    ).toBe(3);
    expect(exitCodeOfStatus({ status: "Failure", message: "cmd wait: sleep 300: signal: killed" })).toBe(137);
    expect(exitCodeOfStatus({ status: "Failure", message: "cmd wait: x: signal: terminated" })).toBe(143);
    expect(() => exitCodeOfStatus({ status: "Failure", message: 'container "sandbox" not found' })).toThrow(
      'the command did not run: container "sandbox" not found',
    );
  });

  it("passes argv element by element, and asks for stderr apart only without a terminal", () => {
    const target = { namespace: "sbx-p1", pod: "sandbox-0", container: "sandbox" };
    const url = new URL(`https://x${execPath(target, ["sh", "-c", "echo a&b; x=1"], true, false)}`);
    expect(url.pathname).toBe("/api/v1/namespaces/sbx-p1/pods/sandbox-0/exec");
    expect(url.searchParams.getAll("command")).toEqual(["sh", "-c", "echo a&b; x=1"]);
    expect(Object.fromEntries([...url.searchParams].filter(([k]) => k !== "command"))).toEqual({
      container: "sandbox",
      stdin: "true",
      stdout: "true",
      stderr: "true",
      tty: "false",
    });
    const tty = new URL(`https://x${execPath(target, ["tmux"], true, true)}`);
    expect(tty.searchParams.get("stderr")).toBe("false");
    expect(tty.searchParams.get("tty")).toBe("true");
  });
});

describe("an upload through the exec's websocket", () => {
  const KiB = 1024;
  const MiB = 1024 * KiB;
  const UPLOAD = randomBytes(48 * MiB);
  const CHUNK = 64 * KiB;

  it("waits for a reader that is slow: what the connection holds unsent stays under SEND_BUFFER_BYTES", async () => {
    const certs = await makeTestCertificates(mkdtempSync(path.join(dir, "tls-")), "exec test CA", [
      "IP:127.0.0.1",
    ]);
    // An API server's exec endpoint: it takes stdin (channel 0) until its close (255, 0), then answers a
    // Status (channel 3). It reads its connection in short bursts: a Pod that is slow to take its input.
    const server = createServer({ cert: certs.cert, key: certs.key });
    const sockets = new WebSocketServer({ noServer: true, handleProtocols: () => "v5.channel.k8s.io" });
    const received = createHash("sha256");
    let receivedBytes = 0;
    let reading: NodeJS.Timeout | undefined;
    server.on("upgrade", (request, raw: Socket, head) => {
      sockets.handleUpgrade(request, raw, head, (ws) => {
        raw.pause();
        reading = setInterval(() => {
          raw.resume();
          setTimeout(() => raw.pause(), 1);
        }, 10);
        ws.on("message", (message: Buffer) => {
          if (message[0] === 0) {
            received.update(message.subarray(1));
            receivedBytes += message.length - 1;
          } else if (message[0] === 255) {
            ws.send(Buffer.concat([Buffer.from([3]), Buffer.from(JSON.stringify({ status: "Success" }))]));
            ws.close();
          }
        });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const client = new KubernetesClient({
      source: "the test's API server",
      context: "test",
      server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
      ca: Buffer.from(certs.caCert),
      insecureSkipTlsVerify: false,
      token: () => "test-token",
    });
    // The runner's own connection, to read what it holds (the client makes it as it always does).
    let connection: WebSocket | undefined;
    const open = client.websocket.bind(client);
    client.websocket = async (apiPath, protocols) => (connection = await open(apiPath, protocols));
    let most = 0;
    const sample = () => (most = Math.max(most, connection?.bufferedAmount ?? 0));
    const sampling = setInterval(sample, 1);
    try {
      const runner = kubernetesRunner(client, { namespace: "ns", pod: "sandbox-0", container: "sandbox" });
      const process = await runner.start("upload", { argv: ["cat"], stdin: "stream" }, () => undefined);
      await pipeline(
        Readable.from(
          (function* () {
            for (let at = 0; at < UPLOAD.length; at += CHUNK) {
              sample();
              yield UPLOAD.subarray(at, at + CHUNK);
            }
          })(),
        ),
        process.input!,
      );
      expect(await process.exited).toBe(0);
    } finally {
      clearInterval(sampling);
      clearInterval(reading);
      client.close();
      server.closeAllConnections();
      server.close();
    }
    expect(receivedBytes).toBe(UPLOAD.length);
    expect(received.digest("hex")).toBe(createHash("sha256").update(UPLOAD).digest("hex"));
    // The bound, and the one message that may cross it (a chunk and its frame's header).
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(SEND_BUFFER_BYTES + CHUNK + 16);
  }, 60_000);
});
