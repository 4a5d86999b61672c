// An ACME server for the tests: Pebble, Let's Encrypt's small test server (built by scripts/setup.sh from Go
// modules), on loopback, with its challenge test server answering every DNS name with 127.0.0.1. Pebble
// validates each challenge for real, against the ports the test's front door listens on.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, promises as fs, readFileSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import * as os from "node:os";
import * as path from "node:path";
import { waitFor } from "../../lib/process.js";
import { pebbleBin } from "../../lib/toolchain.js";
import { freePort } from "./host.js";
import { makeTestCertificates } from "./tls.js";

export interface Pebble {
  /** The ACME directory URL (HTTPS, under {@link Pebble.listenerCa}). */
  readonly directory: string;
  /** The CA of Pebble's own HTTPS listener: what an ACME client must trust to talk to it. */
  readonly listenerCa: string;
  /** The root the certificates Pebble issues chain to (fresh each start). */
  issuingRoot(): Promise<string>;
  stop(): Promise<void>;
}

/** A GET over Pebble's HTTPS listeners, trusting only their CA. */
function get(url: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    // Pebble, as an ACME server must, refuses a request without a User-Agent.
    const headers = { "user-agent": "agent-sandbox-tests" };
    const req = httpsRequest(url, { ca, headers, agent: false, timeout: 2_000 }, (res) => {
      let body = "";
      res.on("data", (chunk) => (body += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("timeout", () => req.destroy(new Error(`${url}: no answer in 2 s`)));
    req.on("error", reject);
    req.end();
  });
}

function started(command: string, args: string[], env: NodeJS.ProcessEnv, log: string[]): ChildProcess {
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], env });
  for (const stream of [child.stdout!, child.stderr!])
    stream.on("data", (chunk: Buffer) => log.push(chunk.toString()));
  return child;
}

/**
 * Starts Pebble and its DNS stand-in on free loopback ports. `httpPort` and `tlsPort` are where Pebble sends
 * its HTTP-01 and TLS-ALPN-01 validations (the front door's HTTP and HTTPS ports).
 */
export async function startPebble(challenges: { httpPort: number; tlsPort: number }): Promise<Pebble> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "pebble-"));
  const [acmePort, managementPort, dnsPort, dnsManagementPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  // Pebble's own HTTPS listener: a CA and a certificate for 127.0.0.1 made here.
  const file = (name: string) => path.join(dir, name);
  const listener = await makeTestCertificates(dir, "pebble test listener CA", [
    "IP:127.0.0.1",
    "DNS:localhost",
  ]);
  await fs.writeFile(
    file("pebble.json"),
    JSON.stringify({
      pebble: {
        listenAddress: `127.0.0.1:${acmePort}`,
        managementListenAddress: `127.0.0.1:${managementPort}`,
        certificate: listener.certFile,
        privateKey: listener.keyFile,
        httpPort: challenges.httpPort,
        tlsPort: challenges.tlsPort,
        ocspResponderURL: "",
        externalAccountBindingRequired: false,
        // No Retry-After at all: Pebble sends it as an HTTP date half the time, which Debian's Caddy 2.6.2 (its
        // ACME client) cannot parse, and then waits a minute to try again. Let's Encrypt sends seconds.
        retryAfter: { authz: 0, order: 0 },
        profiles: { default: { description: "the tests' only profile", validityPeriod: 7776000 } },
      },
    }),
  );
  const log: string[] = [];
  const dns = started(
    pebbleBin("pebble-challtestsrv"),
    [
      ...["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""],
      ...["-dnsserver", `127.0.0.1:${dnsPort}`, "-management", `127.0.0.1:${dnsManagementPort}`],
      ...["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""],
    ],
    process.env,
    log,
  );
  // No random nonce rejections or validation sleeps: the test is about the client, not Pebble's chaos.
  const pebble = started(
    pebbleBin("pebble"),
    ["-config", file("pebble.json"), "-dnsserver", `127.0.0.1:${dnsPort}`],
    { ...process.env, PEBBLE_VA_NOSLEEP: "1", PEBBLE_WFE_NONCEREJECT: "0" },
    log,
  );
  const listenerCa = readFileSync(file("ca.pem"), "utf8");
  const directory = `https://127.0.0.1:${acmePort}/dir`;
  const stop = async () => {
    for (const child of [pebble, dns]) if (child.exitCode === null) child.kill("SIGTERM");
    await fs.rm(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(`pebble on ${directory}`, 15_000, async () => {
      for (const child of [pebble, dns])
        if (child.exitCode !== null) throw new Error(`exited ${child.exitCode}: ${log.join("").trim()}`);
      const answer = await get(directory, listenerCa).catch(() => undefined);
      return answer?.status === 200 ? true : undefined;
    });
  } catch (error) {
    await stop();
    throw new Error(`${(error as Error).message}; its log: ${log.join("").trim().slice(-2000)}`);
  }
  return {
    directory,
    listenerCa: file("ca.pem"),
    async issuingRoot() {
      const answer = await get(`https://127.0.0.1:${managementPort}/roots/0`, listenerCa);
      if (answer.status !== 200) throw new Error(`pebble's root: ${answer.status} ${answer.body}`);
      return answer.body;
    },
    stop,
  };
}
